"""A population as runs: train.population=N trains the seeds cfg.seed, ...,
cfg.seed+N-1 of one config as one vmapped program (population.py) through the one training
loop (loop.py, with the Members stepper), each member into its own
run directory <workdir>/seed_<k> (workdir.seed_dir), laid out as the run of seed k trained
alone would lay it out (workdir.Run: its config with its own seed, its model config,
tokenizers, checkpoints, results, sentence records, heatmaps, TensorBoard curves). So
`aj.load`, `compare`, the reports and a sweep's `--seeds` read a member as any other run, and
one member can be loaded, evaluated or resumed alone.

  python -m experiments.main --config=experiments/configs/reverse.py --config.seed=1 \\
      --config.train.population=3 --workdir=runs/rev     # runs/rev/seed_1, seed_2, seed_3

Each member, as alone: its own data iterator (seeded by its seed) and tokenizers, validation
every train.eval_every steps with its own best checkpoint, its latest checkpoints every
train.checkpoint_every steps, its final evaluation, its count of non-finite steps. Member k's
losses and parameters are those of seed k alone up to float rounding (population.py: exactly
so without dropout or with one length bucket).

A member whose step is non-finite keeps its state (population.population_step). With
train.skip_nonfinite the step is skipped and counted in that member's results; without it that
member stops where it is (its last checkpoint untouched, no results), the others train on, and
the call raises FloatingPointError naming it once they have finished.

Resume: every member restarts from the newest latest-checkpoint step that all of them hold
(they are saved together at the same steps; a kill between two members' saves leaves the
step before it common, as each member keeps at least 2 latest steps), with its iterator
position: a resumed population equals an uninterrupted one bit for bit. SIGTERM / SIGINT
save every member at the next step and stop (preemption.Interrupted, exit 128 + signal). The
lock of every member's directory (workdir.WorkdirLock) is held throughout.

Several devices (parallel=auto or shard_map): the members split over a 'members' x 'data'
mesh (devices.population_mesh: as many member groups as the member and device counts share,
each member's batch split over its group's devices); parallel=single: the first device. Not
(yet): several processes.
"""

from __future__ import annotations

import contextlib
import os

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec as P

from attention_jax import data as data_lib
from attention_jax import devices
from attention_jax import workdir as workdir_lib
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.training import loop
from attention_jax.training import objective
from attention_jax.training import population
from attention_jax.training import session as session_lib
from attention_jax.training import train
from attention_jax.training.session import log


def seeds_of(cfg: ml_collections.ConfigDict) -> list[int]:
  """The members' seeds: cfg.seed, cfg.seed + 1, ..., cfg.seed + train.population - 1."""
  return [cfg.seed + i for i in range(cfg.train.get('population', 1))]


