"""Training a run alone: its config checked before any work, the jit-compiled steps of its
model (Compiled: train, teacher-forced evaluation, decoding), and train_and_evaluate, which sets
the run up and hands it to the one training loop (loop.py) as a population of one. The pure
train step is in steps.py, a run's bookkeeping in session.py, data parallelism in
data_parallel.py; a population of seeds is set up in population_run.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

import jax
import ml_collections

from attention_jax import data as data_lib
from attention_jax import devices
from attention_jax import workdir as workdir_lib
from attention_jax.data import data_fields
from attention_jax.decoding import inference
from attention_jax.evaluation import evaluators
from attention_jax.evaluation import scoring
from attention_jax.models import attention
from attention_jax.state import templates
from attention_jax.state.templates import init_state, model_config
from attention_jax.training import data_parallel
from attention_jax.training import loop
from attention_jax.training import objective
from attention_jax.training.session import (  # (re-exported)
    Session, check_same_config, check_source, config_differences, format_table, lead, log,
    prepare_workdir)
from attention_jax.training.update import SCHEDULES, OptimizerConfig, make_optimizer, train_step

__all__ = ['SCHEDULES', 'OptimizerConfig', 'Session', 'StepSpec', 'Compiled', 'check_same_config',
           'check_source', 'config_differences', 'format_table', 'init_state', 'make_optimizer',
           'model_config', 'prepare_workdir', 'train_step', 'train_and_evaluate', 'check_config',
           'check_fields']


# ---- set-up ------------------------------------------------------------------
def check_config(cfg: ml_collections.ConfigDict) -> None:
  """Fails before any compile, naming the field and the valid range: check_fields, then
  the batch against this process's devices."""
  check_fields(cfg)
  n = jax.device_count()
  if cfg.data.batch_size % n:
    raise ValueError(f'data.batch_size={cfg.data.batch_size} is not divisible by the device '
                     f'count {n}')


def check_fields(cfg: ml_collections.ConfigDict) -> None:
  """Every field of an experiment config, without touching a device (a sweep checks each
  variant's config so, before any run starts): ValueError naming the field and the valid
  range, values or fields."""
  t, d = cfg.train, cfg.data
  data_fields.check(d)     # the data fields the task reads, before any data or compile
  loop.Loop.of(t)          # the trainer's, the optimiser's and the loss's fields
  OptimizerConfig.of(t)
  evaluators.Scoring.of(cfg.eval)   # the eval fields every evaluation reads
  e = cfg.eval
  evaluators.build(e)   # each evaluator checks its own fields, before any training
  mcfg = model_config(cfg, 4, 4)  # the model's fields, before any data or compile
  reducers = objective.Objective.of(t).variance_reduction   # (its values checked there)
  objective.Objective.of(t).check_model(mcfg)   # guided alignment: the model's attention
  if reducers and not mcfg.stochastic:
    sampling = ', '.join(n for n, m in attention.MODES.items() if m.stochastic)
    raise ValueError(f'{", ".join(reducers)}: only a sampling attention mode ({sampling}) '
                     f'reads it; model.attention_mode={mcfg.attention_mode!r} samples nothing '
                     f'(leave it at its default, or set model.attention_mode=hard)')
  devices.resolve(cfg.parallel, num_devices=1)   # the mode's name (no device is asked)


