"""The rows of docs/reliability.md's guarantees table that no other module tests: two sweeps
on one directory, read-only and no-permission workdirs, the temp-file-and-rename of a run's
JSON files, ATTENTION_JAX_TRACEBACK, the one-line errors of data-info and bench, no pickle,
eval or shell, the state after a non-finite step, the disk-full output of the command, and a
resume into a folder of a user's files."""

import ast
import builtins
import errno
import functools
import glob
import json
import os
import pickle
import re
import shutil
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

import attention_jax as aj
import helpers
from attention_jax import workdir as workdir_lib
from attention_jax.models.model import ModelConfig
from attention_jax.state import templates
from attention_jax.training import objective, train, update

ROOT = helpers.ROOT


def _tree(folder):
  """Every file and folder under `folder`, with its modification time and its bytes."""
  return {p: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
          for p in folder.rglob('*')}


# ---- two sweeps on one directory ---------------------------------------------------------------
@pytest.mark.scenario
def test_a_second_sweep_on_a_busy_directory_is_one_line_exit_2_and_changes_nothing(tmp_path):
  """The first sweep holds right after it locked its directory (hold point 'sweep_locked'):
  the second, the same command, is refused with one line and exit 2, and nothing under the
  sweep's root changes."""
  path, root, data_dir = tmp_path / 'tiny_sweep.py', tmp_path / 'runs', tmp_path / 'tfds'
  path.write_text(helpers.TINY_SWEEP)
  cmd = helpers.sweep_cmd(path, root, data_dir)
  sweep_dir = root / 'tiny_sweep_smoke'
  held = tmp_path / 'held'
  first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=helpers.hold_env(held, 'sweep_locked',
                                                           workdir=sweep_dir))
  try:
    pid = helpers.wait_held(held, first)['pid']
    before = _tree(root)
    second = helpers.run_module(*cmd[2:])
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stderr.strip().splitlines() == [
        f'error: workdir {sweep_dir} is in use by process {pid} on {os.uname().nodename}; '
        'wait for it to finish or choose another --workdir'], second.stderr
    assert _tree(root) == before
  finally:
    first.kill()
    first.wait()


# ---- unusable workdirs -------------------------------------------------------------------------
def test_read_only_and_no_permission_workdirs_are_one_line_before_any_data(tmp_path):
  """A read-only workdir and one without any permission: `error: cannot use RUN as a workdir:
  Permission denied`, exit 2, before any data is prepared. As root (CI), the commands run without the capabilities that
  override permission bits."""
  ro, closed = tmp_path / 'read_only', tmp_path / 'closed'
  ro.mkdir()
  closed.mkdir()
  (ro / 'notes.txt').write_text('mine')
  data_dir = tmp_path / 'tfds'
  ro.chmod(0o555)
  closed.chmod(0o000)
  try:
    workdirs = [ro, closed]
    procs = [subprocess.Popen(
        [sys.executable, '-m', 'experiments.main', '--config=experiments/configs/dates.py:smoke',
         f'--config.data.data_dir={data_dir}', f'--workdir={w}'], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=helpers.without_dac_override if os.geteuid() == 0 else None) for w in workdirs]
    for w, proc in zip(workdirs, procs):
      out, err = proc.communicate(timeout=600)
      assert proc.returncode == 2, out + err
      assert err.strip().splitlines() == [
          f'error: cannot use {w} as a workdir: Permission denied'], err
    assert not data_dir.exists()
  finally:
    ro.chmod(0o755)
    closed.chmod(0o755)
  assert sorted(os.listdir(ro)) == ['notes.txt'] and os.listdir(closed) == []


# ---- config.json, model_config.json, results.json: a temp file and a rename ---------------------
@pytest.mark.parametrize('name', [workdir_lib.CONFIG, workdir_lib.MODEL_CONFIG,
                                  workdir_lib.RESULTS])
