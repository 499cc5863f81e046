"""One run per workdir: an advisory lock held for the life of the training process; files
in it written atomically.

  with WorkdirLock(workdir):      # raises WorkdirInUse at once if another process holds it
    ...train...

The lock is `flock(LOCK_EX | LOCK_NB)` on <workdir>/.lock, which holds the owner's pid and
host. The kernel releases it when the process ends, however it ends (SIGKILL included), so a
stale lock never needs cleaning up. On NFS, Linux implements flock with the server's byte-range
locks, so processes on different hosts exclude each other too; a filesystem without lock
support (some FUSE mounts) makes it local to one host. Readers (`load()`, evaluate, translate)
do not take it: while a run writes, they see the checkpoints it has committed (Orbax renames a
finished step into place) and never a half-written one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket

LOCK_FILE = '.lock'


class WorkdirInUse(RuntimeError):
  """Another process holds the workdir's lock."""


class WorkdirLock:
  """An exclusive, non-blocking lock on a workdir (see the module docstring)."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: int | None = None

  def acquire(self) -> 'WorkdirLock':
    try:   # an unusable workdir (a file, read-only, no permission) fails before any work
      os.makedirs(self.workdir, exist_ok=True)
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise OSError(e.errno, f'cannot use {self.workdir} as a workdir: {e.strerror}') from e
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      owner = os.pread(fd, 200, 0).decode('utf-8', 'replace').strip() or 'another process'
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise WorkdirInUse(f'workdir {self.workdir} is in use by {owner}; wait for it to '
                           f'finish or choose another --workdir') from None
      raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'process {os.getpid()} on {socket.gethostname()}\n'.encode(), 0)
    self._fd = fd
    return self

  def release(self) -> None:
    if self._fd is not None:
      os.close(self._fd)      # closing the descriptor drops the flock
      self._fd = None

  def __enter__(self) -> 'WorkdirLock':
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()


def write_atomic(path: str, text: str) -> None:
  """Writes text to path through a temp file and a rename (atomic on POSIX): a reader sees
  the old file or the new one, never half of one."""
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(tmp, path)
