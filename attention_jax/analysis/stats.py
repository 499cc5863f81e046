"""Statistics for comparing runs: intervals over seeds, tests over seeds and over sentences,
and the correction for testing many variants at once.

- Over seeds (is the difference larger than what another seed would give?): t intervals
  and Welch's t-test (scipy.stats). With 3 seeds per system a permutation test cannot go below
  p = 0.1 (20 splits of 6 runs), so the t-test, which assumes roughly normal seed-to-seed
  variation, is the usable one.
- Over sentences (would the difference hold on other test sentences drawn like these?):
  paired approximate randomisation (Noreen 1989; Riezler & Maxwell 2005, who found it less
  prone to false positives than the paired bootstrap of Koehn 2004; the default test of
  `sacrebleu.significance`), run by scipy.stats.permutation_test on the per-sentence
  statistics of attention_jax.evaluation.records, so every metric that is a function of summed
  statistics (BLEU, chrF, exact match, WER, PER) gets the same test. A system with several
  seeds is the mean of its seeds' statistics per sentence. sacrebleu 2.6's own tests count
  only trials strictly more extreme than the observed difference, so two identical systems
  get p = 0.0001 and a difference of a few sentences in exact match is called significant
  whatever its size; scipy counts ties, and on BLEU of different systems both agree within
  resampling noise (tests/test_stats.py). The interval of the difference over sentences is
  scipy.stats.bootstrap's percentile interval over resampled sentences (paired).
- Many comparisons: Holm's step-down correction (Holm 1979), which controls the chance of
  any false "significant" in the family without assuming independence.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import scipy.stats

from attention_jax.evaluation import records as records_lib

CONFIDENCE = 0.95


@dataclasses.dataclass
class Interval:
  """Mean, sample standard deviation and t interval of values over seeds (nan where n < 2)."""
  n: int
  mean: float
  std: float
  lo: float
  hi: float


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
  """The Student-t interval of the mean: mean +- t_{n-1} s / sqrt(n)."""
  v = np.asarray(values, np.float64)
  n = len(v)
  if n == 0:
    return Interval(0, float('nan'), float('nan'), float('nan'), float('nan'))
  mean = float(v.mean())
  if n < 2:
    return Interval(1, mean, float('nan'), float('nan'), float('nan'))
  std = float(v.std(ddof=1))
  if std == 0.0:
    return Interval(n, mean, 0.0, mean, mean)
  lo, hi = scipy.stats.t.interval(confidence, n - 1, loc=mean, scale=std / np.sqrt(n))
  return Interval(n, mean, std, float(lo), float(hi))


@dataclasses.dataclass
class SeedTest:
  """a - b over seeds: the difference of means, its Welch interval and two-sided p."""
  diff: float
  lo: float
  hi: float
  p: float


def welch(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> SeedTest:
  """Welch's t-test (unequal variances) of mean(a) - mean(b); nan p and interval when either
  side has fewer than 2 seeds. Two systems without any seed-to-seed variation get p = 1 when
  their means are equal and p = 0 when they differ."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  diff = float(a.mean() - b.mean())
  if len(a) < 2 or len(b) < 2:
    return SeedTest(diff, float('nan'), float('nan'), float('nan'))
  if a.std() == 0.0 and b.std() == 0.0:
    return SeedTest(diff, diff, diff, 1.0 if diff == 0.0 else 0.0)
  res = scipy.stats.ttest_ind(a, b, equal_var=False)
  ci = res.confidence_interval(confidence)
  return SeedTest(diff, float(ci.low), float(ci.high), float(res.pvalue))


