"""One run in the training loop, whoever drives it: its set-up (an empty or resumable workdir,
the same config when resuming, the task and its tokenizers, the model config), and what the
loop does with it (resume, validate, save the latest and the best checkpoints, stop on a
signal, the final evaluation). loop.py drives one Session per member: one for a run alone,
one per seed of a population. Only
process 0 logs and writes files (lead); Orbax checkpoints are written by all processes.
"""

from __future__ import annotations

import functools
import json
import os

import jax
import ml_collections

from attention_jax import data as data_lib
from attention_jax import hold
from attention_jax import workdir as workdir_lib
from attention_jax.data import data_fields
from attention_jax.evaluation import evaluators as evaluators_lib
from attention_jax.evaluation import scoring
from attention_jax.models import encoders, sources
from attention_jax.models.model import ModelConfig
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.state import templates
from attention_jax.state.templates import eval_params, model_config
from attention_jax.training import objective


# ---- logging and files: process 0 ------------------------------------------------------------
def format_table(results: dict[str, dict]) -> str:
  cols = scoring.report_keys(*results.values()) + ['sentences']
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


# ---- a workdir to train in ------------------------------------------------------------------
def prepare_workdir(workdir: str, resume: bool, overwrite: bool) -> None:
  """A fresh run needs an empty workdir: refuse a non-empty one unless `overwrite` (which
  clears a run of this project only, workdir.clear), or resume in it. Resuming needs a run
  (or what a sweep writes before its run starts): a folder of other files with no checkpoint
  is refused as a fresh start in it is (its files would be mixed with the run's)."""
  if os.path.isdir(workdir) and set(os.listdir(workdir)) - {workdir_lib.LOCK_FILE}:
    if not resume:
      if not overwrite:
        raise FileExistsError(
            f'workdir {workdir!r} is not empty and train.resume=False: pass --overwrite to '
            f'delete it and start fresh, or choose another --workdir')
      if lead():   # a run of this project only, everything but the lock this process holds
        workdir_lib.clear(workdir)
    elif not workdir_lib.Run(workdir).resumable:
      foreign = workdir_lib.not_a_run(workdir)
      if foreign:
        raise FileExistsError(
            f'workdir {workdir!r} is not empty and holds no run to resume (it holds '
            f'{workdir_lib.listing(workdir, foreign, mark_folders=False)}): choose another '
            '--workdir')
  os.makedirs(workdir, exist_ok=True)


def check_source(task, mcfg: ModelConfig) -> None:
  """The model reads what the task gives (token ids or images), or a clear error."""
  if task.source != mcfg.source:
    valid = ', '.join(encoders.names(task.source)) + (
        " (or '' for the arch's own)" if sources.lookup(task.source).own_encoder else '')
    raise ValueError(f'data.name={task.name!r} gives {task.source} as sources, but '
                     f'model.encoder={mcfg.encoder!r} reads {mcfg.source}; valid encoders for '
                     f'{task.source}: {valid}')


