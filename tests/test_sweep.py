"""Sweeps: every variant runs into its own workdir, a failing variant does not stop the
others, a re-run skips finished variants, and the report is written; with seeds, every
variant runs under seeds 1..N, the seeds give other parameters on the same test sentences,
and raising N runs only the new seeds."""

import json
import os
import select
import shutil
import subprocess
import time

import jax
import numpy as np
import pytest

from attention_jax import devices
from attention_jax import workdir as workdir_lib
from attention_jax.analysis import stats
from attention_jax.evaluation import records
from attention_jax.loaded import loading
from attention_jax.models import multihead
from attention_jax.sweeps import local_executor, sweep_file
from helpers import TINY_SWEEP, hold_env, run_module, sweep_cmd, wait_held

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sweep(cmd: list[str]) -> subprocess.CompletedProcess:
  """A sweep's command line (helpers.sweep_cmd: python -m experiments.sweep ...) with the sweep
  forked from the tests' fork server (helpers.run_module); its runs are processes of their own."""
  assert cmd[1:3] == ['-m', 'experiments.sweep'], cmd
  return run_module('experiments.sweep', *cmd[3:], timeout=900)


@pytest.fixture(scope='module')
def short_sweep(tmp_path_factory, data_dir):
  """(root, the finished process) of TINY_SWEEP for 4 steps, one seed, two runs at a time: the
  default suite's sweep. (conftest.local_sweep, 75 steps under 2 seeds, is for the tests that
  hold a run at step 50 and for the seeds' tests, after the suite.)"""
  tmp = tmp_path_factory.mktemp('short_sweep')
  path, root = tmp / 'tiny_sweep.py', tmp / 'runs'
  path.write_text(TINY_SWEEP)
  return root, run_sweep(sweep_cmd(path, root, data_dir, '--parallel=2', seeds=1) + [
      '--config.train.steps=4', '--config.train.checkpoint_every=2',
      '--config.train.eval_every=4', '--config.train.log_every=2'])


def test_sweep_runs_every_variant_and_reports_and_a_failure_stops_nothing(short_sweep):
  root, proc = short_sweep
  out = proc.stdout + proc.stderr
  assert proc.returncode == 1, out               # one variant failed: the sweep says so
  assert 'sweep tiny_sweep_smoke: 2 finished, 0 skipped, 1 failed' in out
  sweep_dir = root / 'tiny_sweep_smoke'
  assert '[broken/seed_1] FAILED' in out and 'no training example fits data.max_src_len' in (
      sweep_dir / 'broken' / 'seed_1' / 'train.log').read_text()
  for v in ('additive', 'general'):
    assert sorted(os.listdir(sweep_dir / v)) == ['seed_1']
    results = json.loads((sweep_dir / v / 'seed_1' / 'results.json').read_text())
    assert results['step'] == 4, out
  for f in ('summary.md', 'summary.csv', 'by_length.csv', 'comparisons.csv', 'runs.csv',
            'bars.png', 'bleu_by_length.png'):
    assert (sweep_dir / f).exists(), f
  assert '| additive | 1 |' in (sweep_dir / 'summary.md').read_text()


def read_until(proc, needle: str, patience: float = 600) -> str:
  """What `proc` printed up to and including the first line holding `needle` (the event the
  test waits for); fails if it ends first. `patience` guards against a hang only."""
  seen, deadline = [], time.monotonic() + patience
  while True:
    assert time.monotonic() < deadline, f'no {needle!r} in {patience:.0f} s: ' + ''.join(seen)
    if not select.select([proc.stdout], [], [], 1.0)[0]:
      continue
    line = proc.stdout.readline()
    assert line, f'it ended (exit {proc.wait()}) before {needle!r}: ' + ''.join(seen)
    seen.append(line)
    if needle in line:
      return ''.join(seen)


