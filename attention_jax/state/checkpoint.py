"""Orbax checkpoints of a run: the train state, and JSON metadata (config, data-iterator
position, metrics) saved together, so that a restart continues exactly.

Two managers, because with `best_fn` Orbax keeps only the `max_to_keep` best steps and may
delete the latest:
  latest  the newest `keep` steps, for resuming (workdir.Run.latest_dir)
  best    the step with the best validation score, for using (workdir.Run.best_dir)
The train state is stored as a flat {path: array} dict, so it restores into any pytree
with the same paths (e.g. integer dict keys of nnx.List survive the round trip).
No pickle anywhere: arrays are written by Orbax (tensorstore), metadata as JSON.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import sys
import threading
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from attention_jax import hold
from attention_jax import workdir as workdir_lib
from attention_jax.models import model as model_lib


class CheckpointError(RuntimeError):
  """A checkpoint is missing, corrupt, or does not match the model."""


class CheckpointMismatch(CheckpointError):
  """A readable checkpoint of another model (config or tokenizers): not corrupt, never moved."""


def _disk_full(e: BaseException | None) -> bool:
  """True if ENOSPC is anywhere in the exception's chain (Orbax wraps the OSError)."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or 'No space left' in str(e):
      return True
    e = e.__cause__ or e.__context__
  return False


def checksums(state) -> dict[str, str]:
  """{array path: SHA-256 of its bytes (first 16 hex digits)} of a state pytree; arrays not
  fully addressable from this process (multi-host shards) are left out."""
  out = {}
  for key, x in _flat(state).items():
    if getattr(x, 'is_fully_addressable', True):
      out[key] = hashlib.sha256(np.ascontiguousarray(jax.device_get(x)).tobytes()).hexdigest()[:16]
  return out


def nonfinite(state) -> list[str]:
  """The paths of a state's floating-point arrays that hold a NaN or an infinity (those
  fully addressable from this process)."""
  return [key for key, x in _flat(state).items()
          if getattr(x, 'is_fully_addressable', True) and jnp.issubdtype(x.dtype, jnp.inexact)
          and not np.isfinite(np.asarray(jax.device_get(x))).all()]


def _arrays(names: list[str]) -> str:
  return ', '.join(names[:4]) + (f' and {len(names) - 4} more' if len(names) > 4 else '')


def _last_good(manager) -> str:
  step = manager.latest_step()
  return (f'last good checkpoint: step {step}' if step is not None else
          f'no earlier checkpoint in {manager.directory}')


class NonFiniteCheckpoint(CheckpointError):
  """A checkpoint whose arrays hold NaN or inf (its checksums may well match)."""


def fingerprint(directory: str) -> str:
  """SHA-256 (16 hex digits) of the files under `directory` (names and bytes), e.g. a run's
  tokenizers, so that a checkpoint can tell whether they are the ones it was trained with."""
  h = hashlib.sha256()
  for root, dirs, files in os.walk(directory):
    dirs.sort()
    for name in sorted(files):
      path = os.path.join(root, name)
      h.update(os.path.relpath(path, directory).encode() + b'\0')
      with open(path, 'rb') as f:
        h.update(f.read())
  return h.hexdigest()[:16]


def _flat(tree) -> dict[str, Any]:
  return {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _unflat(flat: dict[str, Any], template):
  paths, treedef = jax.tree_util.tree_flatten_with_path(template)
  keys = [jax.tree_util.keystr(p) for p, _ in paths]
  missing = sorted(set(keys) - set(flat))
  extra = sorted(set(flat) - set(keys))
  if missing or extra:
    raise CheckpointMismatch(
        f'the checkpoint does not match this model: {len(missing)} arrays missing '
        f'(e.g. {missing[:3]}), {len(extra)} unexpected (e.g. {extra[:3]})')
  return jax.tree_util.tree_unflatten(treedef, [flat[k] for k in keys])


def _like_saved(template, meta: dict):
  """The template with an 'ema' entry (the EMA of the parameters, shaped like 'params')
  exactly when the checkpoint holds one, whatever the caller's train.ema_decay: the caller
  decides what to do with it (train.py starts or drops it; translator.py translates with it)."""
  if not isinstance(template, dict) or 'params' not in template:
    return template
  out = {k: v for k, v in template.items() if k != 'ema'}
  # 'arrays' (the saved paths) came with the EMA: a checkpoint without it has none
  if any(k.startswith("['ema']") for k in meta.get('arrays', ())):
    out['ema'] = template['params']
  return out


def _abstract(tree):
  """Shapes, dtypes and shardings to restore into (an abstract template without a sharding:
  this process's first device)."""
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=getattr(x, 'sharding', None) or here), tree)


