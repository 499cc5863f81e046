"""Word alignments of a trained model, teacher-forced on the reference (Luong et al. 2015 §5.4,
Ding et al. 2019): any map over subwords (the explicit attention, a Transformer layer's or
head's cross-attention, an attribution method) -> word maps -> links, scored against gold.

  names = map_names(graphdef, params, ('attention', 'gradient'))   # + a Transformer's layers,
                                                                   # heads and their _shift rows
  out = align_split(graphdef, params, task, 'test', names, how='argmax')
  out['links']['attention']    # [frozenset((source word, target word)), ...] per example
  out['figures']['attention']  # precision, recall, aer (percent) over the gold examples

Map names:
  attention              the explicit weights [T, S] (read.weights; none for score `none`)
  attention_L<n>         a Transformer decoder layer's cross-attention, mean over heads
  attention_L<n>H<h>     one head of it
  <any attention>_shift  the same map one row later: the step at which the target word is the
                         decoder's input rather than its output (Chen et al. 2020's "shift")
  <a method>             an attribution method of attribution.METHODS, ranked by magnitude
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from flax import nnx

from attention_jax.data.pharaoh import Alignment
from attention_jax.implicit import alignment
from attention_jax.implicit import attribution
from attention_jax.implicit import word_alignment as wa

EXPLICIT = alignment.EXPLICIT   # 'attention'
SHIFT = '_shift'


def _forward_maps(graphdef) -> Callable:
  """-> jit fn(params, src, tgt_in) -> (weights [B, T, S], layer maps [B, N, H, T, S] or None)."""

  def fn(params, src, tgt_in):
    model = nnx.merge(graphdef, params)
    _, read = model.forward(src, tgt_in)
    return read.weights, model.layer_weights(read)
  return jax.jit(fn)


def map_names(graphdef, params, methods: Sequence[str] = (), batch: dict | None = None,
              shift: bool | None = None) -> list[str]:
  """The maps a model offers: 'attention', its layers and heads (a Transformer's, found on
  `batch` or a 1-token one), each with its _shift rows (default: for a Transformer), then the
  attribution methods asked for."""
  fwd = _forward_maps(graphdef)
  if batch is None:
    batch = {'src': np.ones((1, 2), np.int32), 'tgt_in': np.ones((1, 2), np.int32)}
  _, layers = jax.eval_shape(fwd, params, batch['src'], batch['tgt_in'])
  names = [EXPLICIT] + ([] if layers is None else list(alignment.layer_maps(
      np.zeros((1, *layers.shape[1:3], 1, 1)))))   # the names alone
  if shift is None:
    shift = layers is not None
  if shift:
    names += [n + SHIFT for n in list(names)]
  return names + list(methods)


def batch_maps(fwd: Callable, attributors: dict, params, batch: dict,
               names: Sequence[str], options: attribution.Options | None = None
               ) -> dict[str, np.ndarray]:
  """One batch -> {name: map [B, T, S] float64 >= 0} for the names asked for."""
  src, tin, tout = (np.asarray(batch[k]) for k in ('src', 'tgt_in', 'tgt_out'))
  out = {}
  want = {n[:-len(SHIFT)] if n.endswith(SHIFT) else n for n in names}
  if any(n.startswith(EXPLICIT) for n in want):
    weights, layers = jax.device_get(fwd(params, src, tin))
    out[EXPLICIT] = np.asarray(weights, np.float64)
    if layers is not None:                                              # [B, N, H, T, S]
      out.update(alignment.layer_maps(np.asarray(layers, np.float64)))
  if attributors:
    out.update(alignment.magnitudes(attributors, params, src, tin, tout,
                                    dict.fromkeys(attributors, 0.0), options,
                                    np.asarray(batch['weight']) > 0)[0])
  for n in names:
    if n.endswith(SHIFT):   # row t <- row t + 1: the step whose input is target token t
      base = out[n[:-len(SHIFT)]]
      out[n] = np.concatenate([base[:, 1:], np.zeros_like(base[:, :1])], axis=1)
  unknown = [n for n in names if n not in out]
  if unknown:
    raise ValueError(f'unknown map(s) {", ".join(unknown)} for this model; valid: '
                     f'{", ".join(sorted(out))} and the attribution methods '
                     f'{", ".join(attribution.METHODS)}')
  return {n: out[n] for n in names}


def align_split(graphdef, params, task, split: str, names: Sequence[str], *,
                how: str = 'argmax', threshold: float = 0.5, num: int | None = None,
                batch_size: int = 32, options: attribution.Options = attribution.Options(),
                keep_maps: int = 0, progress: Callable[[int], None] | None = None) -> dict:
  """The split's examples (the first `num`), teacher-forced on their references, through every
  map of `names` -> {'links': {name: [links per example, in split order]}, 'figures': {name:
  precision / recall / aer over the examples with gold} (with word-level gold),
  'by_length': {name: [bands]}, 'maps': {name: [word map [Tw, Sw]] of the first keep_maps
  examples}, 'rows': the split indices aligned}."""
  methods = [n for n in names if n in attribution.METHODS]
  for m in methods:
    attribution.check(m, task.source)
  fwd = _forward_maps(graphdef)
  attributors = {m: attribution.make_attributor(graphdef, m, options) for m in methods}
  n_all = len(task.texts(split))
  num = n_all if num is None else min(num, n_all)
  links = {n: [None] * n_all for n in names}
  maps = {n: {} for n in names}
  done = 0
  for batch in task.eval_batches(split, batch_size, num=num):   # the first num examples only
    rows = [r for r in np.flatnonzero(batch['weight'] > 0) if batch['index'][r] < num]
    if not rows:
      continue
    got = batch_maps(fwd, attributors, params, batch, names, options)
    for r in rows:
      index = int(batch['index'][r])
      src_words, tgt_words = task.token_words(split, index)
      src, tgt = task.texts(split)[index]
      n_src, n_tgt = len(src.split()), len(tgt.split())
      for n in names:
        w = wa.to_words(got[n][r], tgt_words, src_words, n_tgt, n_src)
        links[n][index] = wa.extract(w, how, threshold)
        if index < keep_maps:
          maps[n][index] = w
    done += len(rows)
    if progress is not None:
      progress(done)
  rows = [k for k in range(num) if links[names[0]][k] is not None] if names else []
  out = {'links': {n: [links[n][k] for k in rows] for n in names}, 'rows': rows,
         'maps': {n: [maps[n][k] for k in sorted(maps[n])] for n in names}}
  gold = task.word_gold(split)
  if gold is not None:
    with_gold = [i for i, k in enumerate(rows) if gold[k] is not None]
    golds = [gold[rows[i]] for i in with_gold]
    lengths = [len(task.texts(split)[rows[i]][0].split()) for i in with_gold]
    out['gold'] = golds
    out['figures'] = {n: wa.score(golds, [out['links'][n][i] for i in with_gold])
                      for n in names}
    out['by_length'] = {n: wa.score_by_length(golds, [out['links'][n][i] for i in with_gold],
                                              lengths) for n in names}
    out['gold_rows'] = [rows[i] for i in with_gold]
  return out


def as_alignments(links: Sequence[frozenset]) -> list[Alignment]:
  """Predicted links -> Alignments (sure = possible), e.g. for pharaoh.write."""
  return [Alignment.of(l) for l in links]
