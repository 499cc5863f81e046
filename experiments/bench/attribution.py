"""Attribution speed (`bash launch.sh bench --attribution`): sentences/s of each method on
reverse-sized sentences (test lengths 1-100 symbols, the output the reversed source + EOS),
with the reverse config's RNN (additive score, Bahdanau decoder), untrained, or a trained
reverse run's (`--attribution_run`: the time of integrated gradients' adaptive rules depends
on the parameters, since a trained model's path needs more nodes). Sentences are sorted by
length and attributed in chunks padded to multiples of 8 that fit attribution.MEMORY_BUDGET;
each chunk shape is compiled before the timed pass (compile seconds reported apart).
Integrated gradients' rows also give their completeness error per sentence, max_t |Σ_s IG_ts -
(f_t(x) - f_t(b))| / max_t |f_t(x) - f_t(b)|, its mean and maximum.

Targets (issue 50, this 2-core CPU): gradient and gradient x input on 1,000 sentences under
60 s, integrated gradients on 200 under 3 minutes (issue 84: at a completeness error of at
most 1%).
"""

from __future__ import annotations

import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_jax.implicit import attribution
from attention_jax.loaded import loading
from attention_jax.models.model import ModelConfig, build
from attention_jax.symbols import BOS, EOS
from experiments.configs import reverse

SYMBOLS = 20            # the reverse task's alphabet (ids 4..23)
TARGETS = {'gradient': (1000, 60.0), 'gradient_x_input': (1000, 60.0),
           'integrated_gradients': (200, 180.0), 'smoothgrad': (200, 180.0)}


def model_and_params(seed: int = 0, run: str | None = None):
  """(graphdef, params), model config: the reverse config's RNN, untrained, or a trained run's
  (its vocabulary must be the reverse task's)."""
  if run is not None:
    t = loading.load(run, compilation_cache='off')
    cfg = nnx.merge(t.graphdef, t.params).cfg
    if cfg.source != 'tokens' or (cfg.src_vocab, cfg.tgt_vocab) != (SYMBOLS + 4,) * 2:
      raise ValueError(f'{run} is not a reverse run: source {cfg.source!r}, vocabularies '
                       f'{cfg.src_vocab} / {cfg.tgt_vocab} (reverse: tokens, {SYMBOLS + 4})')
    return (t.graphdef, t.params), cfg
  cfg = reverse.get_config()
  m = dict(cfg.model)
  m.update(src_vocab=SYMBOLS + 4, tgt_vocab=SYMBOLS + 4)
  model = build(ModelConfig.from_dict(m), rngs=nnx.Rngs(seed))
  return nnx.split(model, nnx.Param), model.cfg