@contextlib.contextmanager
def _stderr_held(keep):
  """Holds what is written to file descriptor 2 (Orbax's threads log and print tracebacks
  there as a save fails) and writes it out at the end unless keep(exception) is False: a
  full disk is then one line (the OSError raised), not 100-200 lines of Orbax/asyncio noise.
  Held in memory through a pipe (the disk may be full)."""
  sys.stderr.flush()
  saved, (r, w) = os.dup(2), os.pipe()
  chunks = []
  reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 65536), b'')),
                            daemon=True)
  reader.start()
  os.dup2(w, 2)
  os.close(w)
  error = None
  try:
    yield
  except BaseException as e:
    error = e
    raise
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)   # closes the pipe's last write end: the reader ends
    os.close(saved)
    reader.join(timeout=5)
    os.close(r)
    if chunks and keep(error):
      os.write(2, b''.join(chunks))


class _CommitByRename(ocp.path.atomicity.AtomicRenameTemporaryPath):
  """Orbax's commit of a step on a local disk (the step is written to
  <step>.orbax-checkpoint-tmp and renamed into place), with the hold point
  'checkpoint_save' (hold.py) just before the rename: the step is written but not committed.
  Tests kill a run there; without ATTENTION_JAX_HOLD nothing changes."""

  async def finalize(self, *args, **kwargs):
    final = self.get_final()
    if final.name.isdigit():   # the step, not one of its items ('state', 'meta')
      hold.point('checkpoint_save', step=int(final.name), checkpoints=final.parent.name,
                 workdir=str(final.parent.parent.parent), tmp=str(self.get()))
    return await super().finalize(*args, **kwargs)


class Checkpoints:
  """The `latest` and `best` managers of a run (a workdir.Run or its path)."""

  def __init__(self, run: 'str | workdir_lib.Run', keep: int = 2, create: bool = True):
    run = run if isinstance(run, workdir_lib.Run) else workdir_lib.Run(run)
    opts = dict(create=create, enable_async_checkpointing=False,
                temporary_path_class=_CommitByRename)
    self.latest = ocp.CheckpointManager(
        os.path.abspath(run.latest_dir), item_names=('state', 'meta'),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, **opts))
    self.best = ocp.CheckpointManager(
        os.path.abspath(run.best_dir), item_names=('state', 'meta'),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=1, best_fn=lambda m: m['bleu'], best_mode='max', **opts))

  @staticmethod
  def _save(manager, step, state, meta, metrics=None):
    if step in manager.all_steps():
      return   # written before an interruption; a resumed run recomputes the same state
    bad = nonfinite(state)   # a model that cannot translate is never saved as if it could
    if bad:
      raise FloatingPointError(
          f'refusing to save step {step} in {manager.directory}: non-finite values (NaN or '
          f'inf) in {len(bad)} array(s): {_arrays(bad)}; {_last_good(manager)}')
    # the arrays' checksums are saved with them (one atomic step), checked on restore
    meta = {**meta, 'checksums': checksums(state), 'arrays': sorted(_flat(state))}
    try:
      with _stderr_held(keep=lambda e: not _disk_full(e)):
        manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_flat(state)),
                                                   meta=ocp.args.JsonSave(meta)),
                     metrics=metrics, force=True)
        manager.wait_until_finished()
    except Exception as e:
      if not _disk_full(e):
        raise
      raise OSError(errno.ENOSPC, f'disk full while saving step {step} in {manager.directory}; '
                    f'{_last_good(manager)}') from e

  def save_latest(self, step: int, state, meta: dict) -> None:
    self._save(self.latest, step, state, meta)

  def save_best(self, step: int, state, meta: dict, bleu: float) -> None:
    self._save(self.best, step, state, meta, metrics={'bleu': float(bleu)})

  def close(self):
    self.latest.close()
    self.best.close()


def differences(saved: dict, expected: dict, defaults: dict, *, prefix: str = '',
                words: tuple[str, str] = ('checkpoint', 'expected')) -> list[str]:
  """'<prefix><field>: <saved word> <old>, <expected word> <new>' for each field of `expected`
  whose saved value differs; a field the saved config predates counts as its default (so
  checkpoints and workdirs written before a field existed still load and resume)."""
  saved = {**defaults, **saved}
  return [f'{prefix}{k}: {words[0]} {saved.get(k)!r}, {words[1]} {v!r}'
          for k, v in expected.items() if saved.get(k) != v]


