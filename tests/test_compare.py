"""Comparing runs and seed groups: groups from directories, the baseline, Holm-adjusted
tests with a plain sentence each, refusing runs evaluated on other sentences, and the sweep
report's files (summary, comparisons, runs, figures with intervals)."""

import json
import os

import numpy as np
import pytest

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import compare, report
from attention_jax.evaluation import metrics, records

import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = 'the a cat dog sat on mat red blue green house tree'.split()


def references(n=120, seed=0):
  rng = np.random.default_rng(seed)
  return [' '.join(rng.choice(WORDS, 1 + i % 9)) for i in range(n)]


def make_run(workdir, refs, noise, seed, num_test=None):
  """A finished run whose outputs replace each word with probability `noise`."""
  rng = np.random.default_rng(seed)
  hyps = [' '.join(w if rng.random() > noise else rng.choice(WORDS) for w in r.split())
          for r in refs]
  rows = [{'id': i, 'src': r, 'src_len': len(r.split()), 'hyp': h, 'ref': r, 'refs': None,
           'align': None} for i, (h, r) in enumerate(zip(hyps, refs))]
  header, recs = records.build('test', rows, '13a')
  m = metrics.text_metrics(hyps, refs)
  by_len = []
  for lo, hi in ((0, 3), (3, 6), (6, 9)):
    sel = [(h, r) for h, r in zip(hyps, refs) if lo < len(r.split()) <= hi]
    b = metrics.text_metrics([x for x, _ in sel], [y for _, y in sel])
    by_len.append({'bucket': f'{lo + 1}-{hi}', 'lo': lo, 'hi': hi, 'sentences': len(sel), **b})
  os.makedirs(workdir)
  with open(os.path.join(workdir, 'results.json'), 'w') as f:
    json.dump({'results': {'test': {**m, 'sentences': len(refs), 'by_length': by_len}},
               'train_steps_per_s': 10.0}, f)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump({'seed': seed, 'data': {'name': 'toy', 'num_test': num_test or len(refs),
                                      'data_dir': f'/somewhere/{seed}'}}, f)
  records.write(workdir_lib.Run(workdir).sentences_path('test'), header, recs)
  return workdir


@pytest.fixture
def sweep_dir(tmp_path):
  refs = references()
  for name, noise in (('good', 0.05), ('same', 0.06), ('bad', 0.5)):
    for k in (1, 2, 3):
      make_run(str(tmp_path / 'sweep' / name / f'seed_{k}'), refs, noise, seed=10 * k + len(name))
  return str(tmp_path / 'sweep')


def test_groups_baseline_and_significance(sweep_dir):
  groups = compare.sweep_groups(sweep_dir)
  assert [(g.name, len(g.runs)) for g in groups] == [('bad', 3), ('good', 3), ('same', 3)]
  c = compare.compare(groups, 'test', ['bleu', 'exact_match'], trials=2000)
  assert c['baseline'] == 'good' and not c['baseline_named']
  rows = {(r['variant'], r['metric']): r for r in c['comparisons']}
  bad = rows[('bad', 'bleu')]
  assert bad['significant'] and bad['diff'] < 0 and bad['p_seeds_holm'] < 0.05
  assert bad['p_sentences'] < 0.01 and bad['ci_seeds_hi'] < 0 and bad['ci_sentences_hi'] < 0
  assert bad['sentence'].startswith('good is better than bad on test BLEU')
  # its figures in the order of its words: good's mean first, good minus bad (they were
  # bad's first: 'good is better than bad: 0.83 vs 1.11')
  lo, hi = -bad['ci_seeds_hi'], -bad['ci_seeds_lo']
  assert (f": {bad['baseline_mean']:.2f} vs {bad['variant_mean']:.2f} ({-bad['diff']:+.2f}; "
          f'95% CI {lo:+.2f} to {hi:+.2f} over seeds); significant') in bad['sentence'], (
              bad['sentence'])
  same = rows[('same', 'bleu')]
  assert not same['significant'] and 'do not differ significantly' in same['sentence']
  for r in c['comparisons']:   # Holm never lowers a p-value
    assert r['p_seeds_holm'] >= r['p_seeds'] and r['p_sentences_holm'] >= r['p_sentences']
  summary = {s['variant']: s for s in c['summary']}
  good = [g for g in groups if g.name == 'good'][0]
  v = [r.split('test')['bleu'] for r in good.runs]
  assert summary['good']['bleu_mean'] == pytest.approx(np.mean(v))
  assert summary['good']['bleu_ci_lo'] < np.mean(v) < summary['good']['bleu_ci_hi']
  assert [b['seeds'] for b in c['by_length']['good']] == [3, 3, 3]
  named = compare.compare(groups, 'test', ['bleu'], baseline='same', trials=500)
  assert named['baseline'] == 'same' and named['baseline_named']
  with pytest.raises(ValueError, match="baseline 'nope' is not among the compared: bad, good"):
    compare.compare(groups, 'test', ['bleu'], baseline='nope')
  with pytest.raises(ValueError, match="unknown metric 'bleux'; valid: bleu, chrf"):
    compare.compare(groups, 'test', ['bleux'])


