"""Implicit against explicit attention on a split with gold alignments (copy, reverse, sort):
how well each map points at the gold source position, how two maps agree, and how faithful a
ranking is to what the model uses.

  report = attribute_split(graphdef, params, task, 'test', ('gradient', 'integrated_gradients'),
                           train_max_len=12)
  by_map = report.get('methods')  # per map (each method, 'attention': the explicit weights,
                                  # a Transformer's layers and heads): alignment_accuracy,
                                  # gold_mass, kendall_tau, jsd, aopc, steps
  report.get('random')            # the same figures for a random ranking: chance
  report.get('bands')             # the same within and beyond the training lengths

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

from attention_jax.implicit import attribution

EXPLICIT = 'attention'   # the explicit weights' row in a report
RANDOM = 'random'        # a random ranking: the chance level of every figure


def _normalised(m: np.ndarray) -> np.ndarray:
  """Rows [T, S] >= 0 -> rows summing to 1 (uniform where a row is all zero)."""
  total = m.sum(-1, keepdims=True)
  return np.where(total > 0, m / np.where(total > 0, total, 1), 1.0 / m.shape[-1])


def _jsd(p: np.ndarray, q: np.ndarray) -> np.ndarray:
  """Jensen-Shannon divergence in bits between rows of p and q [T, S] -> [T]."""
  # scipy imported where used: its stats module is 0.7 s of every process's start
  from scipy.spatial import distance  # pylint: disable=g-import-not-at-top
  return distance.jensenshannon(p, q, base=2, axis=-1) ** 2


def figures(magnitude: np.ndarray, gold: np.ndarray, explicit: np.ndarray | None,
            src_len: int, attended_only: bool = False) -> dict[str, float]:
  """One sentence: magnitude [T, S] (>= 0), gold [T] (-1: none), explicit [T, S] or None,
  src_len the real source positions (EOS included) -> summable sums and counts.
  attended_only: steps whose row is all zero are left out (explicit weights: score `none`
  attends nowhere; as scoring.py counts them); an all-zero explicit row gives no tau / JSD."""
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
    from scipy import stats  # pylint: disable=g-import-not-at-top
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


PASSES = 512   # backward passes (rows x target positions x Jacobians held) one call runs at once


def _power_of_two(n: int) -> int:
  """The largest power of two <= n (at least 1): equal chunks of a batch of 2^k rows."""
  return 1 << max(0, int(n).bit_length() - 1)


def layer_maps(layers: np.ndarray) -> dict[str, np.ndarray]:
  """A Transformer's cross-attention per layer and head [B, N, H, T, S] -> {'attention_L<n>':
  layer n's mean over heads, 'attention_L<n>H<h>': one head} (n, h from 1), each [B, T, S]."""
  out = {}
  for n in range(layers.shape[1]):
    out[f'{EXPLICIT}_L{n + 1}'] = layers[:, n].mean(1)
    for h in range(layers.shape[2]):
      out[f'{EXPLICIT}_L{n + 1}H{h + 1}'] = layers[:, n, h]
  return out