def restore(manager: ocp.CheckpointManager, step: int, template, *,
            model_config: dict | None = None, model_defaults: dict | None = None,
            tokenizers: str | None = None, parameters_only: bool = False) -> tuple[Any, dict]:
  """Restores (state shaped like `template`, meta dict) of `step` from `manager`.

  parameters_only (inference): `template` is {'params': P}; only the parameters to translate
  with are read, {'ema': P} when the checkpoint holds an EMA of them, else {'params': P}: no
  optimiser state (its arrays may even be absent).

  Raises CheckpointMismatch (the checkpoint is fine, the model is another) when its saved
  model config differs from `model_config`, its tokenizer fingerprint from `tokenizers`, or
  its arrays from the template's (fields missing from an older checkpoint's config count
  as their `model_defaults`); CheckpointError when it cannot be read or an array's
  checksum differs from the one saved with it (flipped bits); NonFiniteCheckpoint when an
  array holds NaN or inf.
  """
  where = f'checkpoint step {step} in {manager.directory}'
  try:
    meta = dict(manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore()))['meta'])
  except Exception as e:  # Orbax errors: say which checkpoint, keep the cause
    raise CheckpointError(f'could not read {where}: {type(e).__name__}: {e}') from e
  if model_config is not None and 'model_config' in meta:
    # fields the saved model does not read (runs saved before each model owned its fields)
    # count as their defaults
    diffs = differences(model_lib.migrate(meta['model_config']), model_config,
                        model_defaults or {})
    if diffs:
      raise CheckpointMismatch(f'{where} belongs to another model: ' + '; '.join(diffs))
  if tokenizers is not None and meta.get('tokenizers', tokenizers) != tokenizers:
    raise CheckpointMismatch(f'{where} was trained with other tokenizers (fingerprint '
                             f'{meta["tokenizers"]}, the workdir\'s are {tokenizers})')
  template = _like_saved(template, meta)
  if parameters_only:
    template = {'ema': template['ema']} if 'ema' in template else {'params': template['params']}
  try:   # the arrays (meta was read above)
    item = _abstract(_flat(template))
    if parameters_only:   # a part of the saved tree, read by a checkpointer of its own
      with ocp.PyTreeCheckpointer() as reader:
        out = {'state': reader.restore(
            os.path.join(manager.directory, str(step), 'state'),
            args=ocp.args.PyTreeRestore(item=item, partial_restore=True, restore_args=jax.tree.map(
                lambda x: ocp.ArrayRestoreArgs(sharding=x.sharding), item)))}
    else:
      out = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(item)))
  except Exception as e:  # Orbax/tensorstore errors: say which checkpoint, keep the cause
    raise CheckpointError(f'could not read {where}: {type(e).__name__}: {e}') from e
  state = _unflat(dict(out['state']), template)
  saved = meta.get('checksums')
  if saved:
    now = checksums(state)
    bad = sorted(k for k in saved if k in now and now[k] != saved[k])
    if bad:
      raise CheckpointError(f'{where} is corrupt: {len(bad)} array(s) differ from the checksums '
                            f'saved with them (e.g. {bad[0]} in {manager.directory}/{step}/'
                            'state)')
  bad = nonfinite(state)
  if bad:
    raise NonFiniteCheckpoint(f'{where} holds non-finite values (NaN or inf) in {len(bad)} '
                              f'array(s): {_arrays(bad)}; the model it holds cannot translate')
  return state, meta



def restore_newest(manager: ocp.CheckpointManager, template, log=print,
                   **expect) -> tuple[Any, dict, int] | None:
  """Restores the newest readable step of `manager` -> (state, meta, step), or None if it
  holds no step. A step that cannot be read (truncated, corrupt, half-written, a checksum
  mismatch) is moved to <checkpoints>/corrupt/ with a warning naming it and the reason, and
  the next older step is tried; CheckpointError if none can be read. A readable step of
  another model (`expect`: model_config, tokenizers; see restore) raises CheckpointMismatch
  and nothing is moved."""
  skipped = []
  for step in sorted(manager.all_steps(read=True), reverse=True):
    try:
      state, meta = restore(manager, step, template, **expect)
    except CheckpointMismatch:
      raise
    except CheckpointError as e:
      src = os.path.join(str(manager.directory), str(step))
      dst = os.path.join(os.path.dirname(str(manager.directory)), 'corrupt',
                         f'{os.path.basename(str(manager.directory))}_{step}_{int(time.time())}')
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      if os.path.exists(src):
        shutil.move(src, dst)
      msg = (f'WARNING: skipped unreadable checkpoint step {step} in {manager.directory} '
             f'(moved to {dst}): {e}')
      warnings.warn(msg, RuntimeWarning, stacklevel=2)
      log(msg)
      skipped.append(step)
      manager.reload()
      continue
    return state, meta, step
  if skipped:
    raise CheckpointError(f'no readable checkpoint in {manager.directory}: steps {skipped} '
                          f'are corrupt (moved to {os.path.dirname(str(manager.directory))}'
                          f'/corrupt/)')
  return None
