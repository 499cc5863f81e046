"""A population of N seeds as one vmapped step against the same N runs one after another
(attention_jax/training/population.py), on the `reverse` smoke task's real batches.

  python -m experiments.bench.population --archs=rnn,transformer --members=3 --steps=200
  python -m experiments.bench.population --archs=rnn --sizes=1,4,16 --steps=30

Per architecture: the wall time of N runs of `steps` steps each, one after another (each its
own compiled step, as `sweep` runs them) and of one population of N, compile included and
apart; tokens per second; the share of the machine's matmul ceiling (FLOPs counted on the
jaxpr, bench/measure.py). With --sizes: one population of each size alone, its tokens per
second in all and per member (how far one program of N members fills the device). Writes
--out (JSON) and prints a table.
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
from absl import app, flags

from attention_jax import data
from attention_jax.state import templates
from attention_jax.training import objective, population, train, update
from experiments.bench.measure import count_flops, machine_info, matmul_flops_per_s
from experiments.configs import reverse

ARCHS = {
    'rnn': {},
    'transformer': {'arch': 'transformer', 'd_model': 64, 'heads': 4, 'ff_dim': 128,
                    'transformer_layers': 2},
}


def setup(arch: str, data_dir: str | None):
  cfg = reverse.get_config()
  cfg.data.num_train = 2000
  if data_dir:
    cfg.data.data_dir = data_dir
  cfg.model.update(ARCHS[arch])
  task = data.load_task(cfg.data)
  mcfg = train.model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size)
  return cfg, task, mcfg


def _train(n_steps: int, next_batch, step, flops_of) -> dict:
  """n_steps of `step(batch)` -> its loss (blocked on), batches from next_batch() ->
  {'compile_s', 'step_s', 'tokens', 'flops'}: a batch shape's first call compiles and is
  timed apart; flops_of(batch): one step's FLOPs at that shape (counted once per shape)."""
  out = {'compile_s': 0.0, 'step_s': 0.0, 'tokens': 0, 'flops': 0.0, 'shapes': 0,
         'step_tokens': 0, 'step_flops': 0.0}   # step_*: of the steps that did not compile
  flops = {}
  for _ in range(n_steps):
    batch = next_batch()
    shape = batch['src'].shape
    first = shape not in flops
    if first:
      flops[shape] = flops_of(batch)
      out['shapes'] += 1
    t0 = time.perf_counter()
    jax.block_until_ready(step(batch))
    out['compile_s' if first else 'step_s'] += time.perf_counter() - t0
    out['tokens'] += int((batch['tgt_out'] != 0).sum())
    out['flops'] += flops[shape]
    if not first:
      out['step_tokens'] += int((batch['tgt_out'] != 0).sum())
      out['step_flops'] += flops[shape]
  return out


def _population(task, mcfg, tx, obj, seeds, b: int, n_steps: int) -> dict:
  """n_steps of one population of `seeds` (_train's figures), each member its own batches."""
  graphdef, states = population.init_population(mcfg, tx, seeds)
  pop_step = population.make_population_step(graphdef, tx, obj)
  its = [task.train_iterator(b, seed=s) for s in seeds]
  seed_arr = jnp.asarray(seeds, jnp.int32)
  held = {'state': states}

  def step_all(batches):
    held['state'], m = pop_step(seed_arr, held['state'], batches)
    return m['loss']

  def flops_all(batches):
    return sum(count_flops(jax.make_jaxpr(
        lambda st, bt: population.population_step(graphdef, tx, obj, seed_arr, st, bt))(
            held['state'], batches)))
  return _train(n_steps, lambda: population.stack_batches([next(it) for it in its]), step_all,
                flops_all)


def sizes(arch: str, members: list[int], n_steps: int, data_dir: str | None = None) -> list:
  """Populations of each size in `members` (seeds 1..N), n_steps each -> rows {'arch',
  'members', 'compile_s', 'step_s', 'tokens_per_s' (all members, steps after each shape's
  first), 'tokens_per_s_per_member', 'gflops_per_s'}: how far one program of N members fills
  the device (bench's population rows)."""
  cfg, task, mcfg = setup(arch, data_dir)
  tx, obj = update.make_optimizer(cfg.train), objective.Objective.of(cfg.train)
  rows = []
  for n in members:
    if n < 1:
      raise ValueError(f'a population has at least 1 member, got {n}')
    r = _population(task, mcfg, tx, obj, list(range(1, n + 1)), cfg.data.batch_size, n_steps)
    if not r['step_s']:
      raise ValueError(f'every one of the {n_steps} steps compiled a shape: raise --steps')
    # the rates count the steps that did not compile (each shape's first is timed apart)
    r.update(arch=arch, members=n, steps=n_steps,
             tokens_per_s=r['step_tokens'] / r['step_s'],
             gflops_per_s=r['step_flops'] / r['step_s'] / 1e9)
    r['tokens_per_s_per_member'] = r['tokens_per_s'] / n
    rows.append(r)
  return rows


