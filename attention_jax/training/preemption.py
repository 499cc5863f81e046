"""Graceful stops: SIGTERM (preemption) and SIGINT (Ctrl-C) during training.

The handler only records the signal; the training loop checks it at the next step
boundary, saves the latest checkpoint at that step, and raises `Interrupted`.
experiments/main.py turns that into exit status 128 + signal number (143 for SIGTERM,
130 for SIGINT), the shell convention, so schedulers see "killed by signal" and re-running
the same command resumes. A second Ctrl-C while saving is ignored until the save is done.
SIGKILL cannot be caught: the next run resumes from the newest complete checkpoint
(Orbax commits a step by an atomic rename; see checkpoint.restore_newest).
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
  """Training stopped on a signal after saving its latest checkpoint."""

  def __init__(self, signum: int, step: int, checkpoint_dir: str):
    self.signum, self.step = signum, step
    self.exit_status = 128 + signum
    super().__init__(f'stopped by {signal.Signals(signum).name} at step {step}; checkpoint '
                     f'saved in {checkpoint_dir}; run the same command again to resume')


class StopRequest:
  """Records the first SIGTERM / SIGINT while `installed()` is active."""

  def __init__(self):
    self.signum: int | None = None

  def _handle(self, signum, frame):
    del frame
    if self.signum is None:
      self.signum = signum

  @contextlib.contextmanager
  def installed(self):
    if threading.current_thread() is not threading.main_thread():
      yield self          # signals can only be handled in the main thread
      return
    previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
    try:
      yield self
    finally:
      for s, h in previous.items():
        signal.signal(s, h)
