"""Devices and meshes, below training and decoding: the parallel mode (auto / single /
shard_map / pmap), the 1-D 'data' mesh and a population's 'members' x 'data' mesh, multi-host
start-up, the CPU split into devices, and the share of an accelerator's memory a process gets
when several share it (sweeps' --runs_per_device, Ray's fractional GPUs). The data-parallel
train steps are in training/data_parallel.py; decoding's row split in decoding/inference.py.
"""

from __future__ import annotations

import math
import os

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


AXIS = 'data'
MEMBERS = 'members'   # a population's member axis (population_mesh)
MODES = ('auto', 'single', 'shard_map', 'pmap')


def resolve(mode: str, num_devices: int | None = None) -> str:
  """'auto' -> 'shard_map' with several devices, 'single' with one."""
  if mode not in MODES:
    raise ValueError(f'unknown parallel mode {mode!r}; valid: {", ".join(MODES)}')
  n = jax.device_count() if num_devices is None else num_devices
  if mode == 'auto':
    return 'shard_map' if n > 1 else 'single'
  return mode


def make_mesh() -> jax.sharding.Mesh:
  """A 1-D mesh over all devices, axis 'data' (Auto axis type: XLA propagates shardings,
  so evaluation and decoding on batch-sharded inputs need no annotations)."""
  return jax.make_mesh((jax.device_count(),), (AXIS,),
                       axis_types=(jax.sharding.AxisType.Auto,))


def population_mesh(members: int, devices=None) -> jax.sharding.Mesh:
  """A 2-D mesh ('members', 'data') over `devices` (default: all) for a population of
  `members` (population.make_population_step): the 'members' axis as large as both counts
  allow (their greatest common divisor), the rest of the devices splitting each member's
  batch. 8 devices: 4 members -> 4 x 2, 3 members -> 1 x 8, 16 members -> 8 x 1."""
  devices = list(jax.devices() if devices is None else devices)
  m = math.gcd(members, len(devices))
  return jax.sharding.Mesh(np.array(devices).reshape(m, len(devices) // m), (MEMBERS, AXIS),
                           axis_types=(jax.sharding.AxisType.Auto,) * 2)


def check_batch(batch_size: int, n: int) -> None:
  if batch_size % n:
    raise ValueError(f'data.batch_size={batch_size} is not divisible by the device count {n}')


def local_mesh(devices) -> jax.sharding.Mesh:
  """A 1-D mesh, axis 'data', over `devices` (this process's own, in multi-process runs)."""
  return jax.sharding.Mesh(np.array(list(devices)), (AXIS,))


def rows_apart(fn, mesh: jax.sharding.Mesh):
  """-> g(params, x [B, ...], *static) = fn(params, x, *static) under `jax.shard_map` over
  the 'data' axis of `mesh` (B divisible by its size): params replicated, each device runs
  fn on its B / mesh.size rows alone, with no communication, so fn must treat rows
  independently (decoding does). Not jit-compiled (static arguments are closed over at
  trace time)."""
  return lambda params, x, *static: jax.shard_map(
      lambda p, xs: fn(p, xs, *static), mesh=mesh, in_specs=(P(), P(AXIS)),
      out_specs=P(AXIS), check_vma=False)(params, x)


def cpu_devices_set_by_user() -> bool:
  """Whether this process's CPU device count was set by the user: JAX_NUM_CPU_DEVICES, or
  XLA_FLAGS' --xla_force_host_platform_device_count (cpu_devices then leaves it alone)."""
  return ('JAX_NUM_CPU_DEVICES' in os.environ
          or 'xla_force_host_platform_device_count' in os.environ.get('XLA_FLAGS', ''))


def cpu_devices(n: int = 0) -> int | None:
  """Splits this process's CPU into n JAX devices (0: one per core it may run on,
  os.sched_getaffinity), so that decoding spreads each chunk's rows over the cores
  (split_batch: XLA's CPU decoding loops keep about one core busy). Call it before JAX runs
  anything (it raises after). Left alone (-> None) when the user set JAX_NUM_CPU_DEVICES or
  XLA_FLAGS' --xla_force_host_platform_device_count; -> the count set otherwise. Only the
  CPU backend is split: a GPU's or TPU's devices are what they are."""
  if not isinstance(n, int) or n < 0:
    raise ValueError(f'cpu_devices must be a non-negative integer (0: one per core), got {n!r}')
  if cpu_devices_set_by_user():
    return None
  n = n or len(os.sched_getaffinity(0))
  jax.config.update('jax_num_cpu_devices', n)
  return n


def init_distributed(coordinator: str | None = None, num_processes: int | None = None,
                     process_id: int | None = None) -> None:
  """Starts multi-host JAX: explicitly (coordinator HOST:PORT, process count and id), or from
  the cluster's environment (SLURM, TPU pods: `jax.distributed.initialize()` detects them);
  does nothing on a single host."""
  import os
  if coordinator:
    if num_processes is None or process_id is None:
      raise ValueError('--coordinator needs --num_processes and --process_id')
    jax.distributed.initialize(coordinator, num_processes, process_id)
  elif int(os.environ.get('SLURM_NTASKS', '1')) > 1 or os.environ.get('TPU_WORKER_HOSTNAMES',
                                                                          '').count(','):
    jax.distributed.initialize()


def batch_sharder():
  """-> f(tree) putting every array's first (batch) axis across this process's devices."""
  if jax.local_device_count() == 1:
    return lambda tree: tree
  mesh = make_mesh() if jax.process_count() == 1 else local_mesh(jax.local_devices())
  sharding = NamedSharding(mesh, P(AXIS))
  return lambda tree: jax.device_put(tree, sharding)


# the share of an accelerator's memory that the runs sharing it split between them (the
# rest: each process's CUDA context, cuDNN / cuBLAS workspaces)
MEMORY_SHARE = 0.9
MEMORY_ENV = 'XLA_PYTHON_CLIENT_MEM_FRACTION'


def memory_env(share: float) -> dict[str, str]:
  """The environment of a run that gets `share` (0-1] of one accelerator: XLA preallocates
  MEMORY_SHARE x share of the device's memory at start (XLA_PYTHON_CLIENT_MEM_FRACTION; one
  JAX process alone takes 75%, so a second on the same device would fail). Preallocation is
  kept (not XLA_PYTHON_CLIENT_PREALLOCATE=false) because a run that needs more than its share
  then fails at once, out of memory, instead of taking a neighbour's memory later and failing
  it; and XLA's allocator stays the fast one. A fraction set by the user wins; {} at 1."""
  if not 0.0 < share <= 1.0:
    raise ValueError(f'a run\'s share of an accelerator must be in (0, 1], got {share}')
  if share == 1.0 or MEMORY_ENV in os.environ:
    return {}
  return {MEMORY_ENV: f'{MEMORY_SHARE * share:.3f}'}


def share_note() -> str | None:
  """What an out-of-memory error adds for a process given a share of its device
  (memory_env), or None."""
  share = os.environ.get(MEMORY_ENV)
  return (f'this process had {share} of the device: runs that share one, --runs_per_device or '
          'a fractional --trial_gpus, split it' if share else None)
