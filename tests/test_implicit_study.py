"""The implicit-attention study's report (implicit_study.py): figures over seeds with t
intervals, the paired tests over seeds against SciPy, Holm within each question, and the
tables that mark what is significant."""

import numpy as np
import pytest
import scipy.stats

from attention_jax.analysis import compare, stats
from attention_jax.analysis import implicit_study


def test_paired_t_test_against_scipy():
  a, b = [70.0, 74.0, 69.0], [60.0, 61.0, 65.0]
  t = stats.paired(a, b)
  res = scipy.stats.ttest_rel(a, b)
  ci = res.confidence_interval()
  assert (t.diff, t.p) == (pytest.approx(np.mean(np.subtract(a, b))), pytest.approx(res.pvalue))
  assert (t.lo, t.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
  assert stats.paired([1.0, 2.0], [0.0, 1.0]).p == 0.0          # a constant difference
  assert np.isnan(stats.paired([1.0], [0.0]).p)


def _run(bands: dict) -> compare.Evaluated:
  """A run whose test results hold an attribution report: bands {band: {map: (accuracy,
  aopc)}}, 'random' among the maps."""
  out = []
  for band, maps in bands.items():
    methods = {m: {'alignment_accuracy': acc, 'gold_mass': acc / 2, 'steps': 100,
                   **({} if aopc is None else {'aopc': aopc})}   # images: no AOPC
               for m, (acc, aopc) in maps.items() if m != 'random'}
    acc, aopc = maps['random']
    out.append({'band': band, 'lo': 0, 'hi': None, 'sentences': 10, 'methods': methods,
                'random': {'alignment_accuracy': acc, 'gold_mass': acc, 'steps': 100},
                'aopc_random': aopc})
  return compare.Evaluated('w', {'results': {'test': {'attribution': {'bands': out}}}}, {})


def test_study_figures_tests_and_tables():
  explicit, gradient = [80.0, 84.0, 82.0], [40.0, 43.0, 41.0]
  additive = compare.Group('additive', [
      _run({'all': {'attention': (e, 3.0 + i), 'gradient': (g, 2.0 + 0.1 * i),
                    'random': (10.0, 1.0)},
            'within': {'attention': (e + 5, 3.0), 'gradient': (g, 2.0), 'random': (12.0, 1.0)},
            'beyond': {'attention': (e - 20, 3.0), 'gradient': (g - 1, 2.0),
                       'random': (8.0, 1.0)}})
      for i, (e, g) in enumerate(zip(explicit, gradient))])
  none = compare.Group('none', [
      _run({'all': {'gradient': (g, 1.0), 'random': (10.0 + i, 1.0)}})
      for i, g in enumerate([10.5, 11.0, 12.5])])   # no better than random
  s = implicit_study.study([additive, none])
  table = {(r['variant'], r['band'], r['map'], r['figure']): r for r in s['table']}
  iv = stats.t_interval(explicit)
  row = table[('additive', 'all', 'attention', 'alignment_accuracy')]
  assert (row['mean'], row['ci_lo'], row['ci_hi']) == (iv.mean, iv.lo, iv.hi)
  assert ('none', 'all', 'attention', 'alignment_accuracy') not in table
  tests = {(t['question'], t['variant'], t['band'], t['a'], t['b']): t for t in s['tests']}
  within = np.add(explicit, 5)
  aligner = tests[('aligner', 'additive', 'within', 'attention', 'gradient')]
  assert aligner['p'] == pytest.approx(scipy.stats.ttest_rel(within, gradient).pvalue)
  assert aligner['diff'] == pytest.approx(np.mean(np.subtract(within, gradient)))
  assert aligner['ci_excludes_0'] == (aligner['ci_lo'] > 0)
  assert ('aligner', 'additive', 'all', 'attention', 'gradient') not in tests   # not a cell
  beyond = tests[('beyond', 'additive', 'beyond', 'attention', 'attention')]
  assert beyond['diff'] == pytest.approx(-25.0)                     # beyond - within
  implicit = tests[('implicit', 'none', 'all', 'gradient', 'random')]
  assert not implicit['significant'] and not any(q == 'implicit' and v == 'additive'
                                                 for q, v, *_ in tests)
  family = [t for t in s['tests'] if t['question'] == 'aligner']
  assert [t['p_holm'] for t in family] == pytest.approx(stats.holm([t['p'] for t in family]))
  assert aligner['significant'] == (aligner['p_holm'] < 0.05)
  pointing = _run({'all': {'attention': (40.0, None), 'gradient': (30.0, None),
                           'random': (8.0, 1.0)}})   # an image run: one band, no AOPC
  pointing.results['results']['test']['attribution']['bands'][0]['aopc_random'] = None
  s_images = implicit_study.study([compare.Group('soft', [pointing, pointing])])
  assert {r['figure'] for r in s_images['table']} >= {'alignment_accuracy'} and not any(
      r['figure'] == 'aopc' for r in s_images['table'])
  assert [t['band'] for t in s_images['tests'] if t['question'] == 'aligner'] == ['all']
  text_images = implicit_study.markdown(s_images)
  assert 'within source lengths' not in text_images and 'AOPC (nats)' not in text_images
  text = implicit_study.markdown(s)
  assert '## Alignment accuracy (%), beyond source lengths' in text
  assert f'| additive | {iv.mean:.1f} [{iv.lo:.1f}, {iv.hi:.1f}] |' in text
  assert '**' not in next(line for line in text.splitlines() if line.startswith('| none |')
                          and 'p ' in line)
