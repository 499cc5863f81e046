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
import shutil
import socket

LOCK_FILE = '.lock'
MARKER = '.attention_jax_run'   # written with config.json when a run is accepted
# what a run of this project holds: `--overwrite` clears a directory only if it is one
RUN_ENTRIES = ('config.json', 'model_config.json', 'tokenizers', 'checkpoints', 'results.json',
               'tensorboard', 'heatmaps', 'train.log', 'wall_time.json', LOCK_FILE, MARKER)


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
  try:
    with open(tmp, 'w', encoding='utf-8') as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:   # (disk full, a signal): no temp file left behind
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def foreign_entries(workdir: str) -> list[str]:
  """The entries of workdir that are not a run's (empty for a run of this project).

  A directory is a run if it holds the marker written when the run started, or (runs made
  before the marker existed) nothing but a run's own files, its tokenizers or checkpoints
  among them (a user's lone config.json is not a run).
  """
  names = sorted(os.listdir(workdir))
  if MARKER in names:
    return []
  own = lambda n: (n in RUN_ENTRIES or n.startswith('eval_') or '.tmp' in n
                   or (n.startswith('sentences_') and n.endswith('.jsonl')))
  foreign = [n for n in names if not own(n)]
  if foreign or {'tokenizers', 'checkpoints'} & set(names):
    return foreign
  return [n for n in names if n != LOCK_FILE]


def clear(workdir: str) -> None:
  """Deletes everything in a run's workdir but its lock (held by the caller); refuses, naming
  what it holds, a directory that is not recognisably a run of this project."""
  foreign = foreign_entries(workdir)
  if foreign:
    shown = ', '.join(n + ('/' if os.path.isdir(os.path.join(workdir, n)) else '')
                      for n in foreign[:8]) + (f' and {len(foreign) - 8} more'
                                                 if len(foreign) > 8 else '')
    raise FileExistsError(f'refusing to delete {workdir!r}: it is not an attention_jax run '
                          f'(it holds {shown}); choose another --workdir')
  for name in os.listdir(workdir):
    path = os.path.join(workdir, name)
    if name != LOCK_FILE:
      shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