def magnitudes(attributors: dict, params, src, tin, tout, seconds: dict,
               opts: attribution.Options | None = None, real=None):
  """One batch through every method's attributor -> ({method: magnitudes (ranking) [B, T,
  *positions]}, the explicit weights [B, T, S'] float64); each method's seconds added to
  `seconds`. With `opts` (the attributors'), the rows go in chunks of at most PASSES backward
  passes in flight (rows x T x attribution.held), a power of two: a method's memory grows
  with them (a whole batch of integrated gradients does not fit: docs/alignment.md);
  with `real` [B] (the batch's weight > 0), a chunk of filler rows alone is not computed (its
  magnitudes are 0)."""
  maps, explicit = {}, None
  for m, fn in attributors.items():
    start = time.perf_counter()
    b = len(src)
    k = b if opts is None else min(b, _power_of_two(
        PASSES // (tin.shape[1] * attribution.held(m, opts))))
    parts = {i: jax.device_get(fn(params, src[i:i + k], tin[i:i + k], tout[i:i + k]))
             for i in range(0, b, k) if real is None or np.any(real[i:i + k])}
    like = next(iter(parts.values()))
    a = jax.tree.map(lambda *x: np.concatenate(x)[:b], *[
        parts.get(i, jax.tree.map(np.zeros_like, like)) for i in range(0, b, k)])
    seconds[m] += time.perf_counter() - start
    maps[m] = np.asarray(attribution.ranking(m, np.asarray(a.scores, np.float64)))
    explicit = np.asarray(a.weights, np.float64)
  return maps, explicit


def bands(train_max_len: int | None) -> list[tuple[str, int, float]]:
  """Source-length bands (name, lo, hi], lengths without EOS: all, and for a task with
  training lengths up to train_max_len, within and beyond them."""
  if not train_max_len:
    return [('all', 0, np.inf)]
  return [('all', 0, np.inf), ('within', 0, train_max_len), ('beyond', train_max_len, np.inf)]


def _layer_maps(graphdef):
  """-> jit fn(params, src, tgt_in) -> the cross-attention of every decoder layer and head
  [B, N, H, T, S] (a Transformer's, read.layers), or None for a model without layers."""

  def fn(params, src, tgt_in):
    model = nnx.merge(graphdef, params)
    return model.layer_weights(model.forward(src, tgt_in)[1])
  return jax.jit(fn)


def attribute_split(graphdef, params, task, split: str, methods: Sequence[str], *,
                    num: int = 200, batch_size: int = 32, k: int = 3, seed: int = 0,
                    options: attribution.Options = attribution.Options(),
                    train_max_len: int | None = None, progress=None) -> dict:
  """The first `num` examples of a split with gold alignments, teacher-forced on their
  references -> {'methods': {map: figures}, 'aopc_random', 'bands': [{'band', 'lo', 'hi',
  'sentences', 'methods', 'aopc_random'}], 'sentences', 'steps', 'k', 'seconds': {method: s}}.

  Maps: each method, 'attention' (the explicit weights), 'random' (a random ranking: the
  chance level of every figure) and, for a Transformer, 'attention_L<n>' (layer n's mean over
  heads) and 'attention_L<n>H<h>' (one head). Bands: `bands(train_max_len)`."""
  if not task.has_alignment:
    raise ValueError(f'task {task.name!r} has no gold alignments: alignment figures need a '
                     'token task that has them (copy, reverse, sort)')
  for m in methods:
    attribution.check(m, task.source)
  attributors = {m: attribution.make_attributor(graphdef, m, options) for m in methods}
  deletion = make_deletion(graphdef, k)
  layers_of = _layer_maps(graphdef)
  rng = np.random.RandomState(seed)
  sentences = []   # (source length, {map: figures}, {map: deletion drops [steps]})
  seconds = {m: 0.0 for m in methods}
  for batch in task.eval_batches(split, batch_size):
    rows = np.nonzero(batch['weight'] > 0)[0][:num - len(sentences)]
    if not len(rows):
      break
    gold = task.batch_alignment(batch)
    src, tin, tout = (np.asarray(batch[x]) for x in ('src', 'tgt_in', 'tgt_out'))
    real = src != 0
    maps, explicit = magnitudes(attributors, params, src, tin, tout, seconds)
    maps[EXPLICIT] = explicit
    layers = layers_of(params, src, tin)
    if layers is not None:
      maps.update(layer_maps(np.asarray(jax.device_get(layers), np.float64)))  # [B, N, H, T, S]
    maps[RANDOM] = rng.rand(*explicit.shape)
    src_lens = real.sum(-1)
    valid = (gold >= 0) & (tout != 0)
    drops = {}
    for name, mag in maps.items():
      lp = np.asarray(deletion(params, src, tin, tout, _order(mag, real, k)))
      drops[name] = (lp[:, :1] - lp[:, 1:]).mean(1)      # [B, T]: row 0 is the source untouched
    for r in rows:
      figs = {name: figures(mag[r], gold[r], explicit[r] if name in methods else None,
                            int(src_lens[r]), attended_only=name.startswith(EXPLICIT))
              for name, mag in maps.items()}
      sentences.append((int(src_lens[r]) - 1, figs,
                        {name: d[r][valid[r]] for name, d in drops.items()}))
    if progress is not None:
      progress(len(sentences))
    if len(sentences) >= num:
      break

  def summary(chosen) -> dict:
    out = {}
    for name in (chosen[0][1] if chosen else {}):
      if not any(s[1][name]['steps'] for s in chosen):   # score 'none': no explicit attention
        continue
      out[name] = summarise([s[1][name] for s in chosen])
      out[name]['aopc'] = float(np.concatenate([s[2][name] for s in chosen]).mean())
    return out

  report = {'sentences': len(sentences), 'k': k, 'seconds': seconds,
            'steps': sum(s[1][RANDOM]['steps'] for s in sentences), 'bands': []}
  for band, lo, hi in bands(train_max_len):
    chosen = [s for s in sentences if lo < s[0] <= hi]
    if not chosen:
      continue
    by_map = summary(chosen)
    chance = by_map.pop(RANDOM)
    entry = {'band': band, 'lo': lo, 'hi': None if hi == np.inf else hi,
             'sentences': len(chosen), 'methods': by_map, 'aopc_random': chance.pop('aopc'),
             'random': chance}
    if band == 'all':
      report.update(methods=entry['methods'], aopc_random=entry['aopc_random'],
                    random=entry['random'])
    report['bands'].append(entry)
  return report


def _to_pixels(m: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  """A map [T, H', W'] over an encoder's grid -> [T, H, W]: each pixel holds its cell's value
  divided by the cell's area (mass is kept); a pixel map [T, H, W] is returned as is."""
  h, w = size
  if m.shape[-2:] == (h, w):
    return m
  rows, cols = np.arange(h) * m.shape[-2] // h, np.arange(w) * m.shape[-1] // w
  return m[:, rows][:, :, cols] * (m.shape[-2] * m.shape[-1] / (h * w))


def _point(m: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  """The argmax of each row of a map [T, H', W'] (grid) or [T, H, W] (pixels) as pixel
  coordinates [T, 2] (y, x): a grid cell's centre, or the pixel's."""
  t, gh, gw = m.shape
  flat = np.argmax(m.reshape(t, -1), -1)
  i, j = flat // gw, flat % gw
  return np.stack([(i + 0.5) * size[0] / gh, (j + 0.5) * size[1] / gw], -1)


def pointing(magnitude: np.ndarray, boxes: np.ndarray, size: tuple[int, int],
             tolerance: float, attended_only: bool = False) -> dict[str, float]:
  """One image: magnitude [T, H', W'] or [T, H, W] (>= 0), boxes [T, 4] (y0, x0, y1, x1; -1
  rows: none) -> summable sums: hits (the argmax within `tolerance` pixels of the box: the
  pointing game, Zhang et al. 2016) and gold_mass (the map's share inside the box)."""
  keep = boxes[:, 0] >= 0
  if attended_only:
    keep &= magnitude.reshape(len(magnitude), -1).sum(-1) > 0
  steps = np.nonzero(keep)[0]
  out = {'steps': len(steps), 'hits': 0.0, 'gold_mass': 0.0, 'tau': 0.0, 'tau_steps': 0,
         'jsd': 0.0}
  if not len(steps):
    return out
  m, b = np.asarray(magnitude, np.float64)[steps], boxes[steps]
  y, x = _point(m, size).T
  out['hits'] = float(np.sum((y >= b[:, 0] - tolerance) & (y <= b[:, 2] + tolerance)
                             & (x >= b[:, 1] - tolerance) & (x <= b[:, 3] + tolerance)))
  px = _to_pixels(m, size)
  total = px.reshape(len(px), -1).sum(-1)
  inside = np.array([p[y0:y1, x0:x1].sum() for p, (y0, x0, y1, x1) in zip(px, b)])
  out['gold_mass'] = float(np.sum(np.where(total > 0, inside / np.where(total > 0, total, 1),
                                           (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
                                           / (size[0] * size[1]))))
  return out


def attribute_images(graphdef, params, task, split: str, methods: Sequence[str],
                     grid: tuple[int, int], *, num: int = 200, batch_size: int = 32,
                     seed: int = 0, options: attribution.Options = attribution.Options(),
                     tolerance: float | None = None, progress=None) -> dict:
  """The pointing game on an image task whose digits' boxes were recorded (digit_strips),
  teacher-forced on the references: per map (each method: pixels or, Grad-CAM, the grid;
  'attention': the explicit weights over the grid; 'random') alignment_accuracy (% of output
  steps whose argmax lies within `tolerance` pixels of the output digit's box; default half a
  grid cell) and gold_mass (% of the map inside the box). -> the report of attribute_split,
  with one band ('all') and no AOPC."""
  if not task.has_boxes:
    raise ValueError(f'task {task.name!r} has no gold boxes: the pointing game needs an image '
                     'task that records them (digit_strips)')
  for m in methods:
    attribution.check(m, task.source)
  size = task.image_shape
  tolerance = 0.5 * size[0] / grid[0] if tolerance is None else tolerance
  attributors = {m: attribution.make_attributor(graphdef, m, options) for m in methods}
  rng = np.random.RandomState(seed)
  sums = {}
  seconds = {m: 0.0 for m in methods}
  done = 0
  for batch in task.eval_batches(split, batch_size):
    rows = np.nonzero(batch['weight'] > 0)[0][:num - done]
    if not len(rows):
      break
    boxes = task.batch_boxes(batch, split)
    src, tin, tout = (np.asarray(batch[x]) for x in ('src', 'tgt_in', 'tgt_out'))
    maps, explicit = magnitudes(attributors, params, src, tin, tout, seconds)
    maps = {m: x if x.ndim == 4 else x.reshape(*x.shape[:2], *grid)   # pixels, or the grid
            for m, x in maps.items()}
    explicit = explicit.reshape(*tout.shape, *grid)
    maps[EXPLICIT] = explicit
    maps[RANDOM] = rng.rand(*explicit.shape)
    for name, mag in maps.items():
      sums.setdefault(name, []).extend(
          pointing(mag[r], boxes[r], size, tolerance, attended_only=name == EXPLICIT)
          for r in rows)
    done += len(rows)
    if progress is not None:
      progress(done)
    if done >= num:
      break
  by_map = {name: summarise(x) for name, x in sums.items() if any(f['steps'] for f in x)}
  chance = by_map.pop(RANDOM)
  band = {'band': 'all', 'lo': 0, 'hi': None, 'sentences': done, 'methods': by_map,
          'random': chance, 'aopc_random': None}
  return {'sentences': done, 'steps': chance['steps'], 'k': None, 'seconds': seconds,
          'tolerance': tolerance, 'methods': by_map, 'random': chance, 'aopc_random': None,
          'bands': [band]}


def format_report(report: dict, split: str) -> str:
  """An attribute_split report as markdown: a table per band (all; within and beyond the
  training lengths), random positions last."""
  cols = ['alignment_accuracy', 'gold_mass', 'kendall_tau', 'jsd', 'aopc']
  lines = [f'{report["sentences"]} sentences of {split}, teacher-forced on the references '
           f'({report["steps"]} steps with a gold position); '
           + (f'aopc: top 1..{report["k"]} positions deleted' if report['k'] else
              f'pointing game: the argmax within {report["tolerance"]:g} pixels of the box')
           + ('' if EXPLICIT in report['methods'] else '; no explicit attention (score none)')]
  for band in report['bands']:
    span = f'{band["lo"] + 1}+' if band['hi'] is None else f'{band["lo"] + 1}-{band["hi"]}'
    lines += ['', f'{band["band"]} (source lengths {span}, '
              f'{band["sentences"]} sentences)', '',
              '| map | ' + ' | '.join(cols) + ' | seconds |', '|---|' + '---|' * (len(cols) + 1)]
    chance = {**band['random'], **({} if band['aopc_random'] is None
                                   else {'aopc': band['aopc_random']})}
    rows = [*band['methods'].items(), (RANDOM, chance)]
    for name, fig in rows:
      secs = report['seconds'].get(name) if band['band'] == 'all' else None
      lines.append(f'| {name} | ' + ' | '.join(
          f'{fig[c]:.4g}' if c in fig else '-' for c in cols) + ' | '
          + (f'{secs:.1f}' if secs is not None else '-') + ' |')
  return '\n'.join(lines)