def member_config(cfg: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
  """The config of the run of `seed` alone, as a member saves it: cfg with that seed and
  train.population = 1 (its directory is then an ordinary run: resumable alone)."""
  c = cfg.copy_and_resolve_references()
  with c.unlocked():
    c.seed = seed
    c.train.population = 1
  return c


def member_dirs(cfg: ml_collections.ConfigDict, workdir: str) -> list[str]:
  """Where each member's run goes: <workdir>/seed_<k>."""
  return [workdir_lib.seed_dir(workdir, seed) for seed in seeds_of(cfg)]


def mesh_of(cfg: ml_collections.ConfigDict) -> jax.sharding.Mesh | None:
  """The population's mesh over this process's devices (devices.population_mesh), or None
  for one device (parallel=single, or one device)."""
  if devices.resolve(cfg.parallel) == 'single':
    return None
  mesh = devices.population_mesh(cfg.train.get('population', 1))
  devices.check_batch(cfg.data.batch_size, mesh.shape[devices.AXIS])
  return mesh


def check(cfg: ml_collections.ConfigDict) -> None:
  """What a population cannot do (yet), in one line, before any work."""
  n = cfg.train.get('population', 1)
  if cfg.parallel == 'pmap':
    raise ValueError(f'train.population={n} splits its members over the devices with '
                     'jax.jit shardings (a members x data mesh); parallel=\'pmap\' does not '
                     'compose with it: use parallel=auto or shard_map (or single: one device)')
  if jax.process_count() > 1:
    raise ValueError(f'train.population={n} runs in one process; this is process '
                     f'{jax.process_index()} of {jax.process_count()}')
  mesh_of(cfg)   # the batch splits over the mesh's 'data' axis


def train_population(cfg: ml_collections.ConfigDict, workdir: str,
                     overwrite: bool = False) -> list[dict]:
  """Trains the population of cfg (train.population members) into <workdir>/seed_<k>,
  resuming where its members hold checkpoints; returns each member's results (as written to
  its run directory), in seed order. Holds every member's workdir lock throughout (another
  process training one of them: WorkdirInUse at once, nothing changed)."""
  train.check_config(cfg)
  check(cfg)
  data_lib.fetch(cfg.data)   # what the task needs from outside, before the workdir is touched
  made = not os.path.exists(workdir)
  try:
    with train.memory_explained(cfg), contextlib.ExitStack() as locks:
      for path in member_dirs(cfg, workdir):
        locks.enter_context(workdir_lib.WorkdirLock(path))
      return _train(cfg, workdir, overwrite)
  except BaseException:
    if made and os.path.isdir(workdir) and not os.listdir(workdir):
      os.rmdir(workdir)   # a refused population leaves no folder of ours behind
    raise


def _stack(states: list):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


class Members:
  """loop.Stepper of a population: the members' states stacked (every leaf [N, ...]),
  stepped together by population.make_population_step; on a mesh each member's rows of
  every leaf sit on its group of devices."""

  def __init__(self, step_fn, states, seeds: list[int], mesh: jax.sharding.Mesh | None):
    self.step_fn, self.states, self.mesh = step_fn, states, mesh
    self.members = len(seeds)
    self.seeds = jnp.asarray(seeds, jnp.int32)

  def templates(self) -> list:
    return [population.member(self.states, k) for k in range(self.members)]

  def load(self, states: list) -> None:
    self.states = _stack(states)
    if self.mesh is not None:   # each member's rows of every leaf on its group of devices
      self.states = jax.device_put(self.states, NamedSharding(self.mesh, P(devices.MEMBERS)))

  def step(self, batches: list[dict]) -> dict:
    self.states, m = self.step_fn(self.seeds, self.states, population.stack_batches(batches))
    return m                      # {name: [N]}

  def metrics_of(self, m: dict, k: int) -> dict:
    return {name: m[name][k] for name in ('finite', 'loss', 'grad_norm')}

  def state_of(self, k: int):
    """Member k's state now, to evaluate or save alone: on the first device, as a run's."""
    state = population.member(self.states, k)
    return state if self.mesh is None else jax.device_put(state, jax.devices()[0])


def _train(cfg: ml_collections.ConfigDict, workdir: str, overwrite: bool) -> list[dict]:
  t, d = cfg.train, cfg.data
  seeds = seeds_of(cfg)
  names = [workdir_lib.SEED_DIR.format(seed) for seed in seeds]
  sessions = [session_lib.Session(member_config(cfg, seed), path, overwrite)
              for seed, path in zip(seeds, member_dirs(cfg, workdir))]
  mcfg = sessions[0].mcfg
  for name, s in zip(names[1:], sessions[1:]):   # e.g. tokenizers trained per seed
    diffs = ckpt_lib.differences(mcfg.to_dict(), s.mcfg.to_dict(), {},
                                 words=(names[0], name))
    if diffs:
      raise ValueError(f'the members\' models differ in shape ({"; ".join(diffs)}): a '
                       'population needs one shape for all seeds; train them alone (sweep '
                       '--seeds without --population)')
  tx = train.OptimizerConfig.of(t).build()
  graphdef, states = population.init_population(mcfg, tx, seeds, ema=sessions[0].use_ema)
  one = member_config(cfg, seeds[0])
  with one.unlocked():
    one.parallel = 'single'   # evaluation and decoding of one member on the members' device
  steps = train.Compiled.of(graphdef, one)
  mesh = mesh_of(cfg)
  step_fn = population.make_population_step(graphdef, tx, objective.Objective.of(t),
                                            ema_decay=t.ema_decay, mesh=mesh)
  for s in sessions:   # >= 2 latest steps: a kill between two members' saves leaves one common
    s.open(keep=max(t.keep_checkpoints, 2))
  stepper = Members(step_fn, states, seeds, mesh)
  stepper.load(loop.resume(sessions, stepper.templates()))
  for s in sessions:
    s.start(steps)
  where = (f'one {jax.devices()[0].platform} device' if mesh is None else
           f'{mesh.size} {jax.devices()[0].platform} devices, '
           f'{mesh.shape[devices.MEMBERS]} member groups x {mesh.shape[devices.AXIS]} '
           'splitting each batch')
  log(f'[population of {len(seeds)}: seeds {seeds[0]}..{seeds[-1]}, {where}] training '
      f'{mcfg.describe()} on {sessions[0].task.name}: '
      f'{t.steps} steps of {d.batch_size} sentences per member, '
      f'{sum(x[0].size for x in jax.tree.leaves(stepper.states["params"])):,} parameters per '
      f'member -> {os.path.join(workdir, workdir_lib.SEED_DIR.format("<k>"))}')
  return loop.run(loop.Loop.of(t), workdir, sessions, stepper, graphdef, names=names,
                  extra=[{'population': {'seeds': seeds, 'member': k}}
                         for k in range(len(seeds))])
