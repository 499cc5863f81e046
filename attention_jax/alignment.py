"""Implicit against explicit attention on a split with gold alignments (copy, reverse, sort):
how well each map points at the gold source position, how two maps agree, and how faithful a
ranking is to what the model uses.

  report = attribute_split(translator, task, 'test', ('gradient', 'integrated_gradients'))
  by_map = report.get('methods')  # per map (each method, and 'attention': the explicit
                                  # weights): alignment_accuracy, gold_mass, kendall_tau, jsd,
                                  # aopc, steps; report.get('aopc_random'): random positions

Figures, over every output step with a gold position (teacher-forced on the reference):
  alignment_accuracy  % of steps whose argmax (of |score| for signed methods) is the gold
  gold_mass           % of the step's (normalised) magnitude on the gold position
  kendall_tau         rank correlation with the explicit weights over the real source
                      positions, mean over steps (Jain & Wallace 2019)
  jsd                 Jensen-Shannon divergence (bits) between the normalised map and the
                      explicit weights, mean over steps
  aopc                the mean drop in log p(y_t) when the top 1..k positions by the map are
                      replaced by the zero embedding (Samek et al. 2017; DeYoung et al. 2020's
                      comprehensiveness); aopc_random: the same for random positions
"""

from __future__ import annotations

import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats
from scipy.spatial import distance

from attention_jax import attribution

EXPLICIT = 'attention'   # the explicit weights' row in a report


def _normalised(m: np.ndarray) -> np.ndarray:
  """Rows [T, S] >= 0 -> rows summing to 1 (uniform where a row is all zero)."""
  total = m.sum(-1, keepdims=True)
  return np.where(total > 0, m / np.where(total > 0, total, 1), 1.0 / m.shape[-1])


def _jsd(p: np.ndarray, q: np.ndarray) -> np.ndarray:
  """Jensen-Shannon divergence in bits between rows of p and q [T, S] -> [T]."""
  return distance.jensenshannon(p, q, base=2, axis=-1) ** 2


def figures(magnitude: np.ndarray, gold: np.ndarray, explicit: np.ndarray | None,
            src_len: int, attended_only: bool = False) -> dict[str, float]:
  """One sentence: magnitude [T, S] (>= 0), gold [T] (-1: none), explicit [T, S] or None,
  src_len the real source positions (EOS included) -> summable sums and counts.
  attended_only: steps whose row is all zero are left out (explicit weights: score `none`
  attends nowhere; as evaluate.py counts them); an all-zero explicit row gives no tau / JSD."""
  magnitude = np.asarray(magnitude, np.float64)[:, :src_len]
  keep = gold >= 0
  if attended_only:
    keep &= magnitude.sum(-1) > 0
  if explicit is not None:   # tau and JSD need explicit weights on the same steps
    attended = np.asarray(explicit).sum(-1) > 0
    explicit = explicit if attended[keep].all() else None
  steps = np.nonzero(keep)[0]
  out = {'steps': len(steps), 'hits': 0.0, 'gold_mass': 0.0, 'tau': 0.0, 'tau_steps': 0,
         'jsd': 0.0}
  if not len(steps):
    return out
  m = magnitude[steps]
  g = gold[steps]
  out['hits'] = float(np.sum(np.argmax(m, -1) == g))
  out['gold_mass'] = float(np.sum(_normalised(m)[np.arange(len(g)), g]))
  if explicit is not None:
    e = np.asarray(explicit, np.float64)[steps, :src_len]
    out['jsd'] = float(np.sum(_jsd(_normalised(m), _normalised(e))))
    for a, b in zip(m, e):
      if np.ptp(a) > 0 and np.ptp(b) > 0:   # tau is undefined for a constant row
        out['tau'] += float(stats.kendalltau(a, b).statistic)
        out['tau_steps'] += 1
  return out


def summarise(sums: Sequence[dict]) -> dict[str, float]:
  """Per-sentence figures -> the split's percentages and means."""
  total = {k: sum(s[k] for s in sums) for k in sums[0]} if sums else {}
  steps = max(total.get('steps', 0), 1)
  out = {'steps': int(total.get('steps', 0)),
         'alignment_accuracy': 100.0 * total.get('hits', 0) / steps,
         'gold_mass': 100.0 * total.get('gold_mass', 0) / steps}
  if total.get('tau_steps'):
    out['kendall_tau'] = total['tau'] / total['tau_steps']
    out['jsd'] = total['jsd'] / steps
  return out