def test_a_write_that_fails_midway_leaves_the_old_file_whole_and_no_temp_file(
    name, tmp_path, monkeypatch):
  run = workdir_lib.Run(str(tmp_path))
  run.write_config('{"old": "config"}', {'old': 'model'})
  run.write_results({'old': 'results'})
  before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}

  def failing_open(path, mode='r', *args, **kwargs):
    f = open(path, mode, *args, **kwargs)   # (the module's open is this one: builtins')
    base = os.path.basename(str(path))
    if 'w' in mode and (base == name or base.startswith(name + '.tmp')):
      real_write = f.write
      def write(text):   # half of it reaches the disk, then the disk is full
        real_write(text[:len(text) // 2])
        f.flush()
        raise OSError(errno.ENOSPC, 'No space left on device')
      f.write = write
    return f
  monkeypatch.setattr(workdir_lib, 'open', failing_open, raising=False)
  with pytest.raises(OSError, match='No space left'):
    if name == workdir_lib.RESULTS:
      run.write_results({'new': 'results ' * 100})
    else:
      run.write_config(json.dumps({'new': 'config ' * 100}), {'new': 'model ' * 100})
  assert (tmp_path / name).read_bytes() == before[name]
  assert not [n for n in os.listdir(tmp_path) if '.tmp' in n], os.listdir(tmp_path)


# ---- ATTENTION_JAX_TRACEBACK, one-line errors of data-info and bench -----------------------------
def test_an_expected_failure_is_one_line_and_attention_jax_traceback_shows_the_traceback(
    tmp_path, monkeypatch):
  a_file = tmp_path / 'file'
  a_file.write_text('x')
  args = ('experiments.main', '--config=experiments/configs/dates.py:smoke', f'--workdir={a_file}')
  plain = helpers.run_module(*args)
  assert plain.returncode == 2
  assert plain.stderr.strip().splitlines() == [
      f'error: cannot use {a_file} as a workdir: File exists'], plain.stderr
  monkeypatch.setenv('ATTENTION_JAX_TRACEBACK', '1')
  shown = helpers.run_module(*args)
  assert shown.returncode != 0
  assert 'Traceback (most recent call last)' in shown.stderr
  assert f'cannot use {a_file} as a workdir' in shown.stderr.strip().splitlines()[-1]


def test_a_failing_evaluate_is_one_line_exit_2_and_attention_jax_traceback_shows_it(
    tmp_path, monkeypatch):
  """`evaluate` of a workdir whose model_config.json lacks its fields (it used to be a
  TypeError traceback, exit 1) and whose config.json is cut short: one `error:` line naming
  the workdir and the cause, exit 2, nothing on stdout; with ATTENTION_JAX_TRACEBACK=1 the
  traceback, ending in the same error."""
  run = tmp_path / 'run'
  run.mkdir()
  (run / workdir_lib.CONFIG).write_text('{"model": {"arch": "rnn"')
  (run / workdir_lib.MODEL_CONFIG).write_text('{}')
  args = ('experiments.evaluate', f'--workdir={run}')
  plain = helpers.run_module(*args)
  assert plain.returncode == 2 and plain.stdout == '', plain.stderr
  lines = plain.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      f"error: '{run}' is not a usable attention_jax workdir: "), plain.stderr
  monkeypatch.setenv('ATTENTION_JAX_TRACEBACK', '1')
  shown = helpers.run_module(*args)
  assert shown.returncode != 0 and 'Traceback (most recent call last)' in shown.stderr
  assert 'is not a usable attention_jax workdir' in shown.stderr.strip().splitlines()[-1]


def test_data_info_and_bench_refuse_bad_input_in_one_line_with_exit_2(tmp_path):
  cases = {
      'experiments.data_info': [
          (['--config=experiments/configs/dates.py:smoke', '--config.data.name=bogus',
            f'--config.data.data_dir={tmp_path / "tfds"}'],
           "unknown data.name 'bogus'; valid: dates, "),
          (['--config=experiments/configs/nope.py'],
           "No such file or directory: 'experiments/configs/nope.py'"),
      ],
      'experiments.benchmark': [
          (['--configs=bogus', f'--out={tmp_path / "b.json"}'],
           "unknown or no config(s) ['bogus']; valid: base, char"),
          (['--quick', f'--out={tmp_path / "missing" / "b.json"}'],
           f'{tmp_path / "missing"}: no such folder for the output file'),
      ]}
  for module, runs in cases.items():
    procs = helpers.run_modules(module, [argv for argv, _ in runs])
    for (argv, needle), proc in zip(runs, procs):
      lines = proc.stderr.strip().splitlines()
      assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith('error: ') \
          and needle in lines[0], (
          module, argv, proc.stderr[-2000:])
  assert os.listdir(tmp_path) == []   # no data prepared, no output written


# ---- no pickle, no eval, no shell -----------------------------------------------------------------
def _sources():
  for folder in ('attention_jax', 'experiments'):
    for path in sorted(glob.glob(os.path.join(ROOT, folder, '**', '*.py'), recursive=True)):
      with open(path, encoding='utf-8') as f:
        yield os.path.relpath(path, ROOT), ast.parse(f.read())


def test_the_code_never_unpickles_evaluates_or_passes_anything_to_a_shell():
  """No import of pickle (or marshal, shelve, dill, cloudpickle), no eval / exec, no
  allow_pickle=True, no os.system / os.popen, no subprocess with shell=True, in the package
  and the entry points."""
  found = []
  for path, tree in _sources():
    for node in ast.walk(tree):
      where = f'{path}:{getattr(node, "lineno", "?")}'
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] + ([node.module] if isinstance(
            node, ast.ImportFrom) and node.module else [])
        found += [f'{where} imports {n}' for n in names if n.split('.')[0] in (
            'pickle', 'cPickle', '_pickle', 'marshal', 'shelve', 'dill', 'cloudpickle')]
      if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ''
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ''
        if (isinstance(f, ast.Name) and name in ('eval', 'exec')) or (
            owner == 'os' and name in ('system', 'popen')):
          found.append(f'{where} calls {owner + "." if owner else ""}{name}')
        for kw in node.keywords:
          if kw.arg in ('shell', 'allow_pickle') and not (
              isinstance(kw.value, ast.Constant) and kw.value.value is False):
            found.append(f'{where} passes {kw.arg}=...')
  assert not found, found


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
  return helpers.uninterrupted(tmp_path_factory)[0]