def paired(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> SeedTest:
  """The paired t-test of mean(a - b) (a[i], b[i] from the same seed's run: two maps of one
  model, or one map within and beyond the training lengths); nan with fewer than 2 pairs, and
  as welch() when the differences do not vary."""
  d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  diff = float(d.mean()) if len(d) else float('nan')
  if len(d) < 2:
    return SeedTest(diff, float('nan'), float('nan'), float('nan'))
  if d.std() == 0.0:
    return SeedTest(diff, diff, diff, 1.0 if diff == 0.0 else 0.0)
  res = scipy.stats.ttest_1samp(d, 0.0)
  ci = res.confidence_interval(confidence)
  return SeedTest(diff, float(ci.low), float(ci.high), float(res.pvalue))


def _scores(stats: np.ndarray, idx: np.ndarray, metric: str, tokenize: str) -> np.ndarray:
  """stats [N, k], idx [..., n] sentence rows -> the corpus score of each index row [...]."""
  summed = stats[idx].sum(-2)                                          # [..., k]
  flat = summed.reshape(-1, summed.shape[-1])
  return np.array([records_lib.score(metric, x, tokenize) for x in flat]).reshape(
      summed.shape[:-1])


def corpus_score(stats: np.ndarray, metric: str, bleu_tokenize: str = '13a') -> float:
  """stats [sentences, k] -> the corpus score."""
  return records_lib.score(metric, stats.sum(0), bleu_tokenize)


def sentence_test(stats_a: np.ndarray, stats_b: np.ndarray, metric: str, *,
                  bleu_tokenize: str = '13a', trials: int = 10_000, seed: int = 0) -> float:
  """Two-sided p of score(a) != score(b) by paired approximate randomisation over
  sentences: each trial swaps the two systems' outputs of every sentence with probability
  1/2 (scipy.stats.permutation_test, permutation_type='samples'); p = (trials at least as
  extreme + 1) / (trials + 1). stats_*: [sentences, k] statistics of the same sentences in
  the same order."""
  if stats_a.shape != stats_b.shape:
    raise ValueError(f'paired statistics differ in shape: {stats_a.shape} vs {stats_b.shape}')
  n = len(stats_a)
  both = np.concatenate([stats_a, stats_b])                            # [2n, k]

  def diff(x, y, axis=-1):   # x, y [..., n]: rows of `both` that play system a and b
    return _scores(both, x, metric, bleu_tokenize) - _scores(both, y, metric, bleu_tokenize)
  res = scipy.stats.permutation_test((np.arange(n), np.arange(n, 2 * n)), diff,
                                     permutation_type='samples', vectorized=True,
                                     n_resamples=trials, batch=200, alternative='two-sided',
                                     rng=np.random.default_rng(seed))
  return float(res.pvalue)


def sentence_interval(stats_a: np.ndarray, stats_b: np.ndarray, metric: str, *,
                      bleu_tokenize: str = '13a', resamples: int = 1000, seed: int = 0,
                      confidence: float = CONFIDENCE) -> tuple[float, float]:
  """Percentile bootstrap interval (scipy.stats.bootstrap) of score(a) - score(b) over
  resampled sentences (the same resample for both: paired)."""
  def diff(idx, axis=-1):   # idx [..., sentences] -> [...]
    return (_scores(stats_a, idx, metric, bleu_tokenize)
            - _scores(stats_b, idx, metric, bleu_tokenize))
  res = scipy.stats.bootstrap((np.arange(len(stats_a)),), diff, vectorized=True,
                              n_resamples=resamples, batch=100, method='percentile',
                              confidence_level=confidence, rng=np.random.default_rng(seed))
  return float(res.confidence_interval.low), float(res.confidence_interval.high)


def holm(pvalues: Sequence[float]) -> list[float]:
  """Holm-adjusted p-values (nan stays nan): the i-th smallest of m is multiplied by
  m - i + 1, then made monotone and capped at 1."""
  p = np.asarray(pvalues, np.float64)
  ok = np.flatnonzero(~np.isnan(p))
  out = np.full(len(p), np.nan)
  order = ok[np.argsort(p[ok], kind='stable')]
  m, running = len(order), 0.0
  for i, j in enumerate(order):
    running = max(running, min(1.0, (m - i) * p[j]))
    out[j] = running
  return out.tolist()
