"""Data-parallel train steps: one per-device train step (update.train_step with
axis_name='data'), run either under `jax.jit` + `jax.shard_map` over a device mesh (the
default with more than one device) or under the classic `jax.pmap`. Parameters are
replicated, the batch is split along its first axis; both give the same parameters as one
device on the same global batch.
"""

from __future__ import annotations

import functools

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from attention_jax.devices import AXIS, make_mesh
from attention_jax.training import update


def shard_map_train_step(graphdef, tx, obj, seed: int, mesh=None, ema_decay: float = 0.0):
  """-> jit(shard_map(train_step)): (state, batch [B, ...]) -> (state, metrics), state
  replicated, batch split over the mesh's 'data' axis, buffers donated."""
  mesh = mesh or make_mesh()
  step = functools.partial(update.train_step, graphdef, tx, obj, seed,
                           axis_name=AXIS, ema_decay=ema_decay)
  # check_vma=False: the RNN scans start from replicated zero carries that become per-device
  f = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()),
                    check_vma=False)
  batch_sharding = NamedSharding(mesh, P(AXIS))
  jitted = jax.jit(f, donate_argnums=0)

  def run(state, batch):
    if jax.process_count() == 1:
      return jitted(state, jax.device_put(batch, batch_sharding))
    # every process iterates the same global batches and feeds only its own rows
    p, n = jax.process_index(), jax.process_count()
    rows = lambda x: x[p * (x.shape[0] // n):(p + 1) * (x.shape[0] // n)]
    return jitted(state, jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(batch_sharding, rows(x)), batch))

  return run


def pmap_train_step(graphdef, tx, obj, seed: int, ema_decay: float = 0.0):
  """-> pmap(train_step): (state, batch [B, ...]) -> (state, metrics) on host-shaped trees;
  the state is broadcast to every device (in_axes None) and device 0's copy comes back."""
  n = jax.device_count()
  step = functools.partial(update.train_step, graphdef, tx, obj, seed,
                           axis_name=AXIS, ema_decay=ema_decay)
  pmapped = jax.pmap(step, axis_name=AXIS, in_axes=(None, 0))

  def run(state, batch):
    split = jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + x.shape[1:]), batch)
    new_state, metrics = pmapped(state, split)
    return jax.tree.map(lambda x: x[0], (new_state, metrics))

  return run
