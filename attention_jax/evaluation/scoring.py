"""Scoring a split: teacher-forced loss / perplexity / token accuracy, decoded outputs
(greedy or beam) scored by exact match, sacrebleu BLEU and chrF, where a source has several
acceptable targets (cmudict's pronunciations) word and phone error rates against all of them,
and, where the gold alignment is known (copy / reverse / sort), alignment accuracy: the share
of target steps whose argmax (teacher-forced) attention falls on the gold source position.
What is measured beyond these (by source length, attribution, heatmaps, records) is an
evaluator of evaluators.py, run on the scored split."""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from attention_jax.decoding import greedy
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import records as records_lib
from attention_jax.models import sources


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


class Scored(NamedTuple):
  """A scored split: what the evaluators (evaluators.py) read."""
  report: dict       # the split's figures
  kept: list         # the first `keep_outputs` (src, hyp, ref, ids, weights, image or None)
  records: tuple     # (header, per-sentence records) of records.build, to write beside it
  sentences: list    # per sentence as decoded: id, src, src_len, hyp, ref, refs, align, registered


def score_split(params, task, split: str, *, tf_fn: Callable, decode_fn: Callable,
                batch_size: int, factor: float, bleu_tokenize: str,
                keep_outputs: int = 0) -> Scored:
  """Scores a whole split: the teacher-forced sums, the decoded outputs' metrics, alignment
  accuracy where the task has gold alignments.

  tf_fn(params, batch) -> (sums, argmax attention [B, T]); decode_fn(params, src, max_len,
  factor) -> (tokens [B, L], weights [B, L, S]).
  """
  texts = task.texts(split)
  src_lens = task.encoded(split).src.lengths  # source tokens, no EOS (images: of what is drawn)
  all_refs = task.references(split)   # several references per source (G2P), or None
  total, rows, kept, per_sentence = None, [], [], []
  align_hits = align_total = 0
  kind = sources.lookup(task.source)
  for batch in task.eval_batches(split, batch_size):
    sums, argmax = tf_fn(params, batch)
    total = metrics_lib.add(total, sums)
    gold = task.batch_alignment(batch)
    # the output limit: from the source length (an image: from the longest training target)
    max_len = greedy.max_output_len(kind.decode_basis(batch['src'], task.max_tgt_len), factor)
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
        image = kind.shown(batch['src'][r])
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
  return Scored(report, kept, records_lib.build(split, per_sentence, bleu_tokenize), per_sentence)


def selection_score(report: dict) -> float:
  """What picks the best checkpoint on validation (higher is better): 100 - WER where the task
  has several references per source (G2P), else corpus BLEU."""
  metric = records_lib.primary_metrics(report)[0]
  return 100.0 - report[metric] if metrics_lib.lower_is_better(metric) else report[metric]
