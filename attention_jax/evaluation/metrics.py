"""Metrics as sums and counts (so they add up across batches and devices), the text metrics
of decoded outputs (exact match, sacrebleu BLEU and chrF), and METRICS: the one registry of
the figures that evaluations report, with what records, comparisons, reports and plots need
to know of each (its label, its direction, its per-sentence record).

A new text metric is one `register(Metric(...))`: its per-sentence statistics (`statistics`)
and the corpus score of their sum (`from_stats`). Evaluation reports it per split and per
source length, the per-sentence records keep its statistics, and `compare` resamples them:

  metrics.register(metrics.Metric(
      'longer', 'outputs longer than the reference', ' (%)', lower_is_better=True,
      record='longer', stats=('longer', 'sentences'),
      statistics=lambda hyps, refs, ref_lists: [[len(h) > len(r), 1] for h, r in zip(hyps, refs)]))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import sacrebleu


@dataclasses.dataclass(frozen=True)
class Metric:
  """A figure of an evaluation's report (a percentage or a score, per split).

  statistics(hyps, refs, ref_lists) -> one row of numbers per sentence (`stats` names them),
  or None where the metric does not apply to the split (ref_lists: each source's several
  references, or None); from_stats(summed row) -> the corpus score (default: 100 * first /
  second, a percentage of a count). The built-in BLEU, chrF, exact match, WER, PER, token and
  alignment accuracy are computed by scoring.py and records.py themselves (sacrebleu's own
  statistics); a registered metric needs `statistics`."""
  name: str
  label: str                      # in tables ("exact match") and, with unit, on axes
  unit: str = ''                  # ' (%)' for percentages
  lower_is_better: bool = False   # WER, PER
  always: bool = True             # False: reported only where the task has it (G2P, gold)
  record: str = ''                # its per-sentence value's key in records.py ('' = none)
  stats: tuple[str, ...] = ()     # its per-sentence statistics (summed over sentences)
  statistics: Callable[..., Sequence[Sequence[float]] | None] | None = None
  from_stats: Callable[[np.ndarray], float] | None = None

  def score(self, summed) -> float:
    """The corpus score from this metric's statistics summed over sentences."""
    summed = np.asarray(summed, np.float64)
    if self.from_stats is not None:
      return float(self.from_stats(summed))
    return 100.0 * float(summed[0]) / max(float(summed[1]), 1.0)


# report order; the built-in figures (records, compare, report, plots and the training's
# tables read this registry, never a list of their own)
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric('bleu', 'BLEU', record='bleu'),
    Metric('chrf', 'chrF', record='chrf'),
    Metric('exact_match', 'exact match', ' (%)', record='exact', stats=('exact', 'sentences')),
    Metric('wer', 'WER', ' (%)', lower_is_better=True, always=False, record='wer',
           stats=('wrong', 'words')),
    Metric('per', 'PER', ' (%)', lower_is_better=True, always=False, record='per',
           stats=('edits', 'ref_phones')),
    Metric('token_accuracy', 'token accuracy', ' (%)'),
    Metric('alignment_accuracy', 'alignment accuracy', ' (%)', always=False, record='align',
           stats=('hits', 'steps')),
)}
_RESERVED_RECORD_KEYS = ('id', 'src_len', 'hyp')


def register(metric: Metric) -> Metric:
  """Adds a text metric to METRICS (after the built-in ones): reported by every evaluation from
  now on. Refused in one line: a name or record key already taken, no statistics."""
  if metric.name in METRICS:
    raise ValueError(f'metric {metric.name!r} is already registered; registered: '
                     f'{", ".join(METRICS)}')
  if metric.statistics is None or not metric.record or not metric.stats:
    raise ValueError(f'metric {metric.name!r} needs statistics (per-sentence rows), a record '
                     'key and the names of its statistics (stats)')
  taken = {m.record for m in METRICS.values()} | set(_RESERVED_RECORD_KEYS)
  if metric.record in taken:
    raise ValueError(f'metric {metric.name!r}: record key {metric.record!r} is taken; taken: '
                     f'{", ".join(sorted(k for k in taken if k))}')
  METRICS[metric.name] = metric
  return metric


def registered_statistics(hyps: Sequence[str], refs: Sequence[str],
                          ref_lists: Sequence[Sequence[str]] | None
                          ) -> dict[str, np.ndarray]:
  """{name: [sentences, len(stats)] float64} of every metric with `statistics` that applies."""
  out = {}
  for name, m in METRICS.items():
    if m.statistics is None:
      continue
    rows = m.statistics(list(hyps), list(refs), None if ref_lists is None else list(ref_lists))
    if rows is None:
      continue
    rows = np.asarray(rows, np.float64).reshape(len(hyps), -1)
    if rows.shape[1] != len(m.stats):
      raise ValueError(f'metric {name!r}: {rows.shape[1]} statistics per sentence, but stats '
                       f'names {len(m.stats)}: {m.stats}')
    out[name] = rows
  return out


