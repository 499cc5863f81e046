"""The run directory (a workdir): its one owner. `Run` knows where each file of a run lives and
reads and writes them; no other module spells a file name of a run.

  <workdir>/config.json           the run's config (ml_collections), written when it is accepted
  <workdir>/model_config.json     the ModelConfig it trains, with the vocabulary sizes
  <workdir>/tokenizers/           its source and target vocabularies
  <workdir>/checkpoints/{latest,best}/   Orbax checkpoints (checkpoint.py)
  <workdir>/results.json          the final evaluation: its presence marks a finished run
  <workdir>/sentences_<split>.jsonl      per-sentence records of the final evaluation (records.py)
  <workdir>/eval_<name>.json (+ .sentences.jsonl, _heatmaps/, _<metric>_by_length.png)
                                  what `evaluate` wrote later
  <workdir>/tensorboard/, heatmaps/      training curves, the final attention heatmaps
  <workdir>/train.log, wall_time.json    a sweep's log of the run and its attempts (sweep.py)

Several runs of one config that differ in their seed (a sweep's variant under --seeds, a
population: population_run.py) live side by side as <parent>/seed_<k>/ (seed_dir), each a
run directory as above.

One run per workdir: an advisory lock held for the life of the training process; files
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
import json
import os
import re
import shutil
import socket

LOCK_FILE = '.lock'
MARKER = '.attention_jax_run'   # written with config.json when a run is accepted
CONFIG, MODEL_CONFIG, RESULTS = 'config.json', 'model_config.json', 'results.json'
TOKENIZERS, CHECKPOINTS, TENSORBOARD, HEATMAPS = 'tokenizers', 'checkpoints', 'tensorboard', 'heatmaps'
TRAIN_LOG, WALL_TIME = 'train.log', 'wall_time.json'
ATTRIBUTIONS = 'attributions'   # experiments/attribute.py
SEED_DIR = 'seed_{}'            # the run of seed k among a variant's seeds (seed_dir)
# what a run of this project holds: `--overwrite` clears a directory only if it is one
RUN_ENTRIES = (CONFIG, MODEL_CONFIG, TOKENIZERS, CHECKPOINTS, RESULTS, TENSORBOARD, HEATMAPS,
               TRAIN_LOG, WALL_TIME, LOCK_FILE, MARKER, ATTRIBUTIONS)


class Run:
  """One run directory: the paths of its files, and reading and writing them.

    run = Run('runs/dates')
    run.finished                  # results.json exists
    run.config()                  # config.json as a dict (OSError / ValueError if unreadable)
    run.write_config(cfg.to_json(indent=2), model_config.to_dict())
  """

  def __init__(self, path: str):
    self.path = path

  def __repr__(self) -> str:
    return f'Run({self.path!r})'

  def _join(self, *names: str) -> str:
    return os.path.join(self.path, *names)

  # ---- where its files are --------------------------------------------------------
  @property
  def config_path(self) -> str:
    return self._join(CONFIG)

  @property
  def model_config_path(self) -> str:
    return self._join(MODEL_CONFIG)

  @property
  def results_path(self) -> str:
    return self._join(RESULTS)

  @property
  def tokenizers_dir(self) -> str:
    return self._join(TOKENIZERS)

  @property
  def checkpoints_dir(self) -> str:
    return self._join(CHECKPOINTS)

  @property
  def latest_dir(self) -> str:
    """The newest checkpoints, for resuming."""
    return self._join(CHECKPOINTS, 'latest')

  @property
  def best_dir(self) -> str:
    """The checkpoint with the best validation score, for using."""
    return self._join(CHECKPOINTS, 'best')

  @property
  def tensorboard_dir(self) -> str:
    return self._join(TENSORBOARD)

  @property
  def heatmaps_dir(self) -> str:
    return self._join(HEATMAPS)

  @property
  def attributions_dir(self) -> str:
    """experiments/attribute.py's figures and files."""
    return self._join(ATTRIBUTIONS)

  @property
  def train_log_path(self) -> str:
    return self._join(TRAIN_LOG)

  @property
  def wall_time_path(self) -> str:
    return self._join(WALL_TIME)

  def sentences_path(self, split: str) -> str:
    """Per-sentence records of the final evaluation of `split` (records.py)."""
    return self._join(f'sentences_{split}.jsonl')

  def eval_path(self, name: str, what: str = 'report', metric: str = '') -> str:
    """The files of a later evaluation `name` (eval_<split> or eval_<file>[_beam..]):
    what = 'report' (JSON), 'sentences' (JSON lines), 'heatmaps' (a directory), 'plot' (the
    `metric` by source length, PNG)."""
    suffix = {'report': '.json', 'sentences': '.sentences.jsonl', 'heatmaps': '_heatmaps',
              'plot': f'_{metric}_by_length.png'}
    if what not in suffix:
      raise ValueError(f'unknown evaluation file {what!r}; valid: {", ".join(suffix)}')
    return self._join(name + suffix[what])

  # ---- what state it is in ----------------------------------------------------------
  @property
  def started(self) -> bool:
    """A config has been written: a run was accepted here."""
    return os.path.exists(self.config_path)

  @property
  def has_checkpoints(self) -> bool:
    return os.path.isdir(self.checkpoints_dir)

  @property
  def resumable(self) -> bool:
    """The latest-checkpoint directory holds a step to resume from."""
    return self.newest_step is not None

  @property
  def newest_step(self) -> int | None:
    """The newest step in the latest-checkpoint directory, None if none (whether it can be
    read is checkpoint.restore_newest's to find out)."""
    d = self.latest_dir
    steps = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
    return max(steps, default=None)

  @property
  def finished(self) -> bool:
    """The final evaluation was written (results.json)."""
    return os.path.isfile(self.results_path)

  # ---- reading ----------------------------------------------------------------------------
  @staticmethod
  def _read_json(path: str):
    with open(path, encoding='utf-8') as f:
      return json.load(f)

  def config(self) -> dict:
    """config.json as a dict; OSError if absent, ValueError if not JSON."""
    return self._read_json(self.config_path)

  def model_config(self) -> dict:
    return self._read_json(self.model_config_path)

  def results(self) -> dict:
    return self._read_json(self.results_path)

  def evaluations(self, split: str) -> list[dict]:
    """The reports of later evaluations of `split` (eval_<split>.json, and those at another
    beam eval_<split>_beam<k>_a<alpha>.json), in name order."""
    pattern = re.compile(rf'eval_{re.escape(split)}(_beam\d+_a[\d.]+)?\.json')
    names = os.listdir(self.path) if os.path.isdir(self.path) else []
    return [self._read_json(self._join(n)) for n in sorted(names) if pattern.fullmatch(n)]

  def attempts(self) -> list[dict]:
    """The sweep's attempts of this run (wall_time.json lines), [] if none."""
    try:
      with open(self.wall_time_path, encoding='utf-8') as f:
        return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
      return []

  # ---- writing (atomically: a reader sees the old file or the new one) -----------------
  def mark(self) -> None:
    """From now on the directory is a run of this project (`clear` may empty it)."""
    write_atomic(self._join(MARKER), 'attention_jax run\n')

  def write_config(self, config_json: str, model_config: dict) -> None:
    """Written once a run is accepted (a refused resume changes nothing)."""
    write_atomic(self.config_path, config_json)
    self.mark()
    write_atomic(self.model_config_path, json.dumps(model_config, indent=2))

  def write_results(self, summary: dict) -> None:
    """results.json, which marks the run finished."""
    write_atomic(self.results_path, json.dumps(summary, indent=2))

  def write_eval(self, name: str, report: dict) -> str:
    path = self.eval_path(name)
    write_atomic(path, json.dumps(report, indent=2))
    return path

  def append_attempt(self, line: dict) -> None:
    """Appends one attempt of a sweep to wall_time.json."""
    with open(self.wall_time_path, 'a', encoding='utf-8') as f:
      f.write(json.dumps(line) + '\n')

  def open_log(self):
    """train.log, for appending (a sweep's log of the run's process)."""
    return open(self.train_log_path, 'a')