@pytest.mark.scenario
def test_a_killed_sweep_takes_its_runs_with_it_and_a_rerun_resumes_them(local_sweep, tmp_path):
  """SIGKILL of the sweep while its run is at step 60 (checkpoints at 25, 50, 75): the run
  gets SIGTERM (it saves step 60 and exits) instead of training on as an orphan; the same
  command at once waits for it (the run still holds its workdir: it is held through the
  signal, hold.py, until the rerun says it waits) and resumes the run from step 60 (it used to
  fail, 'workdir in use'); the killed attempt's time is kept in wall_time.json. The run is held
  while the sweep's heartbeat records 10 s, so no machine is too fast or too slow for it."""
  path, _, data_dir, _ = local_sweep
  cmd = sweep_cmd(path, tmp_path, data_dir, '--only=additive', seeds=1)
  run = tmp_path / 'tiny_sweep_smoke' / 'additive' / 'seed_1'
  held_file = tmp_path / 'held'
  env = hold_env(held_file, step=60, workdir=run)
  env['ATTENTION_JAX_HOLD'] = json.dumps({**json.loads(env['ATTENTION_JAX_HOLD']),
                                          'through_signals': True})
  sweep = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=env)
  again = None
  try:
    child = wait_held(held_file, sweep)['pid']

    def beat():
      try:
        return json.loads((run / 'wall_time.json').read_text().splitlines()[-1])['seconds']
      except (OSError, IndexError, ValueError):
        return 0
    deadline = time.monotonic() + 600   # a stalled heartbeat fails the test, not CI's clock
    while beat() < 10:          # the sweep's next heartbeat (every 10 s) while the run holds
      assert sweep.poll() is None and os.path.exists(f'/proc/{child}')
      assert time.monotonic() < deadline, 'no heartbeat in wall_time.json within 600 s'
      time.sleep(0.1)
    sweep.kill()
    sweep.wait()
    while not json.loads(held_file.read_text()).get('signalled'):   # its SIGTERM, received
      assert os.path.exists(f'/proc/{child}'), 'the run ended while held'
      assert time.monotonic() < deadline + 600, 'the run got no SIGTERM from its dead sweep'
      time.sleep(0.05)
    again = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    said = read_until(again, '[additive/seed_1] waiting: ')
    assert f'is in use by process {child} on ' in said, said
    held_file.unlink()          # released: the run saves step 60 and exits
    out = said + again.communicate(timeout=900)[0]
  finally:
    for proc in (sweep, again):
      if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
  assert again.returncode == 0, out
  assert '[additive/seed_1] resuming: model.score=additive seed=1' in out
  log = (run / 'train.log').read_text()
  assert 'stopped by SIGTERM at step 60' in log and (
      f'resumed from {run}/checkpoints/latest step 60') in log, log[-3000:]
  first, second = [json.loads(x) for x in (run / 'wall_time.json').read_text().splitlines()]
  assert first['returncode'] is None and first['seconds'] >= 10    # the killed attempt's time
  assert second['returncode'] == 0 and second['seconds'] > 0


def test_transformer_scores_sweep_arguments():
  """Its variants are the 7 content scores; a task and 'smoke' combine; a bad argument fails
  before any variant runs, naming the valid ones."""
  path = os.path.join(ROOT, 'experiments', 'configs', 'transformer_scores.py')
  name, variants = sweep_file.load_sweep(f'{path}:reverse,smoke', root='/tmp/x')
  assert name == 'transformer_scores_reverse_smoke'
  assert [v.name for v in variants] == multihead.content_scores()
  with pytest.raises(ValueError, match="unknown config argument 'bogus'; valid: a task"):
    sweep_file.load_sweep(f'{path}:bogus')
  assert sweep_file.select(variants, ['scaled_*']) == [v for v in variants if v.name.startswith(
      'scaled_')]
  with pytest.raises(ValueError, match="--only pattern 'nope' matches no variant; variants: "
                                       'additive'):
    sweep_file.select(variants, ['nope'])


SEED_SWEEP = """
from experiments.configs import dates

SEEDS = 5    # --seeds wins

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'})]
"""


