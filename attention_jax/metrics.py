"""Metrics as sums and counts (so they add up across batches and devices), the text metrics
of decoded outputs (exact match, sacrebleu BLEU and chrF), and METRICS: the one list of the
figures that evaluations report, with what records, comparisons, reports and plots need to
know of each (its label, its direction, its per-sentence record)."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import sacrebleu


@dataclasses.dataclass(frozen=True)
class Metric:
  """A figure of an evaluation's report (a percentage or a score, per split)."""
  name: str
  label: str                      # in tables ("exact match") and, with unit, on axes
  unit: str = ''                  # ' (%)' for percentages
  lower_is_better: bool = False   # WER, PER
  always: bool = True             # False: reported only where the task has it (G2P, gold)
  record: str = ''                # its per-sentence value's key in records.py ('' = none)
  stats: tuple[str, ...] = ()     # its per-sentence statistics (summed over sentences)


# report order; registered here and nowhere else (records, compare, report, plots and the
# training's tables read this)
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


def token_losses(logits: jax.Array, tgt_out: jax.Array, label_smoothing: float = 0.0):
  """logits [B, T, V] float32, tgt_out [B, T] -> (training loss [B, T], plain CE [B, T])."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)
  if label_smoothing == 0.0:
    return ce, ce
  v = logits.shape[-1]
  soft = optax.smooth_labels(jax.nn.one_hot(tgt_out, v), label_smoothing)
  return optax.softmax_cross_entropy(logits, soft), ce


def sums(logits, tgt_out, weight, label_smoothing: float = 0.0) -> dict[str, jax.Array]:
  """Per-batch sums: train_loss_sum, loss_sum, tokens, correct, seq_correct, sentences.

  Padding (tgt_out == 0) and filler rows (weight == 0) count for nothing.
  """
  mask = (tgt_out != 0) & (weight[:, None] > 0)                               # [B, T]
  train_loss, ce = token_losses(logits, tgt_out, label_smoothing)
  right = (jnp.argmax(logits, -1) == tgt_out) | ~mask
  m = mask.astype(jnp.float32)
  return {
      'train_loss_sum': jnp.sum(train_loss * m),
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