def compare(arch: str, members: int, n_steps: int, data_dir: str | None = None) -> dict:
  """-> {'alone': {...}, 'population': {...}, 'speedup_*'}: seconds (compile and steps),
  target tokens per second and GFLOP/s of each way of training `members` seeds n_steps each."""
  cfg, task, mcfg = setup(arch, data_dir)
  tx, obj = update.make_optimizer(cfg.train), objective.Objective.of(cfg.train)
  seeds = list(range(1, members + 1))
  b = cfg.data.batch_size
  out = {'arch': arch, 'members': members, 'steps': n_steps, 'batch_size': b}

  runs = []
  for seed in seeds:   # as a sweep runs them: each run its own compiled step
    graphdef, state = templates.init_state(mcfg, tx, seed)
    train_step = train.Compiled.of(graphdef, _with_seed(cfg, seed)).train
    held = {'state': state}

    def step(batch, held=held, train_step=train_step):
      held['state'], m = train_step(held['state'], batch)
      return m['loss']

    def flops_of(batch, held=held, graphdef=graphdef, seed=seed):
      return sum(count_flops(jax.make_jaxpr(
          lambda st, bt: update.train_step(graphdef, tx, obj, seed, st, bt))(held['state'], batch)))
    it = task.train_iterator(b, seed=seed)
    runs.append(_train(n_steps, lambda it=it: next(it), step, flops_of))
  alone = {k: sum(r[k] for r in runs) for k in runs[0]}

  pop = _population(task, mcfg, tx, obj, seeds, b, n_steps)
  out['alone'], out['population'] = alone, pop
  for way in (alone, pop):
    way['total_s'] = way['compile_s'] + way['step_s']
    way['tokens_per_s'] = way['tokens'] / way['total_s']
    way['gflops_per_s'] = way['flops'] / way['total_s'] / 1e9
  out['speedup_total'] = alone['total_s'] / pop['total_s']
  out['speedup_steps'] = alone['step_s'] / pop['step_s'] if pop['step_s'] else None
  return out


def _with_seed(cfg, seed: int):
  c = cfg.copy_and_resolve_references()
  c.seed = seed
  return c


def _save(path: str | None, ceiling: float, rows: list) -> None:
  """The figures so far (written after each row: a run stopped at its time limit keeps them)."""
  if path:
    with open(path, 'w') as fh:
      json.dump({'machine': machine_info(), 'matmul_gflops_per_s': ceiling, 'rows': rows}, fh,
                indent=2)


def main(argv):
  """Prints each row as soon as it is measured (flushed), and saves --out after each."""
  del argv
  f = flags.FLAGS
  ceiling = matmul_flops_per_s(1024) / 1e9
  print(f'matmul ceiling (1024, float32): {ceiling:.1f} GFLOP/s', flush=True)
  rows = []
  if f.sizes:
    print('| arch | members | compile s | tok/s, all members | tok/s per member | GFLOP/s | '
          '% of ceiling |')
    print('|---|---|---|---|---|---|---|', flush=True)
    for a in f.archs:
      for n in (int(x) for x in f.sizes):
        r, = sizes(a, [n], f.steps, f.data_dir)
        rows.append(r)
        print(f'| {r["arch"]} | {r["members"]} | {r["compile_s"]:.1f} | '
              f'{r["tokens_per_s"]:,.0f} | {r["tokens_per_s_per_member"]:,.0f} | '
              f'{r["gflops_per_s"]:.2f} | {100 * r["gflops_per_s"] / ceiling:.1f}% |', flush=True)
        _save(f.out, ceiling, rows)
    return
  print('| arch | way | compile s | step s | total s | tok/s | GFLOP/s | % of ceiling |')
  print('|---|---|---|---|---|---|---|---|', flush=True)
  for a in f.archs:
    r = compare(a, f.members, f.steps, f.data_dir)
    rows.append(r)
    for way in ('alone', 'population'):
      w = r[way]
      label = f'{r["members"]} runs one after another' if way == 'alone' else \
          f'population of {r["members"]}'
      print(f'| {r["arch"]} | {label} | {w["compile_s"]:.1f} | {w["step_s"]:.1f} | '
            f'{w["total_s"]:.1f} | {w["tokens_per_s"]:,.0f} | {w["gflops_per_s"]:.2f} | '
            f'{100 * w["gflops_per_s"] / ceiling:.1f}% |')
    print(f'| {r["arch"]} | population / alone | | {r["speedup_steps"]:.2f}x | '
          f'{r["speedup_total"]:.2f}x | | | |', flush=True)
    _save(f.out, ceiling, rows)


if __name__ == '__main__':
  flags.DEFINE_list('archs', ['rnn', 'transformer'], 'architectures: ' + ', '.join(ARCHS))
  flags.DEFINE_integer('members', 3, 'seeds in the population (and runs one after another)')
  flags.DEFINE_integer('steps', 200, 'train steps per run')
  flags.DEFINE_list('sizes', None, 'population sizes, e.g. 1,4,16: the rate of one population '
                    'of each size alone (no runs one after another)')
  flags.DEFINE_string('data_dir', None, 'TFDS data dir (default: the config\'s)')
  flags.DEFINE_string('out', None, 'a JSON file for the figures')
  app.run(main)