@pytest.mark.extended   # a run of its own unless the scenario tests made it (CI: both, once)
def test_loading_and_translating_a_run_never_unpickles_or_evaluates(finished_run, tmp_path,
                                                                    monkeypatch):
  """aj.load and translate of a copy of a finished run with pickle's loaders and eval / exec
  made to raise (after a first load imported what loading imports)."""
  run = str(tmp_path / 'run')
  shutil.copytree(finished_run, run)
  expected = aj.load(run).translate(['Nov 3, 1999', '4th of April 1918'])
  def refuse(*args, **kwargs):
    raise AssertionError('unpickled or evaluated something')
  for name in ('load', 'loads', 'Unpickler'):
    monkeypatch.setattr(pickle, name, refuse)
  monkeypatch.setattr(builtins, 'eval', refuse)
  monkeypatch.setattr(builtins, 'exec', refuse)
  t = aj.load(run)
  assert t.translate(['Nov 3, 1999', '4th of April 1918']) == expected


# ---- a non-finite step leaves the state as it was -------------------------------------------------
def test_a_non_finite_step_leaves_parameters_optimiser_state_and_ema_unchanged():
  """The step is counted and flagged (finite False); params, opt and the EMA equal those
  before it, bit for bit, while a finite step on the same batch changes them."""
  mcfg = ModelConfig(src_vocab=12, tgt_vocab=10, emb_dim=8, enc_hidden=8, dec_hidden=16,
                     attn_dim=8)
  tx = train.make_optimizer(ml_collections.ConfigDict(dict(
      lr=1e-2, warmup_steps=1, decay='constant', steps=4, weight_decay=0.0, clip_norm=1.0)))
  graphdef, state = templates.init_state(mcfg, tx, 0, ema=True)
  rng = np.random.default_rng(0)
  src = rng.integers(3, 12, (8, 7)).astype(np.int32)
  tgt = rng.integers(3, 10, (8, 6)).astype(np.int32)
  batch = {'src': src, 'tgt_in': tgt, 'tgt_out': tgt, 'weight': np.ones(8, np.float32),
           'index': np.arange(8, dtype=np.int32)}
  step = jax.jit(functools.partial(update.train_step, graphdef, tx, objective.Objective(), 0,
                                   ema_decay=0.5))
  state = step(state, batch)[0]   # (the warmup's first step has a learning rate of 0)
  before = jax.tree.map(np.asarray, state)
  good, m = step(state, batch)
  assert bool(m['finite'])
  poisoned = {**batch, 'tgt_out': tgt.copy()}
  poisoned['tgt_out'][0, 0] = 10**6   # no such token: its log-probability is NaN
  bad, m = step(state, poisoned)
  assert not bool(m['finite']) and not np.isfinite(float(m['objective']))
  assert int(bad['step']) == int(before['step']) + 1
  for part in ('params', 'opt', 'ema'):
    leaves = zip(jax.tree.leaves(bad[part]), jax.tree.leaves(before[part]), strict=True)
    assert all(np.array_equal(np.asarray(x), y) for x, y in leaves), part
    assert not all(np.array_equal(np.asarray(x), y) for x, y in zip(
        jax.tree.leaves(good[part]), jax.tree.leaves(before[part]))), part


# ---- disk full: the command's whole output ----------------------------------------------------------
def _tmpfs_works() -> bool:
  """Whether a user and mount namespace with a tmpfs can be made here (unshare -rm)."""
  return shutil.which('unshare') is not None and subprocess.run(
      ['unshare', '-rm', 'sh', '-c', 'mount -t tmpfs -o size=64k tmpfs /mnt'],
      capture_output=True).returncode == 0