@dataclasses.dataclass(frozen=True)
class StepSpec:
  """Everything a run's compiled steps are built from, and nothing else: Compiled is built from
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


class Compiled:
  """The jit-compiled steps of one model (compiled once per bucket shape).

  `Compiled.of` reuses the compiled steps of an identical StepSpec within one process (resumed
  runs, tests, in-process sweeps), instead of compiling them again.
  """
  _cache: dict = {}

  @classmethod
  def of(cls, graphdef, cfg) -> 'Compiled':
    spec = StepSpec.of(graphdef, cfg)
    if spec not in cls._cache:
      cls._cache.clear()  # keep one model's executables alive, not every model's
      cls._cache[spec] = cls(spec)
    return cls._cache[spec]

  def __init__(self, spec: StepSpec):
    self.spec = spec
    self.mode = devices.resolve(spec.parallel)
    args = (spec.graphdef, spec.optimizer.build(), spec.objective, spec.seed)
    ema = dict(ema_decay=spec.ema_decay)
    if self.mode == 'shard_map':
      self.train = data_parallel.shard_map_train_step(*args, **ema)
    elif self.mode == 'pmap':
      self.train = data_parallel.pmap_train_step(*args, **ema)
    else:
      self.train = jax.jit(functools.partial(train_step, *args, **ema), donate_argnums=0)
    eval_step = scoring.make_teacher_forced(spec.graphdef)
    # evaluation and decoding: the batch is split over the devices too (evaluation: XLA
    # partitions the batch-parallel computation, metric sums are global; decoding: each
    # device decodes its rows, inference.split_batch). Several processes each evaluate on
    # their own devices.
    single = self.mode == 'single'
    shard = devices.batch_sharder() if not single else (lambda x: x)
    self.eval = lambda params, batch: eval_step(params, shard(batch))
    self.predict = inference.make_decoder(spec.graphdef, beam=1,
                                          devices=jax.local_devices()[:1] if single else None)


# ---- a run alone in the loop ----------------------------------------------------------
class Single:
  """loop.Stepper of a run alone: its state, stepped by train.Compiled (jax.jit on one device,
  shard_map or pmap over several)."""
  members = 1

  def __init__(self, steps: Compiled, state):
    self.steps, self.state = steps, state

  def templates(self) -> list:
    return [self.state]

  def load(self, states: list) -> None:
    self.state, = states

  def step(self, batches: list[dict]) -> dict:
    self.state, m = self.steps.train(self.state, batches[0])
    return m

  def metrics_of(self, m: dict, k: int) -> dict:
    return m

  def state_of(self, k: int):
    return self.state


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str,
                       overwrite: bool = False) -> dict:
  """Trains cfg in workdir (resuming if it holds a checkpoint); returns the results.

  Holds the workdir's lock (workdir.WorkdirLock) throughout: a second run on the same
  workdir fails at once with WorkdirInUse and changes nothing in it. A population
  (train.population > 1) trains with population_run.train_population instead.
  """
  check_config(cfg)
  if cfg.train.get('population', 1) > 1:
    raise ValueError(f'train.population={cfg.train.population} trains several seeds: use '
                     'attention_jax.training.population_run.train_population '
                     '(experiments/main.py does)')
  data_lib.fetch(cfg.data)   # what the task needs from outside, before the workdir is touched
  with memory_explained(cfg):
    if not lead():   # with several processes, process 0 holds the lock for the run
      return _train_and_evaluate(cfg, workdir, overwrite)
    with workdir_lib.WorkdirLock(workdir):
      return _train_and_evaluate(cfg, workdir, overwrite)


@contextlib.contextmanager
def memory_explained(cfg: ml_collections.ConfigDict):
  """Out of memory inside: one MemoryError line naming the sizes (and the device share)."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except  (out of memory: one line, the sizes)
    if 'out of memory' not in str(e).lower() and not isinstance(e, MemoryError):
      raise
    note = devices.share_note()
    raise MemoryError(f'out of memory ({str(e).strip().splitlines()[0][:200]}) with '
                      f'{_sizes(cfg)}: make the model or the batch smaller'
                      + (f' ({note})' if note else '')) from None


def _sizes(cfg: ml_collections.ConfigDict) -> str:
  """The config fields that decide memory, for an out-of-memory error."""
  m, d = templates.as_configured(cfg), cfg.data   # (the smoke variant's sizes, as trained)
  names = (('d_model', 'ff_dim', 'heads', 'transformer_layers') if m.get('arch') == 'transformer'
           else ('emb_dim', 'enc_hidden', 'enc_layers', 'dec_hidden', 'dec_layers', 'attn_dim'))
  return ', '.join([f'model.{k}={m[k]}' for k in names if k in m]
                   + [f'data.{k}={d[k]}' for k in ('batch_size', 'max_src_len', 'max_tgt_len')
                      if k in d])


def _train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str, overwrite: bool) -> dict:
  t, d = cfg.train, cfg.data
  s = Session(cfg, workdir, overwrite)
  graphdef, state = init_state(s.mcfg, OptimizerConfig.of(t).build(), cfg.seed, ema=s.use_ema)
  steps = Compiled.of(graphdef, cfg)
  s.open()
  stepper = Single(steps, state)
  stepper.load(loop.resume([s], stepper.templates()))
  s.start(steps)
  log(f'[{steps.mode}: {jax.process_count()} process(es), {jax.device_count()} '
      f'{jax.devices()[0].platform} device(s)] training {s.mcfg.describe()} on '
      f'{s.task.name}: {t.steps} steps of {d.batch_size} sentences, '
      f'{sum(x.size for x in jax.tree.leaves(stepper.state["params"])):,} parameters')
  return loop.run(loop.Loop.of(t), workdir, [s], stepper, graphdef)[0]
