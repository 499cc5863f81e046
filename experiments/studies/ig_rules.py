"""Integrated gradients' quadrature: completeness error against the number of nodes m, for the
midpoint rule, Gauss-Legendre and the adaptive rule (--rules), on a trained run's test
sentences (docs/implicit_attention.md).

  python -m experiments.studies.ig_rules --run=runs/reverse --num=20 --max_len=24

For each sentence (the model's greedy output, teacher-forced) the error is
max_t |Σ_s IG_ts - (f_t(x) - f_t(b))| / max_t |f_t(x) - f_t(b)|, f_t = log p(y_t | y_<t, x),
b the zero baseline (Sundararajan et al. 2017's completeness); the table gives its mean and
maximum over the sentences, and the seconds per sentence (after compiling). With
--converged, also each rule's attribution error against the converged integral (the refine
rule at tol 1e-4 with up to 1,025 nodes): max_ts |IG_ts - ref_ts| / max_ts |ref_ts|, its mean
and maximum.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.data import batching
from attention_jax.implicit import attribution
from attention_jax.loaded import loading
from attention_jax.symbols import BOS, EOS

flags.DEFINE_string('run', None, 'A trained run (token source).', required=True)
flags.DEFINE_integer('num', 20, 'Test sentences measured.', lower_bound=1)
flags.DEFINE_integer('max_len', 24, 'Longest source (characters) measured.', lower_bound=1)
flags.DEFINE_list('steps', ['4', '8', '16', '32', '64'], 'Numbers of nodes m.')
flags.DEFINE_list('rules', list(attribution.RULES), 'Quadrature rules measured.')
flags.DEFINE_bool('converged', False, 'Also the attribution error against the converged '
                  'integral (refine, tol 1e-4, up to 1,025 nodes).')
FLAGS = flags.FLAGS


def padded(ids, width: int) -> np.ndarray:
  out = np.zeros(width, np.int32)
  out[:len(ids)] = ids
  return out


def main(argv):
  del argv
  t = loading.load(FLAGS.run)
  cfg = ml_collections.ConfigDict(workdir_lib.Run(FLAGS.run).config()['data'])
  texts = [s for s, _ in data_lib.load_task(cfg).texts('test') if len(s) <= FLAGS.max_len]
  texts = texts[:FLAGS.num]
  width = batching.round_up(FLAGS.max_len + 1)
  examples = []
  for text in texts:
    src = padded(t.src_tok.encode(text) + [EOS], width)
    ids = t.decode([text])[0].ids[0]
    examples.append((src, padded(ids, width), padded(np.concatenate([[BOS], ids[:-1]]), width),
                     len(ids)))

  @jax.jit
  def change(params, src, tgt_in, tgt_out):
    """f_t(x) - f_t(b) [T]."""
    p = attribution.probe(nnx.merge(t.graphdef, params), src, tgt_in, tgt_out)
    return p.f(p.x0)[0] - p.f(p.baseline)[0]

  src, tout, tin, _ = examples[0]
  jax.block_until_ready(change(t.params, src, tin, tout))   # compiled before any rule's timing

  def attributions(opts):
    fn = attribution.make_attributor(t.graphdef, 'integrated_gradients', opts)
    return [np.asarray(fn(t.params, src[None], tin[None], tout[None]).scores[0])[:n]
            for src, tout, tin, n in examples]

  reference = (attributions(attribution.Options(rule='refine', steps=1025, tol=1e-4))
               if FLAGS.converged else None)
  print(f'{len(examples)} test sentences of 1-{FLAGS.max_len} characters, {FLAGS.run}')
  extra = ' attribution error, mean / max |' if FLAGS.converged else ''
  print('| rule | m | mean error | max error | s / sentence |' + extra)
  print('|---|---|---|---|---|' + ('---|' if extra else ''))
  for rule in FLAGS.rules:
    attribution.Options(rule=rule)   # an unknown rule: its error, before any work
    for m in (int(s) for s in FLAGS.steps):
      fn = attribution.make_attributor(t.graphdef, 'integrated_gradients',
                                       attribution.Options(steps=m, rule=rule))
      src, tout, tin, _ = examples[0]
      jax.block_until_ready(fn(t.params, src[None], tin[None], tout[None]))   # compile
      errors, start = [], time.perf_counter()
      for src, tout, tin, n in examples:
        a = fn(t.params, src[None], tin[None], tout[None])
        total = np.asarray(jnp.sum(a.scores[0], axis=-1))[:n]
        want = np.asarray(change(t.params, src, tin, tout))[:n]
        errors.append(np.abs(total - want).max() / np.abs(want).max())
      seconds = (time.perf_counter() - start) / len(examples)
      line = (f'| {rule} | {m} | {100 * np.mean(errors):.2f}% | {100 * np.max(errors):.2f}% | '
              f'{seconds:.3f} |')
      if reference is not None:
        off = [np.abs(a - r).max() / np.abs(r).max()
               for a, r in zip(attributions(attribution.Options(steps=m, rule=rule)), reference)]
        line += f' {100 * np.mean(off):.2f}% / {100 * np.max(off):.2f}% |'
      print(line, flush=True)


if __name__ == '__main__':
  app.run(main)
