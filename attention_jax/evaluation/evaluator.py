"""Evaluation of a split: teacher-forced loss / perplexity / token accuracy, decoded outputs
(greedy or beam) scored by exact match, sacrebleu BLEU and chrF, the same by source-length
bucket (the figure of Cho et al. 2014 and Bahdanau et al. 2015), where a source has several
acceptable targets (cmudict's pronunciations) word and phone error rates against all of them,
and, where the gold alignment is known (copy / reverse / sort), alignment accuracy: the share
of target steps whose argmax (teacher-forced) attention falls on the gold source position."""

from __future__ import annotations

import functools
import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from attention_jax.decoding import greedy as decode_lib
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import plots
from attention_jax.evaluation import records as records_lib
from attention_jax.symbols import EOS


DEFAULT_LENGTH_EDGES = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)


def report_keys(*reports: dict) -> list[str]:
  """The figures every one of these reports holds, in table order: loss and perplexity,
  then metrics.METRICS' (those a task may lack only where every report has them)."""
  return ['loss', 'perplexity'] + [n for n, m in metrics_lib.METRICS.items()
                                   if m.always or all(n in r for r in reports)]


def teacher_forced(graphdef, params, batch):
  """-> (metric sums, argmax attention position [B, T] int32, -1 where nothing is attended)."""
  logits, weights = nnx.merge(graphdef, params)(batch['src'], batch['tgt_in'])
  attended = jnp.sum(weights, axis=-1) > 0          # False everywhere for score 'none'
  return (metrics_lib.sums(logits, batch['tgt_out'], batch['weight']),
          jnp.where(attended, jnp.argmax(weights, axis=-1), -1).astype(jnp.int32))


def make_teacher_forced(graphdef) -> Callable:
  return jax.jit(functools.partial(teacher_forced, graphdef))


def bucket_label(lo: int, hi: int) -> str:
  return f'{lo + 1}-{hi}'


def _buckets(edges: Sequence[int], max_len: int) -> list[tuple[int, int]]:
  """Source-length buckets (lo, hi] from edges, extended to cover max_len."""
  edges = sorted(int(e) for e in edges)
  if not edges or edges[0] != 0:
    edges = [0] + [e for e in edges if e > 0]
  while edges[-1] < max_len:
    edges.append(edges[-1] + (edges[-1] - edges[-2] if len(edges) > 1 else 10))
  return list(zip(edges[:-1], edges[1:]))