def make_deletion(graphdef, k: int):
  """-> jit fn(params, src [B, S], tgt_in, tgt_out [B, T], order [B, T, k]) -> log p(y_t)
  [B, k + 1, T] with the top 0..k source positions of each step's `order` replaced by the
  zero embedding (token sources)."""

  def one(model, src, tgt_in, tgt_out, order):
    s = src.shape[0]
    x0 = model.source_embeddings(src[None])[0]                                   # [S, E]
    hit = jax.nn.one_hot(order, s, dtype=x0.dtype)                                # [T, k, S]
    masks = jnp.concatenate([jnp.zeros_like(hit[:, :1]),
                             jnp.minimum(jnp.cumsum(hit, axis=1), 1)], axis=1)   # [T, k+1, S]
    masks = jnp.swapaxes(masks, 0, 1).reshape(-1, s)                             # [(k+1)T, S]
    n = masks.shape[0]
    shift = -masks[:, :, None] * x0[None]                                         # [n, S, E]
    logits, _ = model.forward(jnp.broadcast_to(src, (n, s)),
                              jnp.broadcast_to(tgt_in, (n, tgt_in.shape[0])), source_shift=shift)
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)                      # [n, T, V]
    lp = jnp.take_along_axis(lp, jnp.broadcast_to(tgt_out, (n, tgt_out.shape[0]))[..., None],
                             -1)[..., 0].reshape(k + 1, -1, tgt_out.shape[0])     # [k+1, T, T]
    t = tgt_out.shape[0]
    return lp[:, jnp.arange(t), jnp.arange(t)]                                   # [k+1, T]

  def fn(params, src, tgt_in, tgt_out, order):
    model = nnx.merge(graphdef, params)
    return jax.vmap(lambda *a: one(model, *a))(src, tgt_in, tgt_out, order)
  return jax.jit(fn)


def _order(magnitude: np.ndarray, real: np.ndarray, k: int) -> np.ndarray:
  """magnitude [B, T, S], real [B, S] -> the top-k real positions of each step [B, T, k]."""
  m = np.where(real[:, None, :], magnitude, -np.inf)
  return np.argsort(-m, axis=-1, kind='stable')[..., :k].astype(np.int32)


def attribute_split(translator, task, split: str, methods: Sequence[str], *,
                    num: int = 200, batch_size: int = 32, k: int = 3, seed: int = 0,
                    options: attribution.Options = attribution.Options(),
                    progress=None) -> dict:
  """The first `num` examples of a split with gold alignments, teacher-forced on their
  references -> {'methods': {name: figures}, 'sentences', 'seconds': {name: s}} (the explicit
  weights as 'attention'), with faithfulness (aopc, and aopc_random)."""
  if not task.has_alignment or translator.config.source != 'tokens':
    raise ValueError(f'task {task.name!r} has no gold alignments: alignment figures need a '
                     'token task that has them (copy, reverse, sort)')
  for m in methods:
    attribution.check(m, translator.config.source)
  deletion = make_deletion(translator.graphdef, k)
  rng = np.random.RandomState(seed)
  sums = {m: [] for m in [EXPLICIT, *methods]}
  drops = {m: [] for m in [*methods, EXPLICIT, 'random']}
  seconds = {m: 0.0 for m in methods}
  done = 0
  for batch in task.eval_batches(split, batch_size):
    rows = np.nonzero(batch['weight'] > 0)[0][:num - done]
    if not len(rows):
      break
    gold = task.batch_alignment(batch)
    src, tin, tout = (np.asarray(batch[x]) for x in ('src', 'tgt_in', 'tgt_out'))
    real = src != 0
    maps = {}
    for m in methods:
      start = time.perf_counter()
      a = jax.device_get(translator.attributor(m, options)(translator.params, src, tin, tout))
      seconds[m] += time.perf_counter() - start
      maps[m] = attribution.ranking(m, np.asarray(a.scores, np.float64))
      explicit = np.asarray(a.weights, np.float64)
    maps[EXPLICIT] = explicit
    src_lens = real.sum(-1)
    for name, mag in maps.items():
      for r in rows:
        sums[name].append(figures(mag[r], gold[r], None if name == EXPLICIT else explicit[r],
                                  int(src_lens[r]), attended_only=name == EXPLICIT))
    valid = (gold >= 0) & (tout != 0)
    for name, mag in [*maps.items(), ('random', rng.rand(*explicit.shape))]:
      lp = np.asarray(deletion(translator.params, src, tin, tout, _order(mag, real, k)))
      drop = lp[:, :1] - lp[:, 1:]              # [B, k, T]: row 0 is the source untouched
      drops[name].append(drop.mean(1)[rows][valid[rows]])
    done += len(rows)
    if progress is not None:
      progress(done)
    if done >= num:
      break
  report = {'sentences': done, 'k': k, 'methods': {}, 'seconds': seconds,
            'steps': sum(x['steps'] for x in sums[methods[0]]) if methods else 0}
  for name in sums:
    if not any(x['steps'] for x in sums[name]):   # score 'none': no explicit attention
      continue
    report['methods'][name] = summarise(sums[name])
    report['methods'][name]['aopc'] = float(np.concatenate(drops[name]).mean())
  report['aopc_random'] = float(np.concatenate(drops['random']).mean())
  return report
