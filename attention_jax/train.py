"""Training: the jit-compiled steps of a model, and the loop (evaluation, checkpoints, resume,
TensorBoard, results table, heatmaps). The train state and the pure train step are in
steps.py, data parallelism in parallel.py, decoding in inference.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Any

import jax
import ml_collections
import sacrebleu

from attention_jax import alignment
from attention_jax import checkpoint as ckpt_lib
from attention_jax import encoders
from attention_jax import data as data_lib
from attention_jax import evaluate as eval_lib
from attention_jax import hold
from attention_jax import inference
from attention_jax import objective
from attention_jax import parallel
from attention_jax import preemption
from attention_jax import records as records_lib
from attention_jax import workdir as workdir_lib
from attention_jax.model import ModelConfig
from attention_jax.steps import (SCHEDULES, OptimizerConfig, eval_params, init_state,
                                 make_optimizer, model_config, train_step)

__all__ = ['SCHEDULES', 'OptimizerConfig', 'StepSpec', 'Steps', 'init_state', 'make_optimizer',
           'model_config', 'train_step',
           'train_and_evaluate', 'validate']


# ---- set-up ------------------------------------------------------------------
def validate(cfg: ml_collections.ConfigDict) -> None:
  """Fails before any compile, naming the field and the valid range."""
  t, d = cfg.train, cfg.data
  for name, value in (('train.steps', t.steps), ('train.eval_every', t.eval_every),
                      ('train.log_every', t.log_every), ('train.checkpoint_every',
                                                         t.checkpoint_every),
                      ('train.keep_checkpoints', t.keep_checkpoints),
                      ('data.batch_size', d.batch_size)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'{name} must be a positive integer, got {value!r}')
  for name, value in (('data.max_src_len', d.max_src_len), ('data.max_tgt_len', d.max_tgt_len),
                      ('data.num_buckets', d.num_buckets),
                      ('data.bucket_multiple',
                       d.get('bucket_multiple', data_lib.FIELD_DEFAULTS['bucket_multiple'])),
                      ('eval.beam_size', cfg.eval.beam_size)):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError(f'{name} must be a positive integer, got {value!r}')
  for name, value, lo in (('train.lr', t.lr, 0.0), ('train.max_decode_factor',
                                                     t.max_decode_factor, 0.0)):
    if not isinstance(value, (int, float)) or not lo < value < float('inf'):
      raise ValueError(f'{name} must be a finite number > {lo:g}, got {value!r}')
  for name, value in (('train.warmup_steps', t.warmup_steps), ('train.clip_norm', t.clip_norm),
                      ('train.weight_decay', t.weight_decay), ('eval.alpha', cfg.eval.alpha),
                      ('train.coverage_weight', t.coverage_weight),
                      ('train.doubly_stochastic_weight', t.get('doubly_stochastic_weight', 0.0))):
    if not isinstance(value, (int, float)) or not 0 <= value < float('inf'):
      raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
  if not isinstance(t.ema_decay, (int, float)) or not 0.0 <= t.ema_decay < 1.0:
    raise ValueError(f'train.ema_decay must be in [0, 1) (0: no EMA), got {t.ema_decay!r}')
  if not 0.0 <= t.label_smoothing < 1.0:
    raise ValueError(f'train.label_smoothing must be in [0, 1), got {t.label_smoothing}')
  e = cfg.eval
  if e.bleu_tokenize not in sacrebleu.BLEU.TOKENIZERS:
    raise ValueError(f'unknown eval.bleu_tokenize {e.bleu_tokenize!r}; valid (sacrebleu): '
                     f'{", ".join(sacrebleu.BLEU.TOKENIZERS)}')
  edges = e.length_edges
  if (isinstance(edges, str) or not hasattr(edges, '__len__')
      or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in edges)
      or any(a >= b for a, b in zip(edges, edges[1:]))):
    raise ValueError('eval.length_edges must be increasing integers >= 0 (source-length '
                     f'bucket edges, e.g. (10, 20, 30)), got {edges!r}')
  shown = e.heatmaps
  if not isinstance(shown, int) or isinstance(shown, bool) or shown < 0:
    raise ValueError(f'eval.heatmaps must be an integer >= 0 (test sentences drawn), got '
                     f'{shown!r}')
  alignment.config_methods(e.get('attribution', ''))   # names, before any training
  if not isinstance(e.get('attribution_num', 1), int) or e.get('attribution_num', 1) < 1:
    raise ValueError(f'eval.attribution_num must be a positive integer, got '
                     f'{e.attribution_num!r}')
  if t.decay not in SCHEDULES:
    raise ValueError(f'unknown train.decay {t.decay!r}; valid: {", ".join(sorted(SCHEDULES))}')
  model_config(cfg, 4, 4)  # model fields: names and sizes, before any data or compile
  parallel.resolve(cfg.parallel)
  n = jax.device_count()
  if d.batch_size % n:
    raise ValueError(f'data.batch_size={d.batch_size} is not divisible by the device count {n}')


@dataclasses.dataclass(frozen=True)
class StepSpec:
  """Everything a run's compiled steps are built from, and nothing else: Steps is built from
  this object alone, so it is also the cache key (an option the steps depend on cannot be
  left out of the key: the steps could not read it)."""
  graphdef: Any
  parallel: str
  devices: int
  seed: int
  optimizer: OptimizerConfig
  objective: objective.Objective
  ema_decay: float

  @classmethod
  def of(cls, graphdef, cfg) -> 'StepSpec':
    return cls(graphdef, cfg.parallel, jax.device_count(), cfg.seed,
               OptimizerConfig.of(cfg.train), objective.Objective.of(cfg.train),
               cfg.train.ema_decay)


class Steps:
  """The jit-compiled steps of one model (compiled once per bucket shape).

  `Steps.of` reuses the compiled steps of an identical StepSpec within one process (resumed
  runs, tests, in-process sweeps), instead of compiling them again.
  """
  _cache: dict = {}

  @classmethod
  def of(cls, graphdef, cfg) -> 'Steps':
    spec = StepSpec.of(graphdef, cfg)
    if spec not in cls._cache:
      cls._cache.clear()  # keep one model's executables alive, not every model's
      cls._cache[spec] = cls(spec)
    return cls._cache[spec]

  def __init__(self, spec: StepSpec):
    self.spec = spec
    self.mode = parallel.resolve(spec.parallel)
    args = (spec.graphdef, spec.optimizer.build(), spec.objective, spec.seed)
    ema = dict(ema_decay=spec.ema_decay)
    if self.mode == 'shard_map':
      self.train = parallel.shard_map_train_step(*args, **ema)
    elif self.mode == 'pmap':
      self.train = parallel.pmap_train_step(*args, **ema)
    else:
      self.train = jax.jit(functools.partial(train_step, *args, **ema), donate_argnums=0)
    eval_step = eval_lib.make_teacher_forced(spec.graphdef)
    # evaluation and decoding: the batch is split over the devices too (evaluation: XLA
    # partitions the batch-parallel computation, metric sums are global; decoding: each
    # device decodes its rows, parallel.split_batch). Several processes each evaluate on
    # their own devices.
    single = self.mode == 'single'
    shard = parallel.batch_sharder() if not single else (lambda x: x)
    self.eval = lambda params, batch: eval_step(params, shard(batch))
    self.predict = inference.make_decoder(spec.graphdef, beam=1,
                                          devices=jax.local_devices()[:1] if single else None)


# ---- evaluation -------------------------------------------------------------------
def format_table(results: dict[str, dict]) -> str:
  cols = eval_lib.report_keys(*results.values()) + ['sentences']
  lines = ['| split | ' + ' | '.join(cols) + ' |', '|' + '---|' * (len(cols) + 1)]
  for split, m in results.items():
    lines.append(f'| {split} | ' + ' | '.join(
        f'{m[c]:.4g}' if isinstance(m[c], float) else str(m[c]) for c in cols) + ' |')
  return '\n'.join(lines)


def lead() -> bool:
  """Only process 0 logs and writes files; Orbax checkpoints are written by all processes."""
  return jax.process_index() == 0


def log(msg: str) -> None:
  if lead():
    print(msg, flush=True)


class _NoWriter:
  def __getattr__(self, name):
    return lambda *args, **kwargs: None


def _writer(directory: str):
  if not lead():
    return _NoWriter()
  from tensorboardX import SummaryWriter
  return SummaryWriter(directory)


def _barrier(name: str) -> None:
  from jax.experimental import multihost_utils
  multihost_utils.sync_global_devices(name)


def local(params):
  """Evaluation runs on each process's own devices: fetch replicated params to the host
  when several processes share them (a no-op with one process)."""
  return jax.device_get(params) if jax.process_count() > 1 else params


# ---- the loop ------------------------------------------------------------------------
class Progress:
  """A progress line every `every` steps: step, loss, steps/s, target tokens/s, ETA."""

  def __init__(self, total: int, start: int, every: int, writer):
    self.total, self.every, self.writer = total, every, writer
    self.t0, self.s0, self.loss, self.tokens, self.n = time.time(), start, 0.0, 0.0, 0

  def update(self, step: int, m: dict) -> None:
    # sums stay on the device until a line is printed: no host sync per step (an accelerator
    # then runs ahead of the host instead of waiting for it between steps)
    self.loss = self.loss + m['loss']
    self.tokens = self.tokens + m['tokens']
    self.n += 1
    if step % self.every and step != self.total:
      return
    dt = max(time.time() - self.t0, 1e-9)
    rate = (step - self.s0) / dt
    eta = (self.total - step) / max(rate, 1e-9)
    loss, tokens = float(self.loss) / max(self.n, 1), float(self.tokens)
    log(f'step {step:>6}/{self.total}  loss {loss:.4f}  {rate:.2f} steps/s  '
          f'{tokens / dt:,.0f} tok/s  ETA {eta / 60:.1f} min')
    if self.writer:
      self.writer.add_scalar('train/loss', loss, step)
      self.writer.add_scalar('train/steps_per_sec', rate, step)
      self.writer.add_scalar('train/grad_norm', float(m['grad_norm']), step)
    self.t0, self.s0, self.loss, self.tokens, self.n = time.time(), step, 0.0, 0.0, 0


def prepare_workdir(workdir: str, resume: bool, overwrite: bool) -> None:
  """A fresh run needs an empty workdir: refuse a non-empty one unless `overwrite` (which
  clears a run of this project only, workdir.clear), or resume in it."""
  if os.path.isdir(workdir) and set(os.listdir(workdir)) - {workdir_lib.LOCK_FILE} and not resume:
    if not overwrite:
      raise FileExistsError(
          f'workdir {workdir!r} is not empty and train.resume=False: pass --overwrite to '
          f'delete it and start fresh, or choose another --workdir')
    if lead():   # a run of this project only, everything but the lock this process holds
      workdir_lib.clear(workdir)
  os.makedirs(workdir, exist_ok=True)


def check_source(task, mcfg: ModelConfig) -> None:
  """The model reads what the task gives (token ids or images), or a clear error."""
  if task.source != mcfg.source:
    valid = ', '.join(encoders.names(task.source)) + (
        " (or '' for the arch's own)" if task.source == 'tokens' else '')
    raise ValueError(f'data.name={task.name!r} gives {task.source} as sources, but '
                     f'model.encoder={mcfg.encoder!r} reads {mcfg.source}; valid encoders for '
                     f'{task.source}: {valid}')


def config_differences(saved: dict, now: dict) -> list[str]:
  """What separates two runs' configs (as saved: workdir.Run.config): the model and data
  sections and the seed, as 'model.score: saved 'dot', now 'additive''. A model field the saved run
  predates counts as its ModelConfig default (as in checkpoints), a data field as its
  data.FIELD_DEFAULTS value, so a run saved before the field existed is the same run."""
  defaults = {'model': ModelConfig.defaults(), 'data': data_lib.FIELD_DEFAULTS}
  diffs = [d for sec in ('model', 'data')
           for d in ckpt_lib.differences(saved.get(sec, {}), now.get(sec, {}), defaults[sec],
                                         prefix=f'{sec}.', words=('saved', 'now'))]
  if 'seed' in saved and saved['seed'] != now.get('seed'):   # another init and batch order
    diffs.append(f'seed: saved {saved["seed"]}, now {now.get("seed")}')
  return diffs


def check_same_config(saved: dict, cfg: ml_collections.ConfigDict, workdir: str) -> None:
  """Resuming with a different model/data config would silently mix two runs: refuse."""
  diffs = config_differences(saved, json.loads(cfg.to_json()))
  if diffs:
    raise ValueError(f'workdir {workdir!r} holds a run with another config; differences: '
                     + '; '.join(diffs) + '. Use another --workdir, or train.resume=False '
                     '--overwrite to start again.')


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str,
                       overwrite: bool = False) -> dict:
  """Trains cfg in workdir (resuming if it holds a checkpoint); returns the results.

  Holds the workdir's lock (workdir.WorkdirLock) throughout: a second run on the same
  workdir fails at once with WorkdirInUse and changes nothing in it.
  """
  validate(cfg)
  try:
    if not lead():   # with several processes, process 0 holds the lock for the run
      return _train_and_evaluate(cfg, workdir, overwrite)
    with workdir_lib.WorkdirLock(workdir):
      return _train_and_evaluate(cfg, workdir, overwrite)
  except Exception as e:  # pylint: disable=broad-except  (out of memory: one line, the sizes)
    if 'out of memory' not in str(e).lower() and not isinstance(e, MemoryError):
      raise
    note = parallel.share_note()
    raise MemoryError(f'out of memory ({str(e).strip().splitlines()[0][:200]}) with '
                      f'{_sizes(cfg)}: make the model or the batch smaller'
                      + (f' ({note})' if note else '')) from None


def _sizes(cfg: ml_collections.ConfigDict) -> str:
  """The config fields that decide memory, for an out-of-memory error."""
  m, d = cfg.model, cfg.data
  names = (('d_model', 'ff_dim', 'heads', 'transformer_layers') if m.get('arch') == 'transformer'
           else ('emb_dim', 'enc_hidden', 'enc_layers', 'dec_hidden', 'dec_layers', 'attn_dim'))
  return ', '.join([f'model.{k}={m[k]}' for k in names if k in m]
                   + [f'data.{k}={d[k]}' for k in ('batch_size', 'max_src_len', 'max_tgt_len')
                      if k in d])


def _train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str, overwrite: bool) -> dict:
  prepare_workdir(workdir, cfg.train.resume, overwrite)
  t, d = cfg.train, cfg.data
  run = workdir_lib.Run(workdir)
  latest_dir = run.latest_dir
  resuming = run.resumable
  if resuming:
    check_same_config(run.config(), cfg, workdir)
  elif lead():   # a fresh run: the directory is a run of this project from now on
    run.mark()

  tok_dir = run.tokenizers_dir
  if jax.process_count() > 1 and not lead():
    _barrier('data prepared')   # process 0 prepares the data set and tokenizers first
  if resuming and os.path.isdir(tok_dir):   # the run's own vocabulary, not a retrained one
    task = data_lib.load_task(d, seed=cfg.seed, tokenizers=data_lib.load_tokenizers(tok_dir))
  else:
    task = data_lib.load_task(d, seed=cfg.seed)
    if lead():
      data_lib.save_tokenizers(task, tok_dir)
  if jax.process_count() > 1 and lead():
    _barrier('data prepared')
  mcfg = model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size)
  check_source(task, mcfg)
  alignment.check_task(task, cfg.eval.get('attribution', ''))   # before training, not after

  use_ema = t.ema_decay > 0
  graphdef, state = init_state(mcfg, OptimizerConfig.of(t).build(), cfg.seed, ema=use_ema)
  steps = Steps.of(graphdef, cfg)
  ckpts = ckpt_lib.Checkpoints(run, keep=t.keep_checkpoints)
  it = task.train_iterator(d.batch_size, seed=cfg.seed)
  # best_score: the best validation eval_lib.selection_score (BLEU; 100 - WER for G2P tasks)
  best_score, train_time = -1.0, 0.0   # train_time: seconds in train steps, over all sessions
  tok_fingerprint = ckpt_lib.fingerprint(tok_dir) if os.path.isdir(tok_dir) else None
  restored = ckpt_lib.restore_newest(ckpts.latest, state, log, model_config=mcfg.to_dict(),
                                     model_defaults=ModelConfig.defaults(),
                                     tokenizers=tok_fingerprint) if resuming else None
  skips = 0   # non-finite batches skipped (train.skip_nonfinite)
  if restored is not None:
    state, meta, step0 = restored
    it.set_state(meta['data_state'])
    best_score = meta.get('best_score', meta.get('best_bleu', -1.0))   # (runs before 11-27)
    train_time = meta.get('train_seconds', 0.0)
    skips = meta.get('nonfinite_skipped', 0)
    log(f'resumed from {latest_dir} step {step0}')
    if use_ema and 'ema' not in state:   # EMA switched on for a run saved without one
      state['ema'] = jax.tree.map(lambda x: x.copy(), state['params'])
      log(f'  train.ema_decay={t.ema_decay}: the EMA starts from the step-{step0} parameters')
    elif not use_ema and 'ema' in state:
      del state['ema']
      log('  train.ema_decay=0: the saved EMA of the parameters is dropped; evaluation uses '
          'the trained parameters')
  if lead():   # only once the run is accepted (a refused resume changes nothing)
    run.write_config(cfg.to_json(indent=2), mcfg.to_dict())

  writer = _writer(run.tensorboard_dir)
  step = int(state['step'])
  progress = Progress(t.steps, step, t.log_every, writer)
  log(f'[{steps.mode}: {jax.process_count()} process(es), {jax.device_count()} {jax.devices()[0].platform} device(s)] '
        f'training {mcfg.describe()} on '
        f'{task.name}: {t.steps} steps of {d.batch_size} sentences, '
        f'{sum(x.size for x in jax.tree.leaves(state["params"])):,} parameters')
  evaluate_ = functools.partial(
      eval_lib.evaluate, tf_fn=steps.eval, decode_fn=steps.predict, batch_size=d.batch_size,
      factor=t.max_decode_factor, bleu_tokenize=cfg.eval.bleu_tokenize,
      length_edges=cfg.eval.length_edges)

  def meta_now(step, extra=None):
    return {'step': step, 'data_state': it.get_state(), 'config': json.loads(cfg.to_json()),
            'model_config': mcfg.to_dict(), 'best_score': best_score, 'train_seconds': train_time,
            'nonfinite_skipped': skips, 'tokenizers': tok_fingerprint, **(extra or {})}

  def check_finite(pending) -> int:
    """1 if the step in `pending` (step, metrics, batch) was skipped as non-finite, else 0;
    raises unless train.skip_nonfinite."""
    if pending is None or bool(pending[1]['finite']):
      return 0
    at, m, batch = pending
    where = (f'non-finite training loss {float(m["loss"])} (gradient norm '
             f'{float(m["grad_norm"])}) at step {at}, batch of training examples '
             f'{batch["index"][batch["weight"] > 0].tolist()}')
    if not t.get('skip_nonfinite', False):
      raise FloatingPointError(
          f'{where}; parameters were not updated and the last checkpoint in {latest_dir} '
          f'is untouched (set train.skip_nonfinite=True to skip such batches)')
    log(f'  skipped ({skips + 1} so far): {where}')
    return 1

  pending = None   # the last step whose finiteness is not yet read
  stop = preemption.StopRequest()
  with stop.installed():
    while step < t.steps:
      if stop.signum is not None:   # SIGTERM / SIGINT: save where we are, then exit
        skips += check_finite(pending)
        if step != ckpts.latest.latest_step():
          ckpts.save_latest(step, state, meta_now(step))
        ckpts.close()
        writer.close()
        raise preemption.Interrupted(stop.signum, step, latest_dir)
      t_step = time.time()
      batch = next(it)
      state, m = steps.train(state, batch)
      step += 1
      # the previous step's finiteness is read once this one is dispatched, so the device
      # never idles on the host between steps; a non-finite step leaves the state unchanged
      skips += check_finite(pending)
      pending = (step, m, batch)
      train_time += time.time() - t_step
      progress.update(step, m)
      evaluating = step % t.eval_every == 0 or step == t.steps
      saving = step % t.checkpoint_every == 0 or step == t.steps
      if evaluating or saving:
        skips += check_finite(pending)   # before anything is evaluated or saved
        pending = None
      if evaluating:
        t_eval = time.time()
        val, _, _ = evaluate_(local(eval_params(state)), task, 'validation')
        progress.t0 += time.time() - t_eval  # rates and ETA count training time only
        log(f'  validation @ {step}: loss {val["loss"]:.4f}  exact {val["exact_match"]:.2f}%  '
            f'BLEU {val["bleu"]:.2f}  chrF {val["chrf"]:.2f}'
            + (f'  WER {val["wer"]:.2f}%  PER {val["per"]:.2f}%' if 'wer' in val else ''))
        for k in eval_lib.report_keys(val):
          writer.add_scalar(f'validation/{k}', val[k], step)
        score = eval_lib.selection_score(val)
        if score > best_score:
          best_score = score
          ckpts.save_best(step, state, meta_now(step, {'validation': val}), score)
      if saving:
        ckpts.save_latest(step, state, meta_now(step))
      hold.point('train_step', lambda: stop.signum is not None, step=step, workdir=workdir)
  writer.flush()

  # final evaluation with the best checkpoint
  best_step = ckpts.best.best_step()
  params = local(eval_params(state))
  if best_step is not None and best_step != step:
    params = eval_params(ckpt_lib.restore(ckpts.best, best_step, state)[0])
  results, sentences = {}, {}
  kept = {}
  for split in ('validation', *task.test_splits):   # image_dates: also test_heldout_fonts
    results[split], kept[split], sentences[split] = evaluate_(
        params, task, split, keep_outputs=cfg.eval.heatmaps if split != 'validation' else 0)
  if lead() and cfg.eval.get('attribution'):   # implicit attention against gold alignments
    log(f'attributing {cfg.eval.get("attribution_num", 200)} test sentences '
        f'({cfg.eval.attribution})')
    results['test']['attribution'] = alignment.from_config(graphdef, params, task, cfg, mcfg)
  heads = functools.partial(inference.layer_weights, graphdef, params) \
      if mcfg.arch == 'transformer' else None
  paths = [path for split in task.test_splits if lead() and kept[split]
           for path in eval_lib.heatmaps(task, kept[split], run.heatmaps_dir, split, heads,
                                         functools.partial(encoders.grid_shape, mcfg))]
  summary = {'step': step, 'best_step': best_step, 'results': results,
             'nonfinite_skipped': skips,
             'train_steps_per_s': step / train_time if train_time else None,
             'model_config': mcfg.to_dict(), 'heatmaps': paths}
  if lead():
    for split, (header, recs) in sentences.items():   # for comparisons later (records.py)
      records_lib.write(run.sentences_path(split), header, recs)
    run.write_results(summary)   # last: it marks the run finished
  for split, m in results.items():
    for k in ('exact_match', 'bleu', 'chrf'):
      writer.add_scalar(f'final_{split}/{k}', m[k], step)
  writer.close()
  ckpts.close()
  log(f'\nresults (best checkpoint, step {best_step}); BLEU signature '
        f'{results["test"]["bleu_signature"]}\n{format_table(results)}')
  log(f'results: {run.results_path}' + (f'\nheatmaps: {run.heatmaps_dir}/' if paths else ''))
  return summary