# ENOSPC where no small disk can be mounted: the kernel's error for the step's directory,
# as Orbax makes it (the rest of the run writes where it is)
ENOSPC_AT_SAVE = r"""
import errno, os, runpy, sys
real = os.mkdir
def mkdir(path, *args, **kwargs):
  if str(path).endswith('.orbax-checkpoint-tmp') and '/checkpoints/' in str(path):
    raise OSError(errno.ENOSPC, 'No space left on device', str(path))
  return real(path, *args, **kwargs)
os.mkdir = mkdir
sys.argv = ['experiments.main', *sys.argv[1:]]
runpy.run_module('experiments.main', run_name='__main__', alter_sys=True)
"""


@pytest.mark.extended   # a training command (about 15 s): after the suite, in CI
def test_disk_full_during_a_save_is_the_log_and_one_error_line_with_exit_2(tmp_path):
  """On a 400 KiB tmpfs (a mount namespace of its own; where none can be made, ENOSPC from
  the mkdir of the step's directory), the data prepared before: the log's lines, then
  `error: disk full while saving step N in RUN/checkpoints/...; last good checkpoint: ...`
  (or `no earlier checkpoint in ...`), exit 2; no traceback, none of Orbax's or asyncio's
  noise."""
  from attention_jax import data  # pylint: disable=g-import-not-at-top
  from experiments.configs import dates  # pylint: disable=g-import-not-at-top
  data.load_task(helpers.smoke(dates, str(tmp_path / 'tfds')).data, seed=0)   # prepared before
  disk = tmp_path / 'disk'
  disk.mkdir()
  run = disk / 'run'
  args = ['--config=experiments/configs/dates.py:smoke',
          f'--config.data.data_dir={tmp_path / "tfds"}', f'--workdir={run}']
  env = helpers.fault_env()
  if _tmpfs_works():
    cmd = ['unshare', '-rm', 'sh', '-c', f'mount -t tmpfs -o size=400k tmpfs {disk} && exec '
           f'"$0" "$@"', sys.executable, '-m', 'experiments.main', *args]
  else:
    cmd = [sys.executable, '-c', ENOSPC_AT_SAVE, *args]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()   # the log: its header, steps and validations
  assert lines[0].startswith('[single: ') and all(
      l.startswith(('step ', '  validation @ ')) for l in lines[1:]), proc.stdout
  errors = proc.stderr.strip().splitlines()
  assert len(errors) == 1 and re.fullmatch(
      rf'error: disk full while saving step \d+ in {re.escape(str(run))}/checkpoints/'
      rf'(latest|best); (last good checkpoint: step \d+|no earlier checkpoint in '
      rf'{re.escape(str(run))}/checkpoints/\1)', errors[0]), proc.stderr


# ---- resuming into a folder that is not a run ------------------------------------------------------
def test_a_resume_into_a_folder_of_user_files_without_a_checkpoint_is_refused(tmp_path):
  """train.resume=True (the default) into a non-empty folder that holds no run is refused,
  as a fresh start there is, and the folder is left as it was (the command too: one line,
  exit 2); a sweep's variant or seed folder (its train.log and wall_time.json written before
  the run) and a run stopped before its first checkpoint are resumed in as before."""
  user = tmp_path / 'user'
  (user / 'src').mkdir(parents=True)
  (user / 'notes.txt').write_text('mine')
  (user / 'src' / 'a.py').write_text('x = 1')
  before = _tree(user)
  with pytest.raises(FileExistsError, match=re.escape(
      f"workdir '{user}' is not empty and holds no run to resume (it holds notes.txt, src)")):
    train.prepare_workdir(str(user), resume=True, overwrite=False)
  proc = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                            f'--config.data.data_dir={tmp_path / "tfds"}', f'--workdir={user}')
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
      f"error: workdir '{user}' is not empty and holds no run to resume (it holds notes.txt, "
      "src): choose another --workdir"], proc.stderr
  assert _tree(user) == before and not (tmp_path / 'tfds').exists()

  variant = tmp_path / 'sweep' / 'v' / 'seed_0'   # what a sweep writes before the run
  variant.mkdir(parents=True)
  (variant / workdir_lib.TRAIN_LOG).write_text('== attempt 1\n')
  (variant / workdir_lib.WALL_TIME).write_text('')
  train.prepare_workdir(str(variant), resume=True, overwrite=False)
  stopped = tmp_path / 'stopped'   # a run stopped before its first checkpoint
  stopped.mkdir()
  workdir_lib.Run(str(stopped)).write_config('{}', {})
  (stopped / workdir_lib.TOKENIZERS).mkdir()
  train.prepare_workdir(str(stopped), resume=True, overwrite=False)
