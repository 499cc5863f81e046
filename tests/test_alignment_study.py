"""The alignment study's table (analysis/alignment_study.py) on hand-made results: means and
t intervals over seeds, the best unsupervised map (guided variants are not unsupervised),
its gap to the best aligner, and every variant against additive by Welch's test."""

import json

import numpy as np
import pytest
import scipy.stats

from attention_jax.analysis import alignment_study, compare


def _group(name, bleu, maps):
  """A variant whose seed k has test BLEU bleu[k] and, per map, AER maps[map][k]."""
  runs = []
  for k, b in enumerate(bleu):
    wa = {m: {'aer': v[k], 'precision': 100 - v[k], 'recall': 100 - v[k] / 2}
          for m, v in maps.items()}
    runs.append(compare.Evaluated(f'/runs/{name}/seed_{k}', {'results': {'test': {
        'bleu': b, 'chrf': 2 * b, 'word_alignment': wa}}}, {}))
  return compare.Group(name, runs)


def test_the_table_holds_intervals_the_best_map_its_gap_and_each_variant_against_additive():
  groups = [_group('additive', [10, 11, 12], {'attention': [50, 52, 54], 'gradient': [60, 61, 62]}),
            _group('guided', [9, 10, 11], {'attention': [30, 31, 32]}),
            _group('none', [5, 5.5, 6], {'gradient': [55, 56, 57]})]
  aligners = {'eflomal': {'seeds': [{'aer': 40.0, 'precision': 60, 'recall': 70},
                                    {'aer': 41.0, 'precision': 59, 'recall': 69},
                                    {'aer': 42.0, 'precision': 58, 'recall': 68}]},
              'ibm1': {'aer': 70.0, 'precision': 30, 'recall': 40}}
  s = alignment_study.summarise(groups, aligners)
  add = s['variants'][0]
  lo, hi = scipy.stats.t.interval(0.95, 2, loc=52, scale=2 / np.sqrt(3))
  assert add['maps']['attention']['aer']['mean'] == pytest.approx(52)
  assert (add['maps']['attention']['aer']['lo'], add['maps']['attention']['aer']['hi']) == \
      pytest.approx((lo, hi))
  # the guided variant's 31 is lower, but it saw the gold: the best unsupervised is additive's
  [best] = s['best']                # every map on the same (unknown: 0) sentences
  assert (best['variant'], best['map']) == ('additive', 'attention')
  assert s['best_aligner']['aligner'] == 'eflomal'
  welch = scipy.stats.ttest_ind([50, 52, 54], [40, 41, 42], equal_var=False)
  assert best['gap']['aer']['diff'] == pytest.approx(11) and best['gap']['aer']['p'] == \
      pytest.approx(welch.pvalue)
  # every variant against additive: its attention, its best map, BLEU and chrF, by Welch
  rows = {(r['variant'], r['figure']): r for r in s['against_additive']}
  assert rows[('guided', 'attention')]['diff'] == pytest.approx(-21)
  assert rows[('guided', 'attention')]['p'] == pytest.approx(
      scipy.stats.ttest_ind([30, 31, 32], [50, 52, 54], equal_var=False).pvalue)
  assert rows[('guided', 'bleu')]['diff'] == pytest.approx(-1)
  assert rows[('guided', 'chrf')]['diff'] == pytest.approx(-2)
  # `none` has no attention: its best map (gradient, 56) against additive's (attention, 52)
  assert ('none', 'attention') not in rows
  assert rows[('none', 'best map')]['maps'] == ('gradient', 'attention')
  assert rows[('none', 'best map')]['diff'] == pytest.approx(4)
  # guided's best map is its attention, as additive's: that row would repeat the attention's
  assert ('guided', 'best map') not in rows
  assert [r['variant'] for r in s['against_additive']].count('additive') == 0
  md = alignment_study.markdown(s)
  assert '| additive | attention | 3 | 52.00 [' in md
  assert '| aligner: eflomal | - | 3 | 41.00 [' in md and '| aligner: ibm1 | - | 1 | 70.00 |' in md
  assert 'Best unsupervised neural map on 0 sentences: additive / attention' in md
  assert '| none | AER (gradient, attention) | +4.00 | [' in md
  assert '| guided | bleu | -1.00 | [' in md


