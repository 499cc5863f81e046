"""Guards against misuse: one run per workdir (the lock), one clear line for expected errors,
bounded work, safe sweep variant names."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from attention_jax import workdir
from attention_jax.models import model as model_lib
from attention_jax.sweeps import sweep_file
from experiments import cli

import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLD = ('import sys, time; from attention_jax import workdir; '
        'workdir.WorkdirLock(sys.argv[1]).acquire(); print("held", flush=True); time.sleep(600)')


def test_lock_excludes_a_second_holder_and_is_released_with_its_process(tmp_path):
  w = str(tmp_path / 'run')
  with workdir.WorkdirLock(w):
    with pytest.raises(workdir.WorkdirInUse, match=f'workdir {w} is in use by process '
                                                    f'{os.getpid()} on '):
      workdir.WorkdirLock(w).acquire()
  workdir.WorkdirLock(w).acquire().release()          # free again once released
  holder = subprocess.Popen([sys.executable, '-c', HOLD, w], cwd=ROOT, stdout=subprocess.PIPE)
  assert holder.stdout.readline() == b'held\n'
  with pytest.raises(workdir.WorkdirInUse, match=f'process {holder.pid} '):
    workdir.WorkdirLock(w).acquire()
  holder.send_signal(signal.SIGKILL)                   # the kernel drops a dead owner's lock
  holder.wait()
  workdir.WorkdirLock(w).acquire().release()



# a sweep's run process as attempts.die_with_parent starts it, under a parent that the test
# kills: SIGTERM and SIGWINCH blocked, it writes `ready`, then takes the first of them with
# sigwaitinfo and writes `term` or `probe`. The kernel queues the SIGTERM while the parent exits,
# before the test's wait() returns and so before the test's SIGWINCH probe, and hands pending
# signals out lowest number first (15 < 28): `probe` only if no SIGTERM came. (Python-level
# handlers would race: a SIGWINCH arriving while the SIGTERM handler starts runs nested in it,
# before it writes `term`; CI saw that once.)
RUN_PROCESS = """
import os, signal, sys
wanted = {signal.SIGTERM, signal.SIGWINCH}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
open(os.path.join(sys.argv[1], 'ready'), 'w').close()
first = signal.sigwaitinfo(wanted).si_signo
open(os.path.join(sys.argv[1], 'term' if first == signal.SIGTERM else 'probe'), 'w').close()
"""
SWEEP_PROCESS = """
import subprocess, sys
from attention_jax.sweeps import attempts
run = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]],
                       preexec_fn=attempts.die_with_parent)