def label(name: str) -> str:
  """A metric's label in tables ('exact match'); an unknown name as itself."""
  return METRICS[name].label if name in METRICS else name


def lower_is_better(name: str) -> bool:
  return name in METRICS and METRICS[name].lower_is_better


def sums(logits, tgt_out, weight) -> dict[str, jax.Array]:
  """logits [B, T, V], tgt_out [B, T], weight [B] -> per-batch sums: loss_sum (plain
  cross-entropy), tokens, correct, seq_correct, sentences.

  Padding (tgt_out == 0) and filler rows (weight == 0) count for nothing.
  """
  mask = (tgt_out != 0) & (weight[:, None] > 0)                               # [B, T]
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)       # [B, T]
  right = (jnp.argmax(logits, -1) == tgt_out) | ~mask
  m = mask.astype(jnp.float32)
  return {
      'loss_sum': jnp.sum(ce * m),
      'tokens': jnp.sum(m),
      'correct': jnp.sum((right & mask).astype(jnp.float32)),
      'seq_correct': jnp.sum(jnp.all(right, axis=1) * (weight > 0)),
      'sentences': jnp.sum((weight > 0).astype(jnp.float32)),
  }


def add(a: Mapping[str, float] | None, b: Mapping[str, float]) -> dict[str, float]:
  b = {k: float(v) for k, v in b.items()}
  return b if a is None else {k: a[k] + b[k] for k in a}


def summarise(s: Mapping[str, float]) -> dict[str, float]:
  """Sums -> loss (per token), perplexity, token accuracy, teacher-forced sequence accuracy."""
  tokens = max(s['tokens'], 1.0)
  loss = s['loss_sum'] / tokens
  return {'loss': loss, 'perplexity': math.exp(min(loss, 50.0)),
          'token_accuracy': 100.0 * s['correct'] / tokens,
          'tf_sequence_accuracy': 100.0 * s['seq_correct'] / max(s['sentences'], 1.0)}


def text_metrics(hyps: Sequence[str], refs: Sequence[str], bleu_tokenize: str = '13a'):
  """Exact match (%), corpus BLEU and chrF (sacrebleu) of detokenized outputs."""
  if len(hyps) != len(refs):
    raise ValueError(f'{len(hyps)} outputs for {len(refs)} references')
  bleu_metric = sacrebleu.BLEU(tokenize=bleu_tokenize)
  bleu = bleu_metric.corpus_score(list(hyps), [list(refs)])
  chrf = sacrebleu.corpus_chrf(list(hyps), [list(refs)])
  exact = 100.0 * float(np.mean([h == r for h, r in zip(hyps, refs)])) if refs else 0.0
  return {'exact_match': exact, 'bleu': bleu.score, 'chrf': chrf.score,
          'bleu_signature': str(bleu_metric.get_signature())}


def edit_distance(a: Sequence, b: Sequence) -> int:
  """Levenshtein distance between two token sequences (unit insert/delete/substitute)."""
  prev = list(range(len(b) + 1))
  for i, x in enumerate(a, 1):
    cur = [i]
    for j, y in enumerate(b, 1):
      cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
    prev = cur
  return prev[-1]


def g2p_sums(hyp: str, refs: Sequence[str]) -> tuple[int, int, int]:
  """One word -> (wrong 0/1, phone edits to the closest reference, that reference's length).

  Phones are whitespace-separated tokens. The word is right when the output equals any
  reference; the closest reference is the first (in dictionary order) of least edit distance.
  """
  if not refs:
    raise ValueError('a word needs at least one reference pronunciation')
  h = hyp.split()
  dists = [(edit_distance(h, r.split()), len(r.split())) for r in refs]
  best = min(range(len(refs)), key=lambda i: dists[i][0])
  return int(dists[best][0] != 0), dists[best][0], dists[best][1]


def g2p_metrics(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> dict[str, float]:
  """Word and phone error rates (%) with several references per word (Yao & Zweig 2015):
  WER = words whose output equals none of their references / words; PER = phone edits to each
  word's closest reference, summed, / the summed lengths of those references."""
  if len(hyps) != len(refs):
    raise ValueError(f'{len(hyps)} outputs for {len(refs)} reference lists')
  wrong = edits = length = 0
  for h, r in zip(hyps, refs):
    w, e, n = g2p_sums(h, r)
    wrong, edits, length = wrong + w, edits + e, length + n
  return {'wer': 100.0 * wrong / max(len(hyps), 1), 'per': 100.0 * edits / max(length, 1)}