def seed_dir(parent: str, seed: int) -> str:
  """<parent>/seed_<seed>: the run of `seed` among several seeds of one config (a sweep's
  variant, a population's member)."""
  return os.path.join(parent, SEED_DIR.format(seed))


class WorkdirInUse(RuntimeError):
  """Another process holds the workdir's lock."""


class WorkdirLock:
  """An exclusive, non-blocking lock on a workdir (see the module docstring)."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: int | None = None
    self._made: list[str] = []   # the lock file and workdir that acquire() created
    self._previous = b''         # the owner line an existing lock file held before acquire()

  def acquire(self) -> 'WorkdirLock':
    missing, d = [], os.path.abspath(self.workdir)
    while d and not os.path.exists(d) and d != os.path.dirname(d):   # the folders it makes
      missing.insert(0, d)
      d = os.path.dirname(d)
    self._made = missing + ([] if os.path.exists(self.path) else [self.path])
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
    self._previous = os.pread(fd, 200, 0)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'process {os.getpid()} on {socket.gethostname()}\n'.encode(), 0)
    self._fd = fd
    return self

  def release(self, discard: bool = False) -> None:
    """Drops the lock; with `discard`, also removes the lock file, the workdir and the
    parents this lock made (each folder only if empty): a refused run leaves a user's folder
    as it found it."""
    if self._fd is None:
      return
    if discard:   # unlinked while still held: no other process can have taken it meanwhile
      for path in reversed(self._made):   # the lock file, the workdir, then its new parents
        try:
          (os.remove if path == self.path else os.rmdir)(path)
        except OSError:   # not empty (the run wrote something after all): kept
          pass
    os.close(self._fd)      # closing the descriptor drops the flock
    self._fd = None

  def __enter__(self) -> 'WorkdirLock':
    return self.acquire()

  def __exit__(self, exc_type, *exc) -> None:
    # refused (a resume of another config, a fresh start in a user's folder) or failed: a
    # lock file it found gets its old owner line back (only read while the lock is held, so
    # harmless after a crash too), and before it became a run (no MARKER) no lock file or
    # folder of ours is left
    if exc_type is not None and self._fd is not None and self.path not in self._made:
      os.ftruncate(self._fd, 0)
      os.pwrite(self._fd, self._previous, 0)
    self.release(discard=exc_type is not None and not os.path.exists(
        os.path.join(self.workdir, MARKER)))


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
  if foreign or {TOKENIZERS, CHECKPOINTS} & set(names):
    return foreign
  return [n for n in names if n != LOCK_FILE]


def not_a_run(workdir: str) -> list[str]:
  """The entries that make a non-empty workdir no place to start or resume a run in
  (foreign_entries), empty for a run and for a directory that holds only what a sweep writes
  before its run starts (its log and attempts, a lock)."""
  if set(os.listdir(workdir)) <= {TRAIN_LOG, WALL_TIME, LOCK_FILE}:
    return []
  return foreign_entries(workdir)


def listing(workdir: str, names: list[str], mark_folders: bool = True, most: int = 8) -> str:
  """'a, b/, c and 3 more': the first `most` entries of workdir named in an error message
  (a folder with a trailing '/' when `mark_folders`)."""
  mark = lambda n: '/' if mark_folders and os.path.isdir(os.path.join(workdir, n)) else ''
  return ', '.join(n + mark(n) for n in names[:most]) + (
      f' and {len(names) - most} more' if len(names) > most else '')


def clear(workdir: str) -> None:
  """Deletes everything in a run's workdir but its lock (held by the caller); refuses, naming
  what it holds, a directory that is not recognisably a run of this project."""
  foreign = foreign_entries(workdir)
  if foreign:
    shown = listing(workdir, foreign)
    raise FileExistsError(f'refusing to delete {workdir!r}: it is not an attention_jax run '
                          f'(it holds {shown}); choose another --workdir')
  for name in os.listdir(workdir):
    path = os.path.join(workdir, name)
    if name != LOCK_FILE:
      shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