def config_differences(saved: dict, now: dict) -> list[str]:
  """What separates two runs' configs (as saved: workdir.Run.config): the model and data
  sections and the seed, as 'model.score: saved 'dot', now 'additive''. A model field the saved run
  predates counts as its ModelConfig default (as in checkpoints), a data field as its
  data_fields.defaults() value, so a run saved before the field existed is the same run; fields
  the model or the task does not read are left out (older runs saved them all)."""
  defaults = {'model': ModelConfig.defaults(), 'data': data_fields.defaults()}
  read = {'model': templates.as_read, 'data': data_fields.as_read}   # unread fields: dropped
  diffs = [d for sec in ('model', 'data')
           for d in ckpt_lib.differences(read[sec](saved), read[sec](now), defaults[sec],
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


# ---- one run in the loop ---------------------------------------------------------------------
class Session:
  """One run in the training loop: its directory (workdir.Run), task, model config,
  checkpoints, data iterator and counters (the best validation score, seconds in train steps
  over all sessions, non-finite steps skipped), and what the loop does with it: resume,
  validate, save, stop, finish. loop.run drives one per member."""

  def __init__(self, cfg: ml_collections.ConfigDict, workdir: str, overwrite: bool):
    prepare_workdir(workdir, cfg.train.resume, overwrite)
    self.cfg, self.workdir = cfg, workdir
    d = cfg.data
    run = self.run = workdir_lib.Run(workdir)
    self.resuming = bool(cfg.train.resume) and run.resumable
    if jax.process_count() > 1:   # every process has judged the workdir before process 0
      _barrier('workdir checked')   # writes to it (a marker's temp file is no foreign entry)
    if self.resuming:
      check_same_config(run.config(), cfg, workdir)
    elif lead():   # a fresh run: the directory is a run of this project from now on
      run.mark()
    tok_dir = run.tokenizers_dir
    if jax.process_count() > 1 and not lead():
      _barrier('data prepared')   # process 0 prepares the data set and tokenizers first
    if self.resuming and os.path.isdir(tok_dir):   # the run's own vocabulary, not a retrained one
      task = data_lib.load_task(d, seed=cfg.seed, tokenizers=data_lib.load_tokenizers(tok_dir))
    else:
      task = data_lib.load_task(d, seed=cfg.seed)
      if lead():
        data_lib.save_tokenizers(task, tok_dir)
    if jax.process_count() > 1 and lead():
      _barrier('data prepared')
    self.task = task
    self.mcfg = model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size)
    check_source(task, self.mcfg)
    self.evaluators = evaluators_lib.build(cfg.eval)
    for e in self.evaluators:   # e.g. eval.attribution on a task without gold: before training
      e.check(task)
    self.use_ema = cfg.train.ema_decay > 0
    self.tok_fingerprint = ckpt_lib.fingerprint(tok_dir) if os.path.isdir(tok_dir) else None
    self.ckpts: ckpt_lib.Checkpoints | None = None
    self.it = None
    # best_score: the best validation scoring.selection_score (BLEU; 100 - WER for G2P tasks)
    self.best_score, self.train_time, self.skips = -1.0, 0.0, 0
    self.writer, self.evaluate = _NoWriter(), None

  @property
  def latest_dir(self) -> str:
    return self.run.latest_dir

  def open(self, keep: int | None = None) -> None:
    """The checkpoint managers (keeping `keep` latest steps, default train.keep_checkpoints)
    and the training iterator (seeded by the run's seed, as alone)."""
    t = self.cfg.train
    obj = objective.Objective.of(t)   # guided alignment: batches carry the gold attention
    share = obj.guided_alignment_share if obj.guided_alignment_weight > 0 else None
    self.it = self.task.train_iterator(self.cfg.data.batch_size, seed=self.cfg.seed,
                                       guide_share=share)   # (a task without gold: refused)
    self.ckpts = ckpt_lib.Checkpoints(self.run, keep=keep or t.keep_checkpoints)

  def _expect(self) -> dict:
    return dict(model_config=self.mcfg.to_dict(), model_defaults=ModelConfig.defaults(),
                tokenizers=self.tok_fingerprint)

  def restore_newest(self, template):
    """(state, meta, step) of the newest readable latest checkpoint, None when not resuming
    (checkpoint.restore_newest: corrupt steps set aside)."""
    if not self.resuming:
      return None
    return ckpt_lib.restore_newest(self.ckpts.latest, template, log, **self._expect())

  def restore_at(self, template, step: int):
    """(state, meta, step) of the latest checkpoint of `step`."""
    return (*ckpt_lib.restore(self.ckpts.latest, step, template, **self._expect()), step)

  def resume_from(self, restored):
    """The state of `restored` (restore_newest / restore_at), with the iterator and counters where it was
    saved; EMA started or dropped as train.ema_decay now says."""
    state, meta, step0 = restored
    t = self.cfg.train
    self.it.set_state(meta['data_state'])
    self.best_score = meta.get('best_score', meta.get('best_bleu', -1.0))   # (runs before 11-27)
    self.train_time = meta.get('train_seconds', 0.0)
    self.skips = meta.get('nonfinite_skipped', 0)
    log(f'resumed from {self.latest_dir} step {step0}')
    if self.use_ema and 'ema' not in state:   # EMA switched on for a run saved without one
      state['ema'] = jax.tree.map(lambda x: x.copy(), state['params'])
      log(f'  train.ema_decay={t.ema_decay}: the EMA starts from the step-{step0} parameters')
    elif not self.use_ema and 'ema' in state:
      del state['ema']
      log('  train.ema_decay=0: the saved EMA of the parameters is dropped; evaluation uses '
          'the trained parameters')
    return state

  def start(self, steps) -> None:
    """Accepted: its config is written (a refused resume changes nothing), TensorBoard opened,
    evaluation bound to `steps`' compiled evaluation and decoding (train.Compiled)."""
    cfg, t = self.cfg, self.cfg.train
    if lead():
      self.run.write_config(cfg.to_json(indent=2), self.mcfg.to_dict())
    self.writer = _writer(self.run.tensorboard_dir)
    self.evaluate = functools.partial(
        scoring.score_split, tf_fn=steps.eval, decode_fn=steps.predict,
        batch_size=cfg.data.batch_size, factor=t.max_decode_factor,
        bleu_tokenize=cfg.eval.bleu_tokenize)

  def report(self, when: str, split: str, params, graphdef=None, keep: int = 0) -> dict:
    """`split` scored with `params`, then the evaluators that run `when` on it -> its report."""
    scored = self.evaluate(params, self.task, split, keep_outputs=keep)
    if when == 'final' and not lead():   # only process 0 reports and writes
      return scored.report
    where = {'heatmaps': lambda: self.run.heatmaps_dir,
             'sentences': lambda: self.run.sentences_path(split)}
    return evaluators_lib.run_all(self.evaluators, evaluators_lib.Context(
        when, split, scored.report, scored.kept, scored.records, self.task, graphdef, params,
        self.mcfg, self.cfg, sentences=scored.sentences,
        path=(lambda kind: where[kind]()) if lead() else None, prefix=split))

  def meta(self, step: int, extra: dict | None = None) -> dict:
    return {'step': step, 'data_state': self.it.get_state(), 'config': json.loads(self.cfg.to_json()),
            'model_config': self.mcfg.to_dict(), 'best_score': self.best_score,
            'train_seconds': self.train_time, 'nonfinite_skipped': self.skips,
            'tokenizers': self.tok_fingerprint, **(extra or {})}

  def check_finite(self, pending) -> None:
    """Counts the step in `pending` (step, metrics, batch) if it was non-finite (skipped);
    raises FloatingPointError instead unless train.skip_nonfinite."""
    if pending is None or bool(pending[1]['finite']):
      return
    at, m, batch = pending
    where = (f'non-finite training loss {float(m["loss"])} (gradient norm '
             f'{float(m["grad_norm"])}) at step {at}, batch of training examples '
             f'{batch["index"][batch["weight"] > 0].tolist()}')
    if not self.cfg.train.get('skip_nonfinite', False):
      raise FloatingPointError(
          f'{where}; parameters were not updated and the last checkpoint in {self.latest_dir} '
          f'is untouched (set train.skip_nonfinite=True to skip such batches)')
    self.skips += 1
    log(f'  skipped ({self.skips} so far): {where}')

  def validate(self, step: int, state, prefix: str = '') -> None:
    """Validation at `step`: logged, to TensorBoard, the best checkpoint saved if it is."""
    val = self.report('validation', 'validation', local(eval_params(state)))
    log(f'  {prefix}validation @ {step}: loss {val["loss"]:.4f}  exact '
        f'{val["exact_match"]:.2f}%  BLEU {val["bleu"]:.2f}  chrF {val["chrf"]:.2f}'
        + (f'  WER {val["wer"]:.2f}%  PER {val["per"]:.2f}%' if 'wer' in val else ''))
    for k in scoring.report_keys(val):
      self.writer.add_scalar(f'validation/{k}', val[k], step)
    score = scoring.selection_score(val)
    if score > self.best_score:
      self.best_score = score
      self.ckpts.save_best(step, state, self.meta(step, {'validation': val}), score)

  def save_latest(self, step: int, state) -> None:
    self.ckpts.save_latest(step, state, self.meta(step))

  def stop(self, step: int, state) -> None:
    """On a stop signal: the latest checkpoint at `step` (unless saved), closed."""
    if step != self.ckpts.latest.latest_step():
      self.save_latest(step, state)
    self.close()

  def close(self) -> None:
    self.ckpts.close()
    self.writer.close()

  def finish(self, graphdef, state, step: int, extra: dict | None = None) -> dict:
    """The final evaluation with the best checkpoint: every split scored, then the evaluators
    (evaluators.py: by length, attribution, heatmaps, sentence records) on it; results
    (+ `extra`) -> the summary (as written to the run's results file)."""
    cfg, task, mcfg, run, writer = self.cfg, self.task, self.mcfg, self.run, self.writer
    writer.flush()
    best_step = self.ckpts.best.best_step()
    params = local(eval_params(state))
    if best_step is not None and best_step != step:
      params = eval_params(ckpt_lib.restore(self.ckpts.best, best_step, state)[0])
    results = {}
    for split in ('validation', *task.test_splits):   # image_dates: also test_heldout_fonts
      results[split] = self.report('final', split, params, graphdef,
                                   keep=cfg.eval.heatmaps if split != 'validation' else 0)
      hold.point('final_evaluation', workdir=self.workdir, split=split)   # tests only (hold.py)
    paths = [p for m in results.values() for p in m.get('heatmaps', [])]
    summary = {'step': step, 'best_step': best_step, 'results': results,
               'nonfinite_skipped': self.skips,
               'train_steps_per_s': step / self.train_time if self.train_time else None,
               'model_config': mcfg.to_dict(), **(extra or {})}
    if lead():
      run.write_results(summary)   # last: it marks the run finished
    for split, m in results.items():
      for k in ('exact_match', 'bleu', 'chrf'):
        writer.add_scalar(f'final_{split}/{k}', m[k], step)
    self.close()
    log(f'\nresults (best checkpoint, step {best_step}); BLEU signature '
        f'{results["test"]["bleu_signature"]}\n{format_table(results)}')
    log(f'results: {run.results_path}' + (f'\nheatmaps: {run.heatmaps_dir}/' if paths else ''))
    return summary
