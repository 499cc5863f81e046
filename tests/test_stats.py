"""The statistics of comparisons, against known answers: textbook intervals, Holm's
correction, identical systems (p = 1, and p uniform across same-quality pairs), a system
better on every sentence (p < 0.01), agreement with sacrebleu.significance on BLEU, and
per-sentence records that reproduce the corpus metrics exactly."""

import numpy as np
import pytest
import sacrebleu
from sacrebleu import significance

from attention_jax.analysis import stats
from attention_jax.evaluation import metrics, records

WORDS = 'the a cat dog sat on mat red blue green house tree'.split()


def corpus(n, noise, seed):
  """n reference sentences and a system that replaces each word with prob `noise`."""
  rng = np.random.default_rng(seed)
  refs = [' '.join(rng.choice(WORDS, 8)) for _ in range(n)]
  rng = np.random.default_rng(seed + 1000)
  hyps = [' '.join(w if rng.random() > noise else rng.choice(WORDS) for w in r.split())
          for r in refs]
  return refs, hyps


def recs(hyps, refs, multi=None):
  rows = [{'id': i, 'src': r, 'src_len': len(r.split()), 'hyp': h, 'ref': r,
           'refs': multi[i] if multi else None, 'align': None}
          for i, (h, r) in enumerate(zip(hyps, refs))]
  return records.build('test', rows, '13a')


def test_t_interval_is_the_textbook_one():
  # mean 2.5, s = 1.2910, t(0.975, 3) = 3.18245: 2.5 +- 3.18245 * 1.2910 / 2
  i = stats.t_interval([1, 2, 3, 4])
  assert (i.n, i.mean) == (4, 2.5)
  assert i.std == pytest.approx(1.2909944, abs=1e-6)
  assert (i.lo, i.hi) == (pytest.approx(0.4457397, abs=1e-6), pytest.approx(4.5542603, abs=1e-6))
  one = stats.t_interval([7.0])
  assert one.mean == 7.0 and np.isnan(one.lo) and np.isnan(one.std)


def test_welch_matches_its_formula():
  a, b = np.array([31.2, 33.0, 30.1]), np.array([28.0, 29.5, 27.1, 28.8])
  va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))   # Satterthwaite
  t = (a.mean() - b.mean()) / np.sqrt(va + vb)
  import scipy.stats
  p = 2 * scipy.stats.t.sf(abs(t), df)
  half = scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
  r = stats.welch(a, b)
  assert r.diff == pytest.approx(a.mean() - b.mean())
  assert r.p == pytest.approx(p, rel=1e-9)
  assert (r.lo, r.hi) == (pytest.approx(r.diff - half), pytest.approx(r.diff + half))
  assert np.isnan(stats.welch([1.0], [2.0, 3.0]).p)           # one seed: no test
  assert stats.welch([5.0, 5.0], [5.0, 5.0]).p == 1.0          # no variation, no difference


def test_holm_is_the_step_down_correction():
  # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
  assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  out = stats.holm([0.5, float('nan'), 0.9])
  assert out[0] == pytest.approx(1.0) and np.isnan(out[1]) and out[2] == pytest.approx(1.0)


def test_records_reproduce_the_corpus_metrics():
  refs, hyps = corpus(60, 0.3, 1)
  multi = [[r, r.replace('cat', 'dog')] for r in refs]
  header, rs = recs(hyps, refs, multi)
  text = metrics.text_metrics(hyps, refs, '13a')
  g2p = metrics.g2p_metrics(hyps, multi)
  for m, want in (('bleu', text['bleu']), ('chrf', text['chrf']),
                  ('exact_match', text['exact_match']), ('wer', g2p['wer']), ('per', g2p['per'])):
    assert stats.corpus_score(records.stats(rs, m), m) == pytest.approx(want, abs=1e-9), m
  assert header['sentences'] == 60 and records.metrics_of(rs) == [
      'bleu', 'chrf', 'exact_match', 'wer', 'per']
  # the fingerprint is the split's: other hypotheses, same fingerprint; other refs, another
  assert recs(refs, refs, multi)[0]['fingerprint'] == header['fingerprint']
  assert recs(hyps, hyps, multi)[0]['fingerprint'] != header['fingerprint']


def test_identical_systems_are_not_different():
  refs, hyps = corpus(200, 0.3, 2)
  _, rs = recs(hyps, refs)
  for m in ('bleu', 'exact_match'):
    s = records.stats(rs, m)
    assert stats.sentence_test(s, s.copy(), m, trials=500) == 1.0
    lo, hi = stats.sentence_interval(s, s.copy(), m, resamples=200)
    assert lo == hi == 0.0


def test_same_quality_systems_give_uniform_p_values():
  """40 pairs of systems that are right on each sentence with the same probability: the
  p-values spread over (0, 1], and about 5% (not more than 15%) fall below 0.05."""
  rng = np.random.default_rng(0)
  ps = []
  for _ in range(40):
    a = np.stack([rng.random(300) < 0.6, np.ones(300)], 1).astype(float)
    b = np.stack([rng.random(300) < 0.6, np.ones(300)], 1).astype(float)
    ps.append(stats.sentence_test(a, b, 'exact_match', trials=300))
  ps = np.array(ps)
  assert np.mean(ps < 0.05) <= 0.15
  assert 0.3 < ps.mean() < 0.7 and ps.min() < 0.3 and ps.max() > 0.7


def test_a_system_better_on_every_sentence_is_significant():
  refs, worse = corpus(100, 0.3, 3)
  _, good = recs(refs, refs)                     # perfect on every sentence
  _, bad = recs(worse, refs)
  for m in ('bleu', 'chrf', 'exact_match'):
    a, b = records.stats(good, m), records.stats(bad, m)
    assert stats.sentence_test(a, b, m) < 0.01, m
    lo, hi = stats.sentence_interval(a, b, m, resamples=300)
    assert 0 < lo <= hi, m


def test_bleu_significance_agrees_with_sacrebleu():
  """Approximate randomisation on stored statistics gives sacrebleu.significance's p-value
  on the same outputs (10,000 trials each: equal within resampling noise)."""
  refs, a = corpus(300, 0.30, 4)
  _, b = corpus(300, 0.34, 4)
  _, scores = significance.PairedTest([('b', b), ('a', a)], {'BLEU': sacrebleu.BLEU()},
                                      [refs], test_type='ar')()
  theirs = scores['BLEU'][1]
  sa, sb = records.stats(recs(a, refs)[1], 'bleu'), records.stats(recs(b, refs)[1], 'bleu')
  assert stats.corpus_score(sa, 'bleu') == pytest.approx(theirs.score, abs=1e-9)
  ours = stats.sentence_test(sa, sb, 'bleu')
  assert 0.005 < theirs.p_value < 0.5                  # a case where the answer is not obvious
  assert ours == pytest.approx(theirs.p_value, abs=0.015)


def test_sacrebleu_counts_ties_as_not_extreme():
  """Why the sentence test is scipy's: sacrebleu 2.6 calls two identical systems different
  (p = 1/10,001). If this fails, sacrebleu has changed: revisit attention_jax/analysis/stats.py."""
  refs, a = corpus(50, 0.3, 5)
  _, scores = significance.PairedTest([('b', a), ('a', list(a))], {'BLEU': sacrebleu.BLEU()},
                                      [refs], test_type='ar')()
  assert scores['BLEU'][1].p_value < 0.001
