"""Guards against misuse: one run per workdir (the lock), one clear line for expected errors,
bounded work, safe sweep variant names."""

import os
import signal
import subprocess
import sys
import time

import pytest

from attention_jax import sweep, workdir
from experiments import cli

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


def test_a_second_training_on_a_busy_workdir_stops_at_once_and_changes_nothing(tmp_path):
  w = tmp_path / 'run'
  holder = subprocess.Popen([sys.executable, '-c', HOLD, str(w)], cwd=ROOT,
                            stdout=subprocess.PIPE)
  try:
    assert holder.stdout.readline() == b'held\n'
    (w / 'config.json').write_text('{"marker": 1}')
    before = {p: p.stat().st_mtime_ns for p in w.iterdir()}
    start = time.time()
    proc = subprocess.run([sys.executable, '-m', 'experiments.main',
                           '--config=experiments/configs/dates.py:smoke', f'--workdir={w}'],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    took = time.time() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f'error: workdir {w} is in use by process {holder.pid} on {os.uname().nodename}; '
        'wait for it to finish or choose another --workdir')
    assert {p: p.stat().st_mtime_ns for p in w.iterdir()} == before
    print(f'refused in {took:.1f} s')
  finally:
    holder.kill()
    holder.wait()


def test_cli_message_is_one_line_and_names_a_full_disk():
  assert cli.message(ValueError('a\nb')) == 'error: a b'
  assert cli.message(OSError(28, 'No space left on device')).startswith('error: disk full: ')


@pytest.mark.parametrize('name', ['../../x', '/abs/path', '.hidden', 'a/b', '', 'x' * 101])
def test_sweep_variant_names_are_plain_directory_names(name, tmp_path):
  f = tmp_path / 'bad_sweep.py'
  f.write_text('from experiments.configs import dates\n'
               'get_config = dates.get_config\n'
               f'def get_sweep(arg=None):\n  return [({name!r}, {{}})]\n')
  with pytest.raises(ValueError, match='not a plain directory name'):
    sweep.load_sweep(str(f), str(tmp_path / 'runs'))