@pytest.mark.extended   # a second sweep (half a minute): after the suite, in CI
def test_seeds_give_other_parameters_on_the_same_test_set_and_more_seeds_run_only_new_ones(
    local_sweep, tmp_path):
  path, root, data_dir, proc = local_sweep
  out = proc.stdout + proc.stderr                # every seed of every variant ran
  assert 'sweep tiny_sweep_smoke: 4 finished, 0 skipped, 2 failed' in out
  assert '| additive | 2 |' in (root / 'tiny_sweep_smoke' / 'summary.md').read_text()
  variant = root / 'tiny_sweep_smoke' / 'additive'
  loaded = [loading.load(str(variant / f'seed_{k}')) for k in (1, 2)]
  assert [json.loads((variant / f'seed_{k}' / 'config.json').read_text())['seed']
          for k in (1, 2)] == [1, 2]
  leaves = [jax.tree.leaves(t.params) for t in loaded]
  assert any(not np.array_equal(a, b) for a, b in zip(*leaves))     # another init / training
  heads = [records.read(workdir_lib.Run(str(variant / f'seed_{k}')).sentences_path('test')) for k in (1, 2)]
  assert heads[0][0]['fingerprint'] == heads[1][0]['fingerprint']   # the same test sentences
  assert [r['id'] for r in heads[0][1]] == [r['id'] for r in heads[1][1]]
  for k, (header, recs) in zip((1, 2), heads):   # the records reproduce the run's results
    res = json.loads((variant / f'seed_{k}' / 'results.json').read_text())['results']['test']
    assert header['sentences'] == res['sentences']
    for m in ('bleu', 'chrf', 'exact_match'):
      assert stats.corpus_score(records.stats(recs, m), m, header['bleu_tokenize']) == (
          pytest.approx(res[m], abs=1e-9))

  copy = tmp_path / 'runs'        # (the shared sweep stays as it is for the Ray test)
  shutil.copytree(root, copy)
  again = run_sweep(sweep_cmd(path, copy, data_dir, '--only=additive,broken', '--parallel=2',
                              seeds=3) + ['--config.train.steps=20'])
  out = again.stdout + again.stderr
  assert again.returncode == 1, out
  assert '[additive/seed_1] finished earlier' in out and '[additive/seed_2] finished earlier' in out
  assert '[additive/seed_3] starting: model.score=additive seed=3' in out
  assert '[broken/seed_1] starting' in out        # failed runs are tried again
  assert 'sweep tiny_sweep_smoke: 1 finished, 2 skipped, 3 failed' in out
  assert '| additive | 3 |' in (copy / 'tiny_sweep_smoke' / 'summary.md').read_text()


def test_seeds_from_the_sweep_file_and_a_single_seed_run_in_the_way(tmp_path):
  path = tmp_path / 'seed_sweep.py'
  path.write_text(SEED_SWEEP)
  _, runs = sweep_file.load_sweep(str(path), root=str(tmp_path))
  assert [v.label for v in runs] == [f'additive/seed_{k}' for k in range(1, 6)]
  assert sweep_file.command(str(path), runs[2])[-2:] == [
      '--config.seed=3', f'--workdir={tmp_path}/seed_sweep/additive/seed_3']
  assert len(sweep_file.load_sweep(str(path), root=str(tmp_path), seeds=2)[1]) == 2
  os.makedirs(tmp_path / 'seed_sweep' / 'additive')
  (tmp_path / 'seed_sweep' / 'additive' / 'config.json').write_text('{}')
  with pytest.raises(ValueError, match='holds a single-seed run of variant .additive.'):
    sweep_file.load_sweep(str(path), root=str(tmp_path))
  # another variant's single-seed folder is not in the way of the one --only selects
  path.write_text(SEED_SWEEP.replace("]\n", ", ('dot', {'model.score': 'dot'})]\n"))
  _, runs = sweep_file.load_sweep(str(path), root=str(tmp_path), seeds=2, only=['dot'])
  assert [v.label for v in runs] == ['dot/seed_1', 'dot/seed_2']
  with pytest.raises(ValueError, match='holds a single-seed run of variant .additive.'):
    sweep_file.load_sweep(str(path), root=str(tmp_path), seeds=2, only=['add*'])
  with pytest.raises(ValueError, match='seeds must be a whole number >= 1, got 0'):
    sweep_file.load_sweep(str(path), root=str(tmp_path / 'x'), seeds=0)