def test_aligner_rows_keep_each_aligners_best_with_its_runs():
  rows = [{'aligner': 'eflomal', 'setting': 'prefix 0/0', 'direction': d, 'aer': a,
           'precision': 70, 'recall': 60, 'per_run': [{'aer': a - 1, 'precision': 70,
                                                       'recall': 60}, {'aer': a + 1,
                                                                       'precision': 70,
                                                                       'recall': 60}]}
          for d, a in (('forward', 37.5), ('union', 35.4))]
  rows.append({'aligner': 'ibm1', 'setting': 'iterations 5', 'direction': 'forward',
               'aer': 55.1, 'precision': 48, 'recall': 42})
  got = alignment_study.aligners_of(rows)
  assert sorted(got) == ['eflomal prefix 0/0 union', 'ibm1 iterations 5 forward']
  assert [r['aer'] for r in got['eflomal prefix 0/0 union']['seeds']] == [34.4, 36.4]
  assert len(alignment_study.aligners_of(rows, best_only=False)) == 3


def test_maps_a_later_evaluate_added_join_the_table_and_meet_the_aligner_on_their_sentences(
    tmp_path):
  """`evaluate --word_alignment_methods` writes eval_test[_beam..].json beside results.json: its maps
  join the run's row, each with the sentences it was measured on. The best unsupervised map
  is found per number of sentences, and each is compared with the best aligner's figures on
  the same sentences (the aligners bench's --subsets), never with its figures on others."""
  runs = []
  for k in range(3):
    wd = tmp_path / f'seed_{k}'
    wd.mkdir()
    (wd / 'eval_test_beam1_a0.6.json').write_text(json.dumps({
        'word_alignment_sentences': 100,
        'word_alignment': {'attention': {'aer': 0.0, 'precision': 0, 'recall': 0},
                           'erasure': {'aer': 40.0 + k, 'precision': 60, 'recall': 59}}}))
    runs.append(compare.Evaluated(str(wd), {'results': {'test': {
        'bleu': 10, 'chrf': 20, 'word_alignment_sentences': 504,
        'word_alignment': {'attention': {'aer': 60.0 + k, 'precision': 40, 'recall': 39}}}}},
        {}))
  got = alignment_study.word_alignments(runs[1])
  assert got['attention'] == {'aer': 61.0, 'precision': 40, 'recall': 39, 'sentences': 504}
  assert got['erasure']['aer'] == 41.0 and got['erasure']['sentences'] == 100
  row = {'aligner': 'eflomal', 'setting': 's', 'direction': 'union', 'aer': 30.0,
         'precision': 70, 'recall': 70, 'sentences': 504,
         'per_run': [{'aer': a, 'precision': 70, 'recall': 70} for a in (29.0, 30.0, 31.0)],
         'subsets': {'101': {'aer': 20.0, 'precision': 80, 'recall': 80, 'sentences': 100,
                             'per_run': [{'aer': a, 'precision': 80, 'recall': 80}
                                         for a in (19.0, 20.0, 21.0)]}}}
  s = alignment_study.summarise([compare.Group('additive', runs)],
                                alignment_study.aligners_of([row]))
  maps = s['variants'][0]['maps']
  assert maps['erasure']['aer']['mean'] == pytest.approx(41) and maps['erasure']['sentences'] == 100
  by_n = {b['sentences']: b for b in s['best']}
  assert (by_n[504]['map'], by_n[100]['map']) == ('attention', 'erasure')
  assert by_n[504]['gap']['aer']['diff'] == pytest.approx(61 - 30)   # against all 504
  assert by_n[100]['gap']['aer']['diff'] == pytest.approx(41 - 20)   # against the same 100
  md = alignment_study.markdown(s)
  assert '| additive | erasure | 3 | 41.00 [' in md and '| aligner: eflomal s union | - | 3 | 20.00 [' in md
  assert 'on 100 sentences: additive / erasure' in md
  del row['subsets']['101']
  row['subsets']['64'] = {**row['subsets'].get('64', {}), 'aer': 1.0, 'precision': 1,
                          'recall': 1, 'sentences': 63, 'per_run': []}
  md = alignment_study.markdown(alignment_study.summarise([compare.Group('additive', runs)],
                                                         alignment_study.aligners_of([row])))
  assert ' | 63 |' not in md    # an aligner subset no map was measured on is not shown


def test_a_map_on_sentences_the_aligner_was_not_scored_on_gets_no_gap():
  g = compare.Group('additive', [compare.Evaluated(f'/nowhere/{k}', {'results': {'test': {
      'bleu': 1, 'chrf': 2, 'word_alignment_sentences': 64,
      'word_alignment': {'gradient': {'aer': 50.0 + k, 'precision': 1, 'recall': 1}}}}}, {})
      for k in range(2)])
  aligners = {'eflomal': {'aer': 30.0, 'precision': 1, 'recall': 1, 'sentences': 504}}
  [best] = alignment_study.summarise([g], aligners)['best']
  assert best['map'] == 'gradient' and 'gap' not in best
