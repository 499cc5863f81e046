"""Train-state templates: the model config of an experiment config, the initial train state,
and the abstract states (shapes and dtypes) a checkpoint is restored into. Below training
(which steps the state) and decoding (which restores the parameters into a template).

The train state is a plain pytree {'step', 'params', 'opt'} (plus 'baseline' for the hard
attention modes, 'ema' with train.ema_decay > 0).
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from attention_jax.data import data_fields
from attention_jax.models import model as model_lib
from attention_jax.models.model import ModelConfig


def as_configured(config: Mapping[str, Any]) -> dict[str, Any]:
  """The model section of an experiment config (a ConfigDict or its JSON) as the model reads
  it: with `smoke` (the smoke variant) the smoke sizes its parts give (their Fields.SMOKE) of
  the fields that are at their defaults; fields it does not read kept (ModelConfig refuses
  them if set)."""
  fields = dict(config['model'])
  if not config.get('smoke', False):
    return fields
  try:
    small = model_lib.smoke_sizes(fields)
  except ValueError:
    return fields
  defaults = ModelConfig.defaults()
  return {**fields, **{k: v for k, v in small.items()
                       if fields.get(k, defaults[k]) == defaults[k]}}


def as_read(config: Mapping[str, Any]) -> dict[str, Any]:
  """The model fields an experiment config (or a saved one) trains with, unread ones
  dropped: what a resume and a sweep's "changed" compare."""
  return model_lib.migrate(as_configured(config)) if 'model' in config else {}


def model_config(cfg: ml_collections.ConfigDict, src_vocab: int, tgt_vocab: int) -> ModelConfig:
  """The model of an experiment config: its model section (with cfg.smoke, the smoke sizes of
  the fields the model reads: as_configured); a field the model does not read set to
  another value than its default is refused in one line (ModelConfig)."""
  return ModelConfig.from_dict(as_configured(cfg), src_vocab=src_vocab,
                               tgt_vocab=tgt_vocab)


def migrate_config(saved: dict) -> dict:
  """A run's saved config (workdir.Run.config) as today's code trains it: the model and data fields
  its model and task do not read back at their defaults (runs saved before each model and
  task owned its fields hold them all, e.g. a transformer of the smoke variant enc_hidden=16),
  so that it can be trained again or resumed with (ml_collections.ConfigDict(...))."""
  out = dict(saved)
  if 'model' in saved:
    out['model'] = {**ModelConfig.defaults(), **model_lib.migrate(saved['model'])}
  if 'data' in saved:
    out['data'] = {**data_fields.defaults(), **data_fields.as_read(saved)}
  return out


def init_state(mcfg: ModelConfig, tx, seed: int, ema: bool = False):
  """-> (graphdef, state {'step', 'params', 'opt'} (+ 'ema': a copy of params if `ema`)).

  Built by one compiled program: run eagerly, a model's initialisers are some 50 separately
  compiled little programs per model shape (seconds of every process's start)."""
  graphdef, make = _state_maker(mcfg, tx, seed)
  program = jax.jit(make).lower()     # traces make(): fills graphdef
  params = program.out_info['params']
  _check_fits(jax.tree.leaves(program.out_info) + (jax.tree.leaves(params) if ema else []))
  state = program.compile()()
  if ema:   # a copy, not the same buffers: the train step donates its state
    state['ema'] = jax.tree.map(jnp.copy, state['params'])
  return graphdef[0], state


def _check_fits(arrays) -> None:
  """MemoryError naming the bytes when the state alone exceeds the first device's memory
  (a compiled initialiser far beyond it does not fail: it hangs)."""
  need = sum(math.prod(x.shape) * x.dtype.itemsize for x in arrays)
  device = jax.local_devices()[0]
  stats = device.memory_stats() or {}
  have = stats.get('bytes_limit') or (os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
                                      if device.platform == 'cpu' else None)
  if have and need > have:
    raise MemoryError(f'Out of memory allocating {need} bytes (the train state) on {device}, '
                      f'which has {have} bytes.')


def abstract_state(mcfg: ModelConfig, tx, seed: int = 0):
  """-> (graphdef, the state's shapes and dtypes as jax.ShapeDtypeStruct): what a checkpoint
  is restored into, computed without running an initialiser."""
  graphdef, make = _state_maker(mcfg, tx, seed)
  abstract = jax.eval_shape(make)     # traces make(): fills graphdef
  return graphdef[0], abstract


def abstract_params(mcfg: ModelConfig, seed: int = 0):
  """-> (graphdef, {'params': the parameters' shapes and dtypes}): what inference restores
  (no optimiser: its settings and its moments play no part in translating)."""
  graphdef, abstract = abstract_state(mcfg, optax.identity(), seed)
  return graphdef, {'params': abstract['params']}


def _state_maker(mcfg: ModelConfig, tx, seed: int):
  """-> (graphdef: [the model's graphdef] once make() is traced, make() -> the initial state).
  The graphdef (static structure) is taken from the trace itself: the model is built once."""
  graphdef = []

  def make():
    defn, params = nnx.split(model_lib.build(mcfg, rngs=nnx.Rngs(seed)))
    graphdef[:] = [defn]
    params = nnx.to_pure_dict(params)
    state = {'step': jnp.zeros((), jnp.int32), 'params': params, 'opt': tx.init(params)}
    if mcfg.stochastic:   # the REINFORCE baseline of the hard attention modes
      state['baseline'] = jnp.zeros((), jnp.float32)
    return state
  return graphdef, make


def eval_params(state):
  """The parameters to evaluate and translate with: the EMA when the state has one (a state
  restored for inference may hold only the EMA)."""
  return state['ema'] if 'ema' in state else state['params']