def test_a_sweep_file_that_is_not_python_is_one_error_naming_the_line(tmp_path):
  """(It used to be a 31-line traceback; the CLI prints ValueError as one line, exit 2.)"""
  bad = tmp_path / 'bad.py'
  bad.write_text('def get_sweep(arg=None):\n  return [(\n\nx = (\n')
  with pytest.raises(ValueError, match=rf'{bad} line \d+: .* \(the sweep file is not valid '
                                       r'Python\)'):
    sweep_file.load_sweep(str(bad))
  bad.write_text('import no_such_module_here\n')
  with pytest.raises(ValueError, match="ModuleNotFoundError: No module named 'no_such_module"):
    sweep_file.load_sweep(str(bad))


@pytest.mark.extended   # sweeps run again (20 s): after the suite, in CI
def test_a_changed_variant_is_named_not_skipped_nor_reported_and_reruns_on_request(
    local_sweep, tmp_path):
  """The sweep file's `additive` variant is edited to train `dot`: its finished runs used to
  be skipped and reported as the new variant ('finished earlier', exit 0). Now each is named
  with the fields that differ, left out of the report, and the sweep exits 1;
  --rerun_changed sets the old run aside (never deleted) and trains the variant afresh."""
  _, root, data_dir, _ = local_sweep
  copy = tmp_path / 'runs'
  shutil.copytree(root, copy)
  edited = tmp_path / 'tiny_sweep.py'          # the same sweep (its name is the file's)
  edited.write_text(TINY_SWEEP.replace("('additive', {'model.score': 'additive'})",
                                       "('additive', {'model.score': 'dot'})"))
  again = run_sweep(sweep_cmd(edited, copy, data_dir, '--only=additive,general', seeds=1))
  out = again.stdout + again.stderr
  assert again.returncode == 1, out
  diff = "model.score: saved 'additive', now 'dot'"
  assert f'[additive/seed_1] CHANGED since it finished ({diff}): not skipped, not reported' in out
  assert f'[additive/seed_2] CHANGED since it finished ({diff}): not reported' in out  # not run now
  assert 'finished earlier' in out.split('[general/seed_1]')[1].splitlines()[0]
  assert ('sweep tiny_sweep_smoke: 0 finished, 1 skipped, 0 failed, 2 changed and not reported '
          '(additive/seed_1, additive/seed_2)') in out
  summary = (copy / 'tiny_sweep_smoke' / 'summary.md').read_text()
  assert '| general | 2 |' in summary and '| additive |' not in summary

  rerun = run_sweep(sweep_cmd(edited, copy, data_dir, '--only=additive', '--rerun_changed',
                              seeds=1) + ['--config.train.steps=10'])
  out = rerun.stdout + rerun.stderr
  assert rerun.returncode == 1, out          # seed_2 still changed (not run: --seeds=1)
  aside = list((copy / 'tiny_sweep_smoke' / sweep_file.REPLACED).glob('*/additive/seed_1'))
  assert len(aside) == 1 and f'the old run is set aside in {aside[0]}' in out
  old = json.loads((aside[0] / 'config.json').read_text())
  assert old['model']['score'] == 'additive' and (aside[0] / 'results.json').exists()
  run = copy / 'tiny_sweep_smoke' / 'additive' / 'seed_1'
  assert json.loads((run / 'config.json').read_text())['model']['score'] == 'dot'
  assert '[additive/seed_1] finished' in out
  summary = (copy / 'tiny_sweep_smoke' / 'summary.md').read_text()
  assert '| additive | 1 |' in summary and '| general | 2 |' in summary


