"""A trained run loaded for use: its saved config, tokenizers and best checkpoint (or a given
step) -> a translator.Translator. `attention_jax.load` (ensemble.py) calls it for one run.

  t = loading.load('runs/dates_additive')            # the best checkpoint
  t = loading.load('runs/dates_additive', step=400)  # a given step, from latest or best
"""

import os
import time

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.decoding import compile_cache
from attention_jax.loaded.translator import Translator
from attention_jax.models import model as model_lib
from attention_jax.models.model import ModelConfig
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.state import templates


def load(workdir: str, step: int | None = None,
         compilation_cache: str | None = None) -> Translator:
  """Rebuilds the model of a run from its saved config and tokenizers, and restores the best
  checkpoint (or `step`, from the latest/best checkpoints). Fails with CheckpointError
  naming the problem when the workdir, config or checkpoint is missing or corrupt. While
  the run trains, a step deleted as it is read (checkpoints rotate) is retried with the
  newest complete one. JAX's persistent compilation cache is turned on
  (compile_cache.enable(compilation_cache): by default $ATTENTION_JAX_CACHE or
  ~/.cache/attention_jax/jax; 'off': none), so that the next process does not compile the
  same decoding loops again."""
  if not isinstance(workdir, (str, os.PathLike)):
    raise TypeError(f'loading.load reads one run (a path), got {type(workdir).__name__}; '
                    'several runs decode as an ensemble: attention_jax.load([...]) (ensemble.py)')
  compile_cache.enable(compilation_cache)
  asked = step is not None
  mcfg, run_cfg = saved_config(workdir)
  run = workdir_lib.Run(workdir)
  try:
    factor = float(run_cfg['train']['max_decode_factor'])
    if not 0 < factor < float('inf'):
      raise ValueError(f'train.max_decode_factor must be a finite number > 0, got {factor!r}')
    max_train_len = run_cfg.get('data', {}).get('max_src_len')
    if max_train_len is not None and (not isinstance(max_train_len, int)
                                      or isinstance(max_train_len, bool) or max_train_len < 1):
      raise ValueError(f'{run.config_path}: data.max_src_len must be a positive integer, got '
                       f'{max_train_len!r}')
    tok_dir = run.tokenizers_dir
    src_tok, tgt_tok = data_lib.load_tokenizers(tok_dir)
  except (OSError, ValueError, KeyError) as e:
    raise ckpt_lib.CheckpointError(f'{workdir!r} is not a usable attention_jax workdir: '
                                   f'{type(e).__name__}: {e}') from e
  sizes = (src_tok.vocab_size, tgt_tok.vocab_size)
  if sizes != (mcfg.src_vocab, mcfg.tgt_vocab):
    raise ckpt_lib.CheckpointMismatch(
        f'the tokenizers in {tok_dir} have vocabularies of {sizes[0]} / {sizes[1]} symbols, '
        f'the model {mcfg.src_vocab} / {mcfg.tgt_vocab}: they belong to another run')
  graphdef, template = templates.abstract_params(mcfg)   # no optimiser: train.* plays no part
  for attempt in range(LOAD_ATTEMPTS):
    try:
      state, step = _restore(run, step, template, mcfg)
      break
    except (ckpt_lib.CheckpointError, FileNotFoundError) as e:
      # a run being trained deletes old steps while we read one: read the newest again
      if (asked or attempt == LOAD_ATTEMPTS - 1 or isinstance(e, ckpt_lib.CheckpointMismatch)
          or not _vanished(e)):
        if isinstance(e, FileNotFoundError):
          raise ckpt_lib.CheckpointError(f'could not read a checkpoint of {workdir!r}: {e}') from e
        raise
      step = None
      time.sleep(0.2)
  params = templates.eval_params(state)   # the EMA of the parameters when the run kept one
  return Translator(mcfg, graphdef, params, src_tok, tgt_tok, factor, step, max_train_len,
                    run_config=run_cfg)


def saved_config(workdir: str) -> tuple[ModelConfig, dict]:
  """(model config, run config) of a run, read from its saved files without its tokenizers
  or checkpoint: what a command checks its flags against before loading the model. Fails
  with CheckpointError naming the workdir."""
  if not os.path.isdir(workdir):
    raise ckpt_lib.CheckpointError(f'no such workdir: {workdir!r}')
  run = workdir_lib.Run(workdir)
  try:   # runs saved before each model owned its fields hold the unread ones too: dropped
    return (ModelConfig.from_dict(model_lib.migrate(run.model_config())),
            templates.migrate_config(run.config()))   # unread fields of older runs: defaults
  except (OSError, ValueError, KeyError, TypeError) as e:   # (TypeError: fields missing)
    raise ckpt_lib.CheckpointError(f'{workdir!r} is not a usable attention_jax workdir: '
                                   f'{type(e).__name__}: {e}') from e


LOAD_ATTEMPTS = 5   # reads of a run whose trainer keeps deleting the step being read


def _vanished(e: BaseException) -> bool:
  """True if a file or step disappeared under the reader (anywhere in the cause chain)."""
  while e is not None:
    if isinstance(e, FileNotFoundError) or 'not found' in str(e):
      return True
    e = e.__cause__ or e.__context__
  return False


def _restore(run: workdir_lib.Run, step: int | None, template, mcfg: ModelConfig):
  """(state, step) of the best checkpoint (else the latest), or of `step`."""
  workdir = run.path
  ckpts = ckpt_lib.Checkpoints(run, create=False)
  try:
    if step is None:
      manager, step = ckpts.best, ckpts.best.best_step()
      if step is None:
        manager, step = ckpts.latest, ckpts.latest.latest_step()
    else:
      manager = next((m for m in (ckpts.best, ckpts.latest) if step in m.all_steps()), None)
      if manager is None:
        raise ckpt_lib.CheckpointError(
            f'no checkpoint at step {step} in {workdir!r}; available: '
            f'{sorted(set(ckpts.best.all_steps()) | set(ckpts.latest.all_steps()))}')
    if step is None:
      raise ckpt_lib.CheckpointError(f'no checkpoint in {run.checkpoints_dir!r}')
    state = ckpt_lib.restore(manager, step, template, model_config=mcfg.to_dict(),
                             model_defaults=ModelConfig.defaults(),
                             tokenizers=ckpt_lib.fingerprint(run.tokenizers_dir),
                             parameters_only=True)[0]
    return state, step
  finally:
    ckpts.close()
