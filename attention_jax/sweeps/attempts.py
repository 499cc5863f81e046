"""A run's process, whichever executor starts it: its attempts (wall time and exit status,
kept up to date while it runs), its log (a population's: one process for its members, logged
in the first member's run and copied to the others'), waiting for a workdir that a killed
attempt still holds, and dying with the process that started it."""

import json
import os
import sys
import time

from attention_jax import workdir as workdir_lib


def record_attempt(workdir: str, seconds: float, returncode: int | None, share: int = 1,
                   **where) -> None:
  """Appends one attempt (its running time, exit status and where it ran) to the run's
  attempts (workdir.Run.attempts); a run's wall time is the sum over its attempts. share: as
  Attempt's (a population's member records 1/share of the time)."""
  extra = {'population': share} if share > 1 else {}
  workdir_lib.Run(workdir).append_attempt({'seconds': seconds / share, 'returncode': returncode,
                                           **where, **extra})


class Attempt:
  """One attempt of a run as the last line of its attempts (workdir.Run.attempts): written when it
  starts, its seconds brought up to date every `beat` seconds while it runs, and closed with
  its exit status. A sweep killed mid-run leaves the time its run really ran (to within
  `beat`; its process dies with it: die_with_parent), not nothing."""

  def __init__(self, workdir: str, beat: float = 10.0, share: int = 1, **where):
    """share: the number of runs this attempt trains at once (a population's members): each
    records 1/share of its time."""
    self.path, self.beat, self.where = workdir_lib.Run(workdir).wall_time_path, beat, where
    self.share = share
    if share > 1:
      self.where = {**where, 'population': share}
    try:
      with open(self.path) as f:
        self.before = [line for line in f if line.strip()]
    except FileNotFoundError:
      self.before = []
    self.t0 = self.last = time.time()
    self._write(None)

  @property
  def seconds(self) -> float:
    """Wall seconds since it started."""
    return time.time() - self.t0

  def _write(self, returncode: int | None) -> None:
    self.last = time.time()
    line = json.dumps({'seconds': self.seconds / self.share, 'returncode': returncode,
                       **self.where})
    workdir_lib.write_atomic(self.path, ''.join(self.before) + line + '\n')

  def alive(self) -> None:
    if time.time() - self.last >= self.beat:
      self._write(None)

  def close(self, returncode: int) -> None:
    self._write(returncode)


def wait_for_workdir(v, timeout: float = 120.0, say=None) -> None:
  """Waits while another process holds the run's workdir lock: the run of a sweep killed a
  moment ago saves its checkpoint and exits (SIGTERM from die_with_parent) before the run
  starts again here. After `timeout`, the run starts anyway (and fails, naming the holder).
  say(line): where the one line saying so goes (default: printed)."""
  deadline, said = time.time() + timeout, False
  while time.time() < deadline:
    try:
      workdir_lib.WorkdirLock(v.workdir).acquire().release()
      return
    except workdir_lib.WorkdirInUse as e:
      if not said:
        (say or (lambda line: print(line, flush=True)))(f'[{v.label}] waiting: {e}')
        said = True
      time.sleep(0.5)


def die_with_parent() -> None:
  """preexec_fn of a run's process (Linux): SIGTERM it when the process that started it
  dies, so a killed sweep or Ray worker leaves no orphan training (SIGTERM: it saves a
  checkpoint and exits, and the next attempt resumes)."""
  if sys.platform.startswith('linux'):
    import ctypes  # pylint: disable=g-import-not-at-top
    import signal  # pylint: disable=g-import-not-at-top
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def open_log(v):
  """(the log the process of `v` writes, where this attempt starts in it): its run's log; a
  population's first member's, the others told so (copy_log copies it when it ends)."""
  first = workdir_lib.Run(v.members[0].workdir)
  for m in v.members[1:]:
    with workdir_lib.Run(m.workdir).open_log() as f:
      f.write(f'== {v.label}: this attempt\'s log goes to {first.train_log_path} and is copied '
              'here when it ends\n')
  path = first.train_log_path
  return first.open_log(), os.path.getsize(path) if os.path.exists(path) else 0


def copy_log(v, offset: int) -> None:
  """A population's attempt: its log (in the first member's, from `offset`) appended to the
  other members' logs."""
  if v.population == 1:
    return
  with open(workdir_lib.Run(v.members[0].workdir).train_log_path, 'rb') as f:
    f.seek(offset)
    text = f.read().decode('utf-8', 'replace')
  for m in v.members[1:]:
    with workdir_lib.Run(m.workdir).open_log() as f:
      f.write(text)
