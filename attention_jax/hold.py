"""Test hook: hold a process at a named point until a test releases it.

Tests that interrupt a run (a signal mid-training, a killed sweep, a SIGTERM between
translated chunks) must not race the machine's speed: a faster machine finishes the run
before the test strikes, a slower one strikes too early. Instead the test sets

  ATTENTION_JAX_HOLD='{"at": "train_step", "step": 5, "workdir": "/x/run", "file": "/x/held"}'

in the environment of the process(es) it starts. The process that reaches the point `at`
with every other key matching (`workdir` as a real path) writes `file` (its pid and where
it is held) and then waits until `file` is removed, or until its `release()` callable says
so (the training loop: a stop signal arrived). With `"through_signals": true` in the spec
only the file's removal releases it: when `release()` first says so, `file` is written again
with `"signalled": true` (a test then knows the signal was received, and can strike while the
process still holds what it holds, e.g. its workdir's lock). A point matches once per process.
Without the variable `point()` is one dict lookup: nothing changes for users.

Points: 'train_step' (step, workdir; after the step's evaluation and checkpoint),
'checkpoint_save' (step, workdir, checkpoints: 'latest' or 'best', tmp: the step's temporary
directory; state/checkpoint.py: the step is written to its temporary directory, not yet
committed by Orbax's rename), 'sweep_locked' (workdir: the sweep's directory, just locked;
sweeps/sweep_file.py), 'translate_chunk' (chunk: chunks written so far), 'data_generate'
(task; data/builders.py: a data set being generated, inside its preparation lock, before it
is renamed into place), 'final_evaluation' (workdir; training/session.py: the run trained,
its final evaluation begun).
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

ENV = 'ATTENTION_JAX_HOLD'
_done: set[str] = set()   # the points this process has held at already


def _same(key: str, want, have) -> bool:
  if key == 'workdir':
    return os.path.realpath(str(want)) == os.path.realpath(str(have))
  return want == have


def point(at: str, release: Callable[[], bool] = lambda: False, **where) -> bool:
  """Holds here if ATTENTION_JAX_HOLD names this point and `where`; returns whether it held."""
  raw = os.environ.get(ENV)
  if not raw or at in _done:
    return False
  spec = json.loads(raw)
  keys = set(spec) - {'at', 'file', 'through_signals'}
  if spec.get('at') != at or not keys <= set(where) or not all(
      _same(k, spec[k], where[k]) for k in keys):
    return False
  _done.add(at)
  path, info = spec['file'], {'pid': os.getpid(), 'at': at,
                               **{k: str(v) for k, v in where.items()}}
  _write(path, info)
  signalled = False
  while os.path.exists(path):
    if not signalled and release():
      if not spec.get('through_signals'):
        break
      signalled = True
      _write(path, {**info, 'signalled': True})
    time.sleep(0.02)
  return True


def _write(path: str, info: dict) -> None:
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(info, f)
  os.replace(tmp, path)   # whole, so the test reads a complete file