def chunks(n: int, lo: int, hi: int, method: str, opts: attribution.Options, emb: int,
           seed: int = 0):
  """n random sentences of lo..hi symbols -> batches (src [B, S], tgt_in, tgt_out [B, T])."""
  rng = np.random.RandomState(seed)
  lengths = np.sort(rng.randint(lo, hi + 1, n))
  start = 0
  while start < n:
    s = -(-(int(lengths[start]) + 1) // 8) * 8
    rows = attribution.rows_per_chunk(method, opts, s, s, emb)
    end = start + 1
    while end < n and end - start < rows and -(-(int(lengths[end]) + 1) // 8) * 8 == s:
      end += 1
    src = np.zeros((end - start, s), np.int32)
    tgt_in, tgt_out = np.zeros_like(src), np.zeros_like(src)
    for r, length in enumerate(lengths[start:end]):
      x = rng.randint(4, 4 + SYMBOLS, length)
      src[r, :length + 1] = [*x, EOS]
      tgt_out[r, :length + 1] = [*x[::-1], EOS]
      tgt_in[r, :length + 1] = [BOS, *x[::-1]]
    yield src, tgt_in, tgt_out
    start = end


def completeness_fn(graphdef, opts: attribution.Options):
  """-> jitted fn(params, src, tgt_in, tgt_out, scores [B, T, S]) -> [B]: integrated
  gradients' completeness error of each sentence of a chunk (see above)."""
  @jax.jit
  def errors(params, src, tgt_in, tgt_out, scores):
    def one(s, ti, to):
      p = attribution.probe(nnx.merge(graphdef, params), s, ti, to, opts)
      return p.f(p.x0)[0] - p.f(p.baseline)[0]                                 # [T]
    want = jax.vmap(one)(src, tgt_in, tgt_out)                                  # [B, T]
    real = tgt_out != 0
    miss = jnp.where(real, jnp.abs(jnp.sum(scores, -1) - want), 0).max(1)
    return miss / jnp.maximum(jnp.where(real, jnp.abs(want), 0).max(1), 1e-30)
  return errors


def rows(methods: Sequence[str], lo: int = 1, hi: int = 100,
         options: attribution.Options = attribution.Options(), log=print,
         run: str | None = None) -> list[dict]:
  """One row per method: sentences, seconds (timed pass), compile seconds, sentences/s, the
  target where issue 50 set one, and integrated gradients' completeness errors."""
  (graphdef, params), cfg = model_and_params(run=run)
  out = []
  for method in methods:
    n, target = TARGETS.get(method, (200, None))
    fn = attribution.make_attributor(graphdef, method, options)
    batches = list(chunks(n, lo, hi, method, options, cfg.emb_dim))
    start = time.perf_counter()
    seen = set()
    for b in batches:                                     # compile each shape once
      if b[0].shape not in seen:
        seen.add(b[0].shape)
        jax.block_until_ready(fn(params, *b))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    scores = [jax.block_until_ready(fn(params, *b).scores) for b in batches]
    seconds = time.perf_counter() - start
    row = {'method': method, 'sentences': n, 'lengths': f'{lo}-{hi}', 'seconds': seconds,
           'compile_and_first_pass_s': compile_s, 'sentences_per_s': n / seconds,
           'chunks': len(batches), 'target_s': target, 'params': run or 'untrained',
           'met': None if target is None else seconds < target}
    if method == 'integrated_gradients':
      check = completeness_fn(graphdef, options)
      errors = np.concatenate([np.asarray(check(params, *b, a)) for b, a in zip(batches, scores)])
      row.update(steps=options.steps, rule=options.rule, completeness_mean=float(errors.mean()),
                 completeness_max=float(errors.max()))
      if options.rule == 'refine':
        row['tol'] = options.tol
      row['met'] = row['met'] and row['completeness_max'] <= 0.01
    if method == 'smoothgrad':
      row['samples'] = options.samples
    log(f'{method}: {n} sentences in {seconds:.1f} s ({n / seconds:.1f}/s; compiling and a '
        f'first pass {compile_s:.1f} s)' + ('' if target is None else
                                             f'; target < {target:.0f} s') +
        ('' if 'completeness_max' not in row else
         f'; completeness error mean {100 * row["completeness_mean"]:.2f}%, max '
         f'{100 * row["completeness_max"]:.2f}%'))
    out.append(row)
  return out


def format_rows(rs: list[dict]) -> str:
  lines = ['| method | sentences | seconds | sentences/s | compile + first pass s | '
           'completeness error, mean / max | target |', '|---|---|---|---|---|---|---|']
  for r in rs:
    target = '-' if r['target_s'] is None else (
        f'< {r["target_s"]:.0f} s' + (' at <= 1%' if 'completeness_max' in r else '') +
        f': {"met" if r["met"] else "MISSED"}')
    name = r['method'] + (f' ({r["rule"]}, {r["steps"]} steps' + (
        f', tol {r["tol"]:g}' if 'tol' in r else '') + ')' if 'rule' in r else '')
    error = ('-' if 'completeness_max' not in r else
             f'{100 * r["completeness_mean"]:.2f}% / {100 * r["completeness_max"]:.2f}%')
    lines.append(f'| {name} | {r["sentences"]} | {r["seconds"]:.1f} | '
                 f'{r["sentences_per_s"]:.1f} | {r["compile_and_first_pass_s"]:.1f} | {error} | '
                 f'{target} |')
  return '\n'.join(lines)