print(run.pid, flush=True)
run.wait()
"""


def wait_for_file(folder, names, proc=None, patience: float = 300) -> str:
  """Waits for the event: one of `names` written in `folder` -> its name (`patience` guards
  against a hang only; `proc` ending first fails at once)."""
  deadline = time.time() + patience
  while True:
    found = [n for n in names if os.path.exists(os.path.join(folder, n))]
    if found:
      return found[0]
    assert proc is None or proc.poll() is None, f'the process ended first ({proc.returncode})'
    assert time.time() < deadline, f'none of {names} in {patience:.0f} s'
    time.sleep(0.02)


@pytest.mark.scenario   # a process tree, its parent killed
def test_a_run_gets_sigterm_when_the_process_that_started_it_dies(tmp_path):
  """A sweep SIGKILLed: each run it started gets SIGTERM from the kernel (PR_SET_PDEATHSIG),
  so it saves and exits instead of training on as an orphan."""
  sweep = subprocess.Popen([sys.executable, '-c', SWEEP_PROCESS, RUN_PROCESS, str(tmp_path)],
                           cwd=ROOT, stdout=subprocess.PIPE, text=True)
  try:
    run_pid = int(sweep.stdout.readline())
    wait_for_file(tmp_path, ['ready'], sweep)
  finally:
    sweep.kill()
    sweep.wait()
  try:
    os.kill(run_pid, signal.SIGWINCH)   # the probe: answered only if no SIGTERM came first
  except ProcessLookupError:
    pass                                # it has exited already (on the SIGTERM)
  assert wait_for_file(tmp_path, ['term', 'probe']) == 'term'


@pytest.mark.scenario   # a second process holds the lock
def test_a_rerun_waits_for_the_workdir_a_killed_attempt_still_holds(tmp_path, monkeypatch,
                                                                      capsys):
  """The same sweep command at once after a kill: a run's new attempt waits, saying so, while
  the killed attempt still holds its workdir (saving at SIGTERM), and starts once it is free."""
  import types  # pylint: disable=g-import-not-at-top
  from attention_jax.sweeps import attempts  # pylint: disable=g-import-not-at-top
  w = str(tmp_path / 'run')
  holder = subprocess.Popen([sys.executable, '-c', HOLD, w], cwd=ROOT, stdout=subprocess.PIPE)
  try:
    assert holder.stdout.readline() == b'held\n'
    def sleep(seconds):   # while the rerun waits, the killed attempt finishes its save and exits
      del seconds
      holder.kill()
      holder.wait()
    monkeypatch.setattr(attempts, 'time', types.SimpleNamespace(time=time.time, sleep=sleep))
    attempts.wait_for_workdir(types.SimpleNamespace(workdir=w, label='v/seed_0'))
    assert holder.poll() is not None    # it returned only once the holder had gone
  finally:
    holder.kill()
    holder.wait()
  assert capsys.readouterr().out.startswith(
      f'[v/seed_0] waiting: workdir {w} is in use by process {holder.pid} on ')
  workdir.WorkdirLock(w).acquire().release()


def _tree(folder):
  """Every file and folder under `folder`, with its modification time and its bytes."""
  return {p: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
          for p in folder.rglob('*')}


def test_a_second_training_on_a_busy_workdir_is_refused_before_work_and_changes_nothing(
    tmp_path):
  """The lock is taken before the data or the model: the refusal is its one line, exit 2,
  and no file or folder under the workdir is created, changed or touched."""
  w = tmp_path / 'run'
  holder = subprocess.Popen([sys.executable, '-c', HOLD, str(w)], cwd=ROOT,
                            stdout=subprocess.PIPE)
  try:
    assert holder.stdout.readline() == b'held\n'
    (w / 'config.json').write_text('{"marker": 1}')
    (w / 'checkpoints' / 'latest').mkdir(parents=True)
    (w / 'checkpoints' / 'latest' / 'note').write_text('kept')
    before = _tree(w)
    proc = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                              f'--workdir={w}')
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f'error: workdir {w} is in use by process {holder.pid} on {os.uname().nodename}; '
        'wait for it to finish or choose another --workdir')
    assert _tree(w) == before
  finally:
    holder.kill()
    holder.wait()


def test_cli_message_is_one_line_and_names_a_full_disk():
  assert cli.message(ValueError('a\nb')) == 'error: a b'
  assert cli.message(OSError(28, 'No space left on device')).startswith('error: disk full: ')


SIGNALLED = '''
import os, signal, sys, time
from experiments import cli
# Python's Ctrl-C handler, as a foreground process has it (a shell's background job, e.g. a
# suite started with &, starts with SIGINT ignored and would sleep through it)
signal.signal(signal.SIGINT, signal.default_int_handler)
def main(argv):
  try:
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(30)
  finally:
    print('cleaned up', flush=True)
cli.run(main)
'''


@pytest.mark.parametrize('sig,status,line', [('SIGINT', 130, 'interrupted (Ctrl-C)'),
                                             ('SIGTERM', 143, 'stopped by SIGTERM')])
def test_ctrl_c_and_sigterm_anywhere_are_one_line_after_cleaning_up(sig, status, line):
  """Outside the training loop (which saves first: preemption.py) a signal unwinds the
  program (`finally` blocks close outputs whole) and exits 128 + its number with one line,
  no traceback (Ctrl-C in a final evaluation used to end in a segmentation fault)."""
  proc = subprocess.run([sys.executable, '-c', SIGNALLED, sig], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == status
  assert proc.stdout == 'cleaned up\n' and proc.stderr == f'{line}\n', proc.stderr


@pytest.mark.parametrize('name', ['../../x', '/abs/path', '.hidden', 'a/b', '', 'x' * 101])
def test_sweep_variant_names_are_plain_directory_names(name, tmp_path):
  f = tmp_path / 'bad_sweep.py'
  f.write_text('from experiments.configs import dates\n'
               'get_config = dates.get_config\n'
               f'def get_sweep(arg=None):\n  return [({name!r}, {{}})]\n')
  with pytest.raises(ValueError, match='not a plain directory name'):
    sweep_file.load_sweep(str(f), str(tmp_path / 'runs'))


@pytest.mark.parametrize('returned, got', [
    ('None', 'got None'), ('{"dot": {}}', "got {'dot': {}}"), ('"dot"', "got 'dot'"),
    ('[]', 'got []'), ('[("dot",)]', "got the item ('dot',)"),
    ('[("dot", "model.score=dot")]', "got the item ('dot', 'model.score=dot')")])
def test_a_sweep_file_of_another_form_is_one_line_naming_the_file_and_the_form(returned, got,
                                                                                tmp_path):
  """get_sweep() returning None, a dict, a string, [] or items that are not (name, {field:
  value}) pairs: one line with the file, the expected form and what it gave, before any run
  (it used to be a TypeError traceback, or 'not enough values to unpack')."""
  f = tmp_path / 'odd_sweep.py'
  f.write_text('from experiments.configs import dates\n'
               'get_config = dates.get_config\n'
               f'def get_sweep(arg=None):\n  return {returned}\n')
  with pytest.raises(ValueError) as e:
    sweep_file.load_sweep(str(f), str(tmp_path / 'runs'))
  assert str(e.value) == f'{f}: {sweep_file.FORM}; {got}'
  assert not (tmp_path / 'runs').exists()


@pytest.mark.parametrize('overrides, error', [
    ("{'model.scroe': 'dot'}", "variant 'bad': unknown config field in model.scroe=dot: 'scroe' "
                               'Did you mean "score" instead of "scroe"?'),
    ("{'model.score': 'dott'}", "variant 'bad': unknown model.score 'dott'; valid: additive"),
    ("{'train.steps': 0}", "variant 'bad': train.steps must be a positive integer, got 0"),
    ("{'model.d_model': 64}", "variant 'bad': model.arch='rnn'"),   # a field rnn does not read
])
def test_every_variant_is_checked_before_the_sweep_starts_and_nothing_is_left(overrides, error,
                                                                               tmp_path):
  """A variant with an unknown field or a bad value (the last of the file's variants) is one
  line naming the sweep file and the variant, exit 2, before any run: no --root is made (it
  used to start the variant, which failed with the error in its train.log and left its
  folder with a lock, wall_time.json and train.log)."""
  f = tmp_path / 'bad_sweep.py'
  f.write_text('from experiments.configs import dates\n'
               'get_config = dates.get_config\n'
               "def get_sweep(arg=None):\n  return [('ok', {'model.score': 'dot'}), "
               f"('bad', {overrides})]\n")
  root = tmp_path / 'new' / 'runs'
  proc = helpers.run_module('experiments.sweep', f'--sweep={f}:smoke', f'--root={root}')
  assert proc.returncode == 2 and proc.stdout == '', proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
  assert proc.stderr.startswith(f'error: {f}: {error}'), proc.stderr
  assert not (tmp_path / 'new').exists()


# the Ray case starts a Ray cluster (5 s): after the suite, in CI
@pytest.mark.parametrize('case', [pytest.param('ray', marks=pytest.mark.extended),
                                  'runs_per_device'])
def test_refused_sweep_commands_leave_no_folder_and_print_only_their_error(tmp_path, case):
  """--runs_per_device on a machine without accelerators, and a Ray sweep whose runs ask for
  GPUs no node has (or Ray not installed): one `error:` line (no Ray notice before it), exit 2,
  and no --root (nor its parent) left behind."""
  import importlib.util
  from attention_jax.sweeps import local_executor
  root = tmp_path / 'new' / 'runs'
  sweep = 'experiments/configs/score_sweep.py:smoke'
  if case == 'ray':
    argv = [f'--sweep={sweep}', f'--root={root}', '--executor=ray', '--trial_gpus=1000']
    start = ('error: no node of the Ray cluster offers what one run asks for (CPU=1, GPU=1000)'
             if importlib.util.find_spec('ray') else   # (a machine without the extra)
             'error: --executor=ray needs the ray package')
  else:
    if local_executor.accelerators():
      pytest.skip('this machine has accelerators: --runs_per_device shares them, not refused')
    argv = [f'--sweep={sweep}', f'--root={root}', '--runs_per_device=2']
    start = 'error: --runs_per_device=2 shares accelerators, and this machine has none'
  proc = helpers.run_module('experiments.sweep', *argv, timeout=600)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
  assert proc.stderr.startswith(start), proc.stderr
  assert not (tmp_path / 'new').exists()


def test_disk_full_during_a_save_names_the_step_and_the_last_good_one(tmp_path, monkeypatch,
                                                                      capfd):
  import numpy as np
  from attention_jax.state import checkpoint as ckpt_lib
  ckpts = ckpt_lib.Checkpoints(str(tmp_path))
  state = {'w': np.ones(3, np.float32)}
  ckpts.save_latest(20, state, {'step': 20})
  def full(*args, **kwargs):   # as Orbax's threads do: tracebacks on fd 2, then the error
    os.write(2, b'Traceback (most recent call last):\nRuntimeError: Event loop is closed\n')
    raise RuntimeError('tensorstore write failed') from OSError(28, 'No space left on device')
  monkeypatch.setattr(ckpts.latest, 'save', full)
  capfd.readouterr()
  with pytest.raises(OSError, match=r'disk full while saving step 25 in .*latest; last good '
                                    r'checkpoint: step 20') as e:
    ckpts.save_latest(25, state, {'step': 25})
  assert cli.message(e.value).startswith('error: disk full while saving step 25')
  assert capfd.readouterr().err == ''       # the noise is dropped: the error says it all
  def broken(*args, **kwargs):
    os.write(2, b'orbax: what went wrong\n')
    raise RuntimeError('another failure')
  monkeypatch.setattr(ckpts.best, 'save', broken)
  with pytest.raises(RuntimeError, match='another failure'):
    ckpts.save_best(25, state, {'step': 25}, 1.0)
  assert capfd.readouterr().err == 'orbax: what went wrong\n'   # kept for anything else
  monkeypatch.setattr(ckpts.best, 'save', full)
  with pytest.raises(OSError, match=r'saving step 26 in .*best; no earlier checkpoint in '):
    ckpts.save_best(26, state, {'step': 26}, 1.0)
  ckpts.close()


def test_evaluation_skips_and_counts_examples_beyond_its_limits(tmp_path):
  from attention_jax.training import train
  from experiments.configs import textfiles
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  words = [f'w{i % 7} x{i % 5}' for i in range(64)]
  for split, n in (('train', 64), ('valid', 8), ('test', 8)):
    (corpus / f'{split}.src').write_text('\n'.join(words[:n]) + '\n')
    (corpus / f'{split}.tgt').write_text('\n'.join(w.upper() for w in words[:n]) + '\n')
  with open(corpus / 'test.src', 'a') as f:
    f.write('a' * 250_000 + '\n')            # one line of 250k tokens
  with open(corpus / 'test.tgt', 'a') as f:
    f.write('A\n')
  c = textfiles.get_config('smoke')
  c.data.textfiles_dir, c.data.tokenizer = str(corpus), 'char'
  summary = train.train_and_evaluate(c, str(tmp_path / 'run'))
  test = summary['results']['test']
  assert test['sentences'] == 8 and test['skipped_too_long'] == 1


def test_an_unusable_workdir_fails_before_any_work(tmp_path):
  a_file = tmp_path / 'file'
  a_file.write_text('x')
  proc = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                            f'--workdir={a_file}')
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      f'error: cannot use {a_file} as a workdir: File exists')
  assert 'Traceback' not in proc.stderr


def test_conflicting_flags_are_one_line_with_status_2(tmp_path):
  proc = helpers.run_module('experiments.translate', f'--workdir={tmp_path}', '--beam=2',
                            '--nbest=3', stdin='')
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == ['error: --nbest=3 needs --beam >= 3, got --beam=2']


def test_a_model_flag_the_architecture_does_not_read_is_one_line_before_any_work(tmp_path):
  """--config.model.score on a Transformer (its score is cross_attention_score) would be
  silently ignored: refused in one line naming the counterpart, nothing written."""
  proc = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                            '--config.model.arch=transformer', '--config.model.score=general',
                            f'--workdir={tmp_path / "run"}')
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: model.arch='transformer', model.encoder='' does not read model.score='general' "
      "(model.cross_attention_score in place of model.score); leave it at its default. It "
      'reads: ' + ', '.join(f for f in ['src_vocab', 'tgt_vocab', *model_lib.ModelConfig.defaults()]
                            if f in model_lib.reads({'arch': 'transformer'})))
  assert not (tmp_path / 'run').exists()


def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path):
  """cli.check_output (compare --out, translate --output, explore --out, ...): a directory, a
  missing folder: an OSError naming the path (one line from the command), nothing written."""
  for path, error, needle in ((tmp_path, IsADirectoryError, 'is a directory, not an output file'),
                              (tmp_path / 'no' / 'out.md', FileNotFoundError,
                               'no such folder for the output file')):
    with pytest.raises(error, match=re.escape(needle)) as e:
      cli.check_output(str(path))
    assert cli.message(e.value).startswith('error: ') and '\n' not in cli.message(e.value)
  cli.check_output(str(tmp_path / 'out.md'))
  assert os.listdir(tmp_path) == []
