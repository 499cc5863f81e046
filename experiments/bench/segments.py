"""How a Transformer's decoding KV cache should grow: one loop over the whole output limit,
or segments (greedy.segments, Transformer.cache_lengths), each a while loop compiled of its
own. Compile time and warm run time of greedy and beam search, per segment policy, on the
benchmark's Transformer (3+3 layers, d_model 128; untrained, EOS suppressed so that every
output runs to its limit, as in the benchmark's decoding rows).

  python -m experiments.bench.segments --configs=char,long --policies=one,uniform8,doubling3

Policies: `one` (a single loop), `uniform8` (segments of >= 16 positions, at most 8: the
policy before 2026-11-27), `doubling3` (today's: max_len/4, max_len/2, max_len, none under
64). Prints a table and writes --out (JSON).
"""

from __future__ import annotations

import json
import statistics
import time

import jax
import jax.numpy as jnp
from absl import app, flags
from flax import nnx

from attention_jax.decoding import beam as beam_lib
from attention_jax.decoding import greedy
from attention_jax.models import transformer
from attention_jax.models.model import build
from attention_jax.symbols import EOS
from attention_jax.training import train
from experiments.bench import workload


def uniform8(max_len: int) -> tuple[int, ...]:
  seg = max(16, -(-max_len // 8))
  return tuple(range(seg, max_len, seg)) + (max_len,)


POLICIES = {
    'one': lambda max_len: (max_len,),
    'uniform8': uniform8,
    'doubling3': None,          # Transformer.cache_lengths as it is
}

FLAGS = flags.FLAGS
flags.DEFINE_list('configs', ['char', 'long'], 'benchmark shapes (bench/workload.py)')
flags.DEFINE_list('policies', list(POLICIES), f'segment policies: {", ".join(POLICIES)}')
flags.DEFINE_list('decodings', ['greedy', 'beam5'], 'greedy and/or beam5')
flags.DEFINE_integer('calls', 3, 'timed warm calls after the first; the median counts')
flags.DEFINE_string('out', None, 'JSON file for the rows')


def model_of(config: str):
  shape = workload.CONFIGS[config]
  cfg = workload.experiment_config(shape, 'scaled_dot', 'transformer', seed=0)
  mcfg = train.model_config(cfg, shape.vocab, shape.vocab)
  model = build(mcfg, rngs=nnx.Rngs(0))
  model.out.bias[...] = model.out.bias[...].at[EOS].set(-1e9)   # every output to its limit
  src = workload.make_batch(shape, seed=0)['src']
  return model, jnp.asarray(src), greedy.max_output_len(src.shape[1], 2.0)


def measure(config: str, policy: str, decoding: str, calls: int) -> dict:
  model, src, max_len = model_of(config)
  original = transformer.Transformer.cache_lengths
  if POLICIES[policy] is not None:
    transformer.Transformer.cache_lengths = lambda self, n: POLICIES[policy](n)
  try:
    ends = greedy.segments(model, max_len)
    graphdef, params = nnx.split(model)
    def run(p, s):
      m = nnx.merge(graphdef, p)
      if decoding == 'greedy':
        return greedy.greedy(m, s, max_len)[0]
      return beam_lib.beam_search(m, s, beam_size=5, max_len=max_len, alpha=0.6)[0]
    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(params, src).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(params, src))          # untimed first call
    times = []
    for _ in range(calls):
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(params, src))
      times.append(time.perf_counter() - t0)
  finally:
    transformer.Transformer.cache_lengths = original
  return dict(config=config, policy=policy, decoding=decoding, batch=int(src.shape[0]),
              source_len=int(src.shape[1]), max_len=max_len, segments=list(ends),
              compile_s=compile_s, run_s=statistics.median(times), runs_s=times)


def main(argv):
  del argv
  rows = []
  measure('tiny', 'one', 'greedy', 1)   # untimed: the first compile pays one-time costs
  print('| config | decoding | policy | segments | compile s | warm run s | compile + run s |')
  print('|---|---|---|---|---|---|---|')
  for config in FLAGS.configs:
    for decoding in FLAGS.decodings:
      for policy in FLAGS.policies:
        if policy not in POLICIES:
          raise app.UsageError(f'unknown policy {policy!r}; valid: {", ".join(POLICIES)}')
        r = measure(config, policy, decoding, FLAGS.calls)
        rows.append(r)
        print(f"| {config} (B {r['batch']}, S {r['source_len']}, L {r['max_len']}) | "
              f"{decoding} | {policy} | {len(r['segments'])} | {r['compile_s']:.1f} | "
              f"{r['run_s']:.2f} | {r['compile_s'] + r['run_s']:.1f} |", flush=True)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      json.dump(dict(rows=rows, devices=[str(d) for d in jax.devices()]), f, indent=1)


if __name__ == '__main__':
  app.run(main)
