"""Populations: N runs of one config that differ only in their seed, trained as one program.

Attention studies are many small models (variants x seeds), each of which uses a sliver of an
accelerator. A population stacks the members' train states along a leading member axis and
runs update.train_step under `jax.vmap` over (seed, state, batch): one compiled step trains
every member, each with its own initial parameters, dropout keys (fold_in(key(seed), step), as
alone) and batches (its own batch order, data seeded by its seed). Member k computes what the
run of seed k computes alone, up to float rounding (tests/test_population.py), with one
exception: with dropout, a member whose batch was padded further than alone (another member's
batch of that step fell in a longer length bucket) draws other dropout masks, since a mask's
random bits depend on its shape; it is then an equally valid run, not the same one. One length
bucket (data.num_buckets=1), or no dropout, keeps every member exact.

  graphdef, states = init_population(mcfg, tx, seeds=(1, 2, 3))   # every leaf [N, ...]
  step = make_population_step(graphdef, tx, obj)
  states, m = step(jnp.asarray(seeds), states, stack_batches([next(it) for it in iters]))
  m['loss']                                                          # [N]
  member(states, 0)                                                  # seed 1's state

Members' batches of different padded shapes (length buckets) are padded to a common shape
(stack_batches): PAD tokens and masked image pixels, which the padding-invariance tests show
change no output and no gradient.

With several devices the member axis is itself split (make_population_step(mesh=...)): a
2-D mesh 'members' x 'data' (devices.population_mesh) puts each member on its own group of
devices and splits that member's batch rows over the group, so data parallelism composes
with the population.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from attention_jax import devices
from attention_jax.models.model import ModelConfig
from attention_jax.state import templates
from attention_jax.training import objective
from attention_jax.training import update


def init_population(mcfg: ModelConfig, tx, seeds: Sequence[int], ema: bool = False):
  """-> (graphdef, the members' initial states stacked: every leaf [N, ...]), member k's
  state that of templates.init_state(mcfg, tx, seeds[k]) exactly."""
  if not seeds or len(set(seeds)) != len(seeds):
    raise ValueError(f'a population needs distinct seeds, got {list(seeds)!r}')
  graphdef, states = None, []
  for seed in seeds:
    graphdef, state = templates.init_state(mcfg, tx, int(seed), ema=ema)
    states.append(state)
  return graphdef, jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def population_step(graphdef, tx, obj: objective.Objective, seeds: jax.Array, states, batches,
                    ema_decay: float = 0.0):
  """seeds [N] int32, states and batches with a leading member axis -> (new states, metrics
  {name: [N]}): update.train_step of each member, vmapped. A member whose step is non-finite
  keeps its state (metrics['finite'][k] = 0); the others step on."""
  one = functools.partial(update.train_step, graphdef, tx, obj, ema_decay=ema_decay)
  return jax.vmap(lambda seed, state, batch: one(seed, state, batch))(seeds, states, batches)


def make_population_step(graphdef, tx, obj: objective.Objective, ema_decay: float = 0.0,
                         mesh: jax.sharding.Mesh | None = None):
  """-> jit-compiled step(seeds [N], states, batches) (population_step; the states donated).

  mesh (devices.population_mesh, axes 'members' x 'data'): the members split over the
  'members' axis and each member's batch rows over 'data' (XLA partitions the vmapped step
  and sums each member's gradients over its 'data' devices); states and metrics come back
  split by member. None: everything on one device."""
  fn = functools.partial(population_step, graphdef, tx, obj, ema_decay=ema_decay)
  if mesh is None:
    return jax.jit(fn, donate_argnums=1)
  by_member = NamedSharding(mesh, P(devices.MEMBERS))
  rows = NamedSharding(mesh, P(devices.MEMBERS, devices.AXIS))   # batches [N, B, ...]
  return jax.jit(fn, in_shardings=(by_member, by_member, rows),
                 out_shardings=(by_member, by_member), donate_argnums=1)


def member(states, k: int):
  """Member k's state (every leaf's row k), e.g. to save or evaluate it alone."""
  return jax.tree.map(lambda x: x[k], states)


def stack_batches(batches: Sequence[dict]) -> dict:
  """The members' batches {name: [B, ...]} -> {name: [N, B, ...]}: token arrays padded at the
  end of each axis to the members' largest shape with PAD (0), float sources (images) with -1
  (the masked pixel value of data.tasks)."""
  if len({tuple(sorted(b)) for b in batches}) != 1:
    raise ValueError(f'members\' batches have different fields: {[sorted(b) for b in batches]}')
  out = {}
  for name in batches[0]:
    arrays = [np.asarray(b[name]) for b in batches]
    if len({a.ndim for a in arrays}) != 1 or len({a.shape[0] for a in arrays}) != 1:
      raise ValueError(f'members\' batches differ in {name!r} beyond padding: '
                       f'{[a.shape for a in arrays]}')
    shape = np.max([a.shape for a in arrays], axis=0)
    fill = -1 if np.issubdtype(arrays[0].dtype, np.floating) and name == 'src' else 0
    out[name] = np.stack([np.pad(a, [(0, int(n - m)) for n, m in zip(shape, a.shape)],
                                 constant_values=fill) for a in arrays])
  return out