def test_wall_time_is_the_sum_of_the_known_ones_and_unknown_shows_as_a_dash(sweep_dir):
  """Runs a sweep did not run have no wall time: not 0 s."""
  for k, seconds in ((1, 30.0), (2, 12.5)):
    workdir_lib.Run(f'{sweep_dir}/good/seed_{k}').append_attempt({'seconds': seconds})
  c = compare.compare(compare.sweep_groups(sweep_dir), 'test', ['bleu'], trials=100)
  wall = {s['variant']: s['wall_s'] for s in c['summary']}
  assert wall['good'] == 42.5 and np.isnan(wall['bad'])
  lines = report.markdown(c).splitlines()   # the summary table comes first
  good, bad = (next(x for x in lines if x.startswith(f'| {v} | 3 |')) for v in ('good', 'bad'))
  assert good.endswith('| 10.0 | 42 |') and bad.endswith('| 10.0 | - |')


def test_runs_on_other_sentences_are_refused(tmp_path, sweep_dir):
  other = make_run(str(tmp_path / 'other'), references(80, seed=1), 0.1, seed=1, num_test=80)
  groups = compare.resolve([os.path.join(sweep_dir, 'good'), other])
  with pytest.raises(ValueError, match=r"evaluated on different test splits \(120 vs 80 "
                                       r"sentences; fingerprints .*data.num_test 120 vs 80"):
    compare.compare(groups)
  (tmp_path / 'empty').mkdir()
  with pytest.raises(ValueError, match='empty is neither a finished run'):
    compare.resolve([str(tmp_path / 'empty')])


def test_sweep_report_files(sweep_dir):
  paths = report.write(sweep_dir, verbose=False)
  assert sorted(paths) == ['bars', 'by_length', 'by_length_csv', 'comparisons', 'csv', 'markdown',
                          'runs']
  md = open(paths['markdown']).read()
  assert '| good | 3 |' in md and 'Against **good** (the best mean BLEU)' in md
  assert '- good is better than bad on test BLEU' in md and 'Holm' in md
  assert 'paired approximate randomisation' in md and '120 test sentences' in md
  assert open(paths['runs']).read().count('seed_') == 9
  header = open(paths['csv']).readline().strip().split(',')
  assert {'bleu_mean', 'bleu_std', 'bleu_ci_lo', 'bleu_ci_hi'} <= set(header)
  for k in ('bars', 'by_length'):
    assert os.path.getsize(paths[k]) > 1000


def test_compare_command(sweep_dir, tmp_path):
  out = tmp_path / 'cmp.md'
  r = helpers.run_module('experiments.compare', f'{sweep_dir}/good', f'{sweep_dir}/bad/seed_1',
                         '--trials=500', f'--out={out}')
  assert r.returncode == 0, r.stderr
  assert 'good is better than bad/seed_1' in r.stdout and out.exists()
  assert 'with one seed on a side, seed-to-seed variation is untested' in r.stdout
  r = helpers.run_module('experiments.compare', f'{sweep_dir}/good', '--metric=wer')
  assert r.returncode == 2 and "error: metric 'wer' is not in the test results" in r.stderr


@pytest.mark.parametrize('where', ['dir', 'no_folder'])
def test_compare_out_that_cannot_be_written_is_refused_before_any_work(sweep_dir, tmp_path,
                                                                       where):
  """--out on a directory (or in a missing folder) used to print the whole report and only
  then fail: now one line, exit 2, nothing printed before it."""
  out = tmp_path if where == 'dir' else tmp_path / 'missing' / 'cmp.md'
  r = helpers.run_module('experiments.compare', f'{sweep_dir}/good', f'{sweep_dir}/bad',
                         '--trials=100', f'--out={out}')
  assert r.returncode == 2 and r.stdout == '', r.stdout[:500]
  assert r.stderr.strip().splitlines() == [
      f'error: {tmp_path}: is a directory, not an output file' if where == 'dir' else
      f'error: {tmp_path / "missing"}: no such folder for the output file'], r.stderr