def evaluate(params, task, split: str, *, tf_fn: Callable, decode_fn: Callable,
             batch_size: int, factor: float, bleu_tokenize: str,
             length_edges: Sequence[int] = (), keep_outputs: int = 0):
  """Scores a whole split.

  tf_fn(params, batch) -> (sums, argmax attention [B, T]); decode_fn(params, src, max_len,
  factor) -> (tokens [B, L], weights [B, L, S]). Returns (report, kept, records): kept holds
  the first `keep_outputs` (src, hyp, ref, ids, weights, image or None) for heatmaps; records = (header,
  per-sentence records) of attention_jax.evaluation.records, to be written beside the report.
  """
  texts = task.texts(split)
  src_lens = task.encoded(split).src.lengths  # source tokens, no EOS (images: of what is drawn)
  all_refs = task.references(split)   # several references per source (G2P), or None
  total, rows, kept, per_sentence = None, [], [], []
  align_hits = align_total = 0
  for batch in task.eval_batches(split, batch_size):
    sums, argmax = tf_fn(params, batch)
    total = metrics_lib.add(total, sums)
    gold = task.batch_alignment(batch)
    # the output limit: from the source length (an image: from the longest training target)
    max_len = decode_lib.max_output_len(
        batch['src'].shape[1] if task.source == 'tokens' else task.max_tgt_len, factor)
    tokens, weights = jax.device_get(decode_fn(params, batch['src'], max_len, factor))
    argmax = np.asarray(argmax)
    for r in np.nonzero(batch['weight'] > 0)[0]:
      idx = int(batch['index'][r])
      src_text, ref = texts[idx]
      src_len = int(src_lens[idx])                                        # without EOS
      hyp = task.tgt_tok.decode(tokens[r].tolist())
      hits = total_steps = 0
      if gold is not None:
        valid = (gold[r] >= 0) & (argmax[r] >= 0)     # steps with a gold and an attention
        hits, total_steps = int((argmax[r][valid] == gold[r][valid]).sum()), int(valid.sum())
        align_hits += hits
        align_total += total_steps
      rows.append((src_len, hyp, ref, hits, total_steps,
                   all_refs[idx] if all_refs is not None else None))
      per_sentence.append({'id': idx, 'src': src_text, 'src_len': src_len, 'hyp': hyp,
                           'ref': ref, 'refs': rows[-1][5],
                           'align': [hits, total_steps] if gold is not None else None})
      if len(kept) < keep_outputs:
        image = None if task.source == 'tokens' else batch['src'][r]
        kept.append((src_text, hyp, ref, tokens[r], weights[r], image))
  report = metrics_lib.summarise(total)
  hyps, refs = [x[1] for x in rows], [x[2] for x in rows]
  report.update(metrics_lib.text_metrics(hyps, refs, bleu_tokenize))
  ref_lists = [x[5] for x in rows] if all_refs is not None else None
  if ref_lists is not None:
    report.update(metrics_lib.g2p_metrics(hyps, ref_lists))
  # registered metrics: per-sentence statistics once, summed for the split, each length band
  # and (kept with each sentence) the records
  registered = metrics_lib.registered_statistics(hyps, refs, ref_lists)   # {name: [N, k]}
  report.update({n: metrics_lib.METRICS[n].score(t.sum(0)) for n, t in registered.items()})
  for i, sentence in enumerate(per_sentence):
    sentence['registered'] = {n: t[i] for n, t in registered.items()}
  report['sentences'] = len(rows)
  skipped = task.too_long(split)
  if skipped:   # beyond task.eval_limits: not decoded, not scored, counted
    report['skipped_too_long'] = skipped
    logging.warning('%s: skipped %d example(s) longer than %s tokens (source, target)',
                    split, skipped, task.eval_limits)
  if align_total:
    report['alignment_accuracy'] = 100.0 * align_hits / align_total
  if length_edges:
    by_len = []
    for lo, hi in _buckets(length_edges, max((x[0] for x in rows), default=0)):
      chosen = [i for i, x in enumerate(rows) if lo < x[0] <= hi]
      sel = [rows[i] for i in chosen]
      if not sel:
        continue
      m = metrics_lib.text_metrics([x[1] for x in sel], [x[2] for x in sel], bleu_tokenize)
      entry = {'bucket': bucket_label(lo, hi), 'lo': lo, 'hi': hi, 'sentences': len(sel),
               'exact_match': m['exact_match'], 'bleu': m['bleu'], 'chrf': m['chrf']}
      if all_refs is not None:
        entry.update(metrics_lib.g2p_metrics([x[1] for x in sel], [x[5] for x in sel]))
      entry.update({n: metrics_lib.METRICS[n].score(t[chosen].sum(0))
                    for n, t in registered.items()})
      steps = sum(x[4] for x in sel)
      if steps:
        entry['alignment_accuracy'] = 100.0 * sum(x[3] for x in sel) / steps
      by_len.append(entry)
    report['by_length'] = by_len
  return report, kept, records_lib.build(split, per_sentence, bleu_tokenize)


def selection_score(report: dict) -> float:
  """What picks the best checkpoint on validation (higher is better): 100 - WER where the task
  has several references per source (G2P), else corpus BLEU."""
  metric = records_lib.primary_metrics(report)[0]
  return 100.0 - report[metric] if metrics_lib.lower_is_better(metric) else report[metric]


