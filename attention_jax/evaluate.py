"""Evaluation of a split: teacher-forced loss / perplexity / token accuracy, decoded outputs
(greedy or beam) scored by exact match, sacrebleu BLEU and chrF, the same by source-length
bucket (the figure of Cho et al. 2014 and Bahdanau et al. 2015), and, where the gold
alignment is known (copy / reverse / sort), alignment accuracy: the share of target steps
whose argmax (teacher-forced) attention falls on the gold source position."""

from __future__ import annotations

import functools
import json
import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from attention_jax import beam as beam_lib
from attention_jax import data as data_lib
from attention_jax import decode as decode_lib
from attention_jax import metrics as metrics_lib
from attention_jax import plots
from attention_jax.data.tokenizers import EOS


DEFAULT_LENGTH_EDGES = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)


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

  tf_fn(params, batch) -> (sums, argmax attention [B, T]); decode_fn(params, src, max_len) ->
  (tokens [B, L], weights [B, L, S]). Returns (report, kept) where kept holds the first
  `keep_outputs` (src, hyp, ref, ids, weights) for heatmaps.
  """
  texts = task.texts(split)
  total, rows, kept = None, [], []
  align_hits = align_total = 0
  align_by_len: dict[int, list[int]] = {}
  for batch in task.eval_batches(split, batch_size):
    sums, argmax = tf_fn(params, batch)
    total = metrics_lib.add(total, sums)
    gold = task.batch_alignment(batch)
    max_len = decode_lib.max_output_len(batch['src'].shape[1], factor)
    tokens, weights = jax.device_get(decode_fn(params, batch['src'], max_len))
    argmax = np.asarray(argmax)
    for r in np.nonzero(batch['weight'] > 0)[0]:
      idx = int(batch['index'][r])
      src_text, ref = texts[idx]
      src_len = int((batch['src'][r] != 0).sum()) - 1                    # without EOS
      hyp = task.tgt_tok.decode(tokens[r].tolist())
      hits = total_steps = 0
      if gold is not None:
        valid = (gold[r] >= 0) & (argmax[r] >= 0)     # steps with a gold and an attention
        hits, total_steps = int((argmax[r][valid] == gold[r][valid]).sum()), int(valid.sum())
        align_hits += hits
        align_total += total_steps
      rows.append((src_len, hyp, ref, hits, total_steps))
      if len(kept) < keep_outputs:
        kept.append((src_text, hyp, ref, tokens[r], weights[r]))
  report = metrics_lib.summarise(total)
  hyps, refs = [x[1] for x in rows], [x[2] for x in rows]
  report.update(metrics_lib.text_metrics(hyps, refs, bleu_tokenize))
  report['sentences'] = len(rows)
  if align_total:
    report['alignment_accuracy'] = 100.0 * align_hits / align_total
  if length_edges:
    by_len = []
    for lo, hi in _buckets(length_edges, max((x[0] for x in rows), default=0)):
      sel = [x for x in rows if lo < x[0] <= hi]
      if not sel:
        continue
      m = metrics_lib.text_metrics([x[1] for x in sel], [x[2] for x in sel], bleu_tokenize)
      entry = {'bucket': bucket_label(lo, hi), 'lo': lo, 'hi': hi, 'sentences': len(sel),
               'exact_match': m['exact_match'], 'bleu': m['bleu'], 'chrf': m['chrf']}
      steps = sum(x[4] for x in sel)
      if steps:
        entry['alignment_accuracy'] = 100.0 * sum(x[3] for x in sel) / steps
      by_len.append(entry)
    report['by_length'] = by_len
  return report, kept


def by_length_markdown(curves: dict[str, list[dict]], metric: str = 'bleu') -> str:
  """{variant: by_length rows} -> a markdown table, variants as rows, buckets as columns."""
  buckets = []
  for rows in curves.values():
    for r in rows:
      if r['bucket'] not in buckets:
        buckets.append(r['bucket'])
  lines = [f'| {metric} by source length | ' + ' | '.join(buckets) + ' |',
           '|---|' + '---|' * len(buckets)]
  for name, rows in curves.items():
    got = {r['bucket']: r[metric] for r in rows}
    lines.append(f'| {name} | ' + ' | '.join(
        f'{got[b]:.1f}' if b in got else '' for b in buckets) + ' |')
  return '\n'.join(lines)


def heatmaps(task, kept, directory: str, prefix: str) -> list[str]:
  """One labelled PNG per kept sentence, plus a grid of all of them."""
  os.makedirs(directory, exist_ok=True)
  paths, items = [], []
  for i, (src, hyp, ref, ids, weights) in enumerate(kept):
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
  return paths


def make_decoder(graphdef, beam: int, alpha: float) -> Callable:
  """-> jit-compiled decode_fn(params, src, max_len) -> (tokens [B, L], weights [B, L, S]):
  greedy for beam == 1, else beam search with length penalty alpha."""
  def decode(params, src, max_len):
    model = nnx.merge(graphdef, params)
    if beam == 1:
      return decode_lib.greedy(model, src, max_len)
    tokens, _, weights = beam_lib.beam_search(model, src, beam_size=beam, max_len=max_len,
                                              alpha=alpha)
    return tokens, weights
  return jax.jit(decode, static_argnums=2)


def evaluate_workdir(workdir: str, *, split: str = 'test', beam: int = 5, alpha: float = 0.6,
                     step: int | None = None, num_heatmaps: int = 6, verbose: bool = True):
  """Loads a run's checkpoint (best, or `step`) and writes eval_<split>.json, a BLEU-by-
  length plot and heatmaps into the workdir. Returns the report."""
  from attention_jax import api  # imported here: api -> train -> this module

  translator = api.load(workdir, step=step)
  with open(os.path.join(workdir, 'config.json')) as f:
    cfg = ml_collections.ConfigDict(json.load(f))
  task = data_lib.load_task(cfg.data, seed=cfg.seed,
                            tokenizers=(translator.src_tok, translator.tgt_tok))
  graphdef, params = translator.graphdef, translator.params
  report, kept = evaluate(
      params, task, split, tf_fn=make_teacher_forced(graphdef),
      decode_fn=make_decoder(graphdef, beam, alpha), batch_size=cfg.data.batch_size,
      factor=cfg.train.max_decode_factor, bleu_tokenize=cfg.eval.bleu_tokenize,
      length_edges=cfg.eval.get('length_edges', DEFAULT_LENGTH_EDGES), keep_outputs=num_heatmaps)
  report.update({'split': split, 'beam': beam, 'alpha': alpha, 'step': translator.step,
                 'workdir': os.path.abspath(workdir)})
  name = f'eval_{split}' + ('' if beam == 5 and alpha == 0.6 else f'_beam{beam}_a{alpha:g}')
  report['bleu_by_length_plot'] = plots.plot_by_length(
      {f'{translator.config.score}/{translator.config.decoder}': report['by_length']},
      os.path.join(workdir, f'{name}_bleu_by_length.png'),
      title=f'{os.path.basename(os.path.abspath(workdir))}: BLEU by source length ({split})')
  report['heatmaps'] = heatmaps(task, kept, os.path.join(workdir, f'{name}_heatmaps'),
                                          split)
  with open(os.path.join(workdir, f'{name}.json'), 'w') as f:
    json.dump(report, f, indent=2)
  if verbose:
    dec = 'greedy' if beam == 1 else f'beam {beam}, alpha {alpha}'
    print(f'{workdir} step {translator.step}, {split} ({report["sentences"]} sentences, {dec})')
    print(f'sacrebleu signature: {report["bleu_signature"]}')
    keys = ['loss', 'perplexity', 'token_accuracy', 'exact_match', 'bleu', 'chrf']
    if 'alignment_accuracy' in report:
      keys.append('alignment_accuracy')
    print('| ' + ' | '.join(keys) + ' |\n|' + '---|' * len(keys))
    print('| ' + ' | '.join(f'{report[k]:.4g}' for k in keys) + ' |\n')
    cols = ['sentences', 'exact_match', 'bleu', 'chrf'] + (
        ['alignment_accuracy'] if 'alignment_accuracy' in report else [])
    print('| source length | ' + ' | '.join(cols) + ' |\n|---|' + '---|' * len(cols))
    for r in report['by_length']:
      print(f'| {r["bucket"]} | ' + ' | '.join(
          f'{r[c]:.4g}' if isinstance(r[c], float) else str(r[c]) for c in cols) + ' |')
    print(f'\nwrote {os.path.join(workdir, name + ".json")}, {report["bleu_by_length_plot"]}, '
          f'{len(report["heatmaps"])} heatmaps in {os.path.join(workdir, name + "_heatmaps")}/')
  return report