class _FakeRun:
  """subprocess.Popen for _run_local: records the environment and the runs live on its device
  when it starts, and ends (exit 0) at its third poll."""
  live: dict = {}
  started: list = []

  def __init__(self, cmd, env, **kw):
    del cmd, kw
    self.device = env['CUDA_VISIBLE_DEVICES']
    _FakeRun.live[self.device] = _FakeRun.live.get(self.device, 0) + 1
    _FakeRun.started.append((self.device, env.get(devices.MEMORY_ENV),
                             dict(_FakeRun.live)))
    self.polls, self.returncode = 0, None

  def poll(self):
    self.polls += 1
    if self.polls >= 3 and self.returncode is None:
      self.returncode = 0
      _FakeRun.live[self.device] -= 1
    return self.returncode


def test_runs_per_device_share_each_accelerator_and_its_memory(monkeypatch, tmp_path):
  """--runs_per_device=K on 2 accelerators: K runs at once on each (spread over both first),
  each told to preallocate 0.9 / K of the device's memory (a fraction the user set wins);
  refused on a machine without accelerators; a fractional Ray GPU gets its share too."""
  monkeypatch.delenv(devices.MEMORY_ENV, raising=False)
  monkeypatch.setattr(local_executor, 'accelerators', lambda: ['0', '1'])
  monkeypatch.setattr(local_executor.subprocess, 'Popen', _FakeRun)
  monkeypatch.setattr(sweep_file, 'finished', lambda v: True)
  _FakeRun.live, _FakeRun.started = {}, []
  queue = [sweep_file.Variant(f'v{i}', {}, str(tmp_path / f'v{i}')) for i in range(7)]
  status = local_executor.local(runs_per_device=3)('cfg.py', 'toy', queue, str(tmp_path), [])
  assert status == {f'v{i}': 'finished' for i in range(7)}
  assert [d for d, _, _ in _FakeRun.started[:2]] == ['0', '1']          # both devices first
  assert {share for _, share, _ in _FakeRun.started} == {'0.300'}
  assert max(n for _, _, live in _FakeRun.started for n in live.values()) == 3
  assert devices.memory_env(1.0) == {} and devices.memory_env(0.25) == {devices.MEMORY_ENV: '0.225'}
  monkeypatch.setenv(devices.MEMORY_ENV, '0.5')
  assert devices.memory_env(0.25) == {}
  monkeypatch.setattr(local_executor, 'accelerators', lambda: [])
  with pytest.raises(ValueError, match='--runs_per_device=2 shares accelerators, and this '
                                       'machine has none'):
    local_executor.local(runs_per_device=2)('cfg.py', 'toy', queue, str(tmp_path), [])


def test_out_of_accelerator_memory_is_one_line_naming_the_share(monkeypatch):
  from experiments import cli   # pylint: disable=g-import-not-at-top
  error = jax.errors.JaxRuntimeError(
      'RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes.\nBufferAssignment...')
  monkeypatch.setenv(devices.MEMORY_ENV, '0.300')
  line = cli.out_of_memory(error)
  assert line.startswith('error: out of accelerator memory (RESOURCE_EXHAUSTED: Out of memory '
                         'while trying to allocate 1073741824 bytes.); this process had 0.300')
  assert '\n' not in line and 'run fewer per device' in line


def test_a_training_out_of_memory_names_its_share_of_the_device(monkeypatch, tmp_path):
  """A run given a share of an accelerator (memory_env) that runs out of memory says so."""
  from attention_jax.training import train  # pylint: disable=g-import-not-at-top
  from experiments.configs import dates   # pylint: disable=g-import-not-at-top

  def oom(*args):
    raise RuntimeError('RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes.')
  monkeypatch.setattr(train, '_train_and_evaluate', oom)
  monkeypatch.setenv(devices.MEMORY_ENV, '0.300')
  with pytest.raises(MemoryError, match=r'make the model or the batch smaller \(this process '
                                        r'had 0.300 of the device: runs that share one'):
    train.train_and_evaluate(dates.get_config('smoke'), str(tmp_path / 'run'))