def heatmaps(task, kept, directory: str, prefix: str, heads: Callable | None = None,
             grid: Callable | None = None) -> list[str]:
  """One labelled PNG per kept sentence, plus a grid of all of them; with `heads`
  (inference.layer_weights(graphdef, params, ...) of a Transformer) also a grid of the first
  sentence's cross-attention per decoder layer (rows) and head (columns). Image sources: each
  output token's attention upsampled onto the image (image_heatmaps), over the grid that
  `grid` (an image's (H, W) -> (H', W'): encoders.grid_shape of the model) gives."""
  os.makedirs(directory, exist_ok=True)
  if kept and kept[0][5] is not None:
    return image_heatmaps(task, kept, directory, prefix, grid, heads)
  paths, items = [], []
  for i, (src, hyp, ref, ids, weights, _) in enumerate(kept):
    src_tokens = task.src_tok.pieces(src) + ['</s>']
    n = next((j + 1 for j, t in enumerate(ids) if t == EOS), len(ids))
    tgt_tokens = [task.tgt_tok.id_to_piece(int(t)) for t in ids[:n]]
    title = f'{src!r} -> {hyp!r}' + ('' if hyp == ref else f' (ref {ref!r})')
    w = weights[:n, :len(src_tokens)]
    items.append((w, src_tokens, tgt_tokens, title))
    paths.append(plots.plot_attention(w, src_tokens, tgt_tokens,
                                      os.path.join(directory, f'{prefix}_{i}.png'), title))
  if items:
    paths.append(plots.plot_attention_grid(items, os.path.join(directory, f'{prefix}_grid.png')))
  if items and heads is not None:
    src, _, _, ids, _, _ = kept[0]
    w, src_tokens, tgt_tokens, title = items[0]
    src_ids = np.asarray(task.src_tok.encode(src) + [EOS], np.int32)
    per_head = heads(src_ids, np.asarray(ids[:len(tgt_tokens)], np.int32))      # [N, H, T, S]
    grid = [(per_head[n, h], src_tokens, tgt_tokens, f'layer {n + 1}, head {h + 1}')
            for n in range(per_head.shape[0]) for h in range(per_head.shape[1])]
    paths.append(plots.plot_attention_grid(
        grid, os.path.join(directory, f'{prefix}_heads.png'), cols=per_head.shape[1]))
  return paths


def image_heatmaps(task, kept, directory: str, prefix: str, grid: Callable,
                   heads: Callable | None = None) -> list[str]:
  """Image sources (Xu et al. 2015's figures): per kept example a PNG with one row per output
  token, its attention over the grid upsampled onto the image, and a grid of all examples'
  first ten tokens; with `heads` (a Transformer decoder) also the first example's
  cross-attention per decoder layer and head, a column each."""
  paths, items = [], []
  for i, (src, hyp, ref, ids, weights, image) in enumerate(kept):
    n = next((j + 1 for j, t in enumerate(ids) if t == EOS), len(ids))
    tokens = [task.tgt_tok.id_to_piece(int(t)) for t in ids[:n]]
    title = f'{src!r} -> {hyp!r}' + ('' if hyp == ref else f' (ref {ref!r})')
    shape = grid(image.shape[:2])
    items.append((image, weights[:n].reshape(n, *shape), tokens, title))
    paths.append(plots.plot_image_attention(image, items[-1][1], tokens,
                                            os.path.join(directory, f'{prefix}_{i}.png'), title))
  if items:
    paths.append(plots.plot_image_attention_grid(
        items, os.path.join(directory, f'{prefix}_grid.png')))
  if items and heads is not None:
    image, _, tokens, _ = items[0]
    per_head = heads(image, np.asarray(kept[0][3][:len(tokens)], np.int32))   # [N, H, T, S]
    per_head = per_head.reshape(*per_head.shape[:3], *grid(image.shape[:2]))
    columns = [(image, per_head[n, h], tokens, f'layer {n + 1}, head {h + 1}')
               for n in range(per_head.shape[0]) for h in range(per_head.shape[1])]
    paths.append(plots.plot_image_attention_grid(
        columns, os.path.join(directory, f'{prefix}_heads.png')))
  return paths
