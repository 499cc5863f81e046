"""The explorer without a browser: its inputs refused before any work (a run without records,
runs of another task or split, an unwritable --out: one line, exit 2, nothing written), the
training curves read from TensorBoard's files, the maps' compact form, the comparison of
several runs built from their records, a tiny run's maps equal to the Translator's own, the
page written whole or not at all, and the word alignments of a run whose task has word-level
gold (a tiny Bible wheel's verses): each sentence's AER that of word_maps' links, its word map,
gold and extracted links, and none of them for a task without word gold. (tests/
test_explorer.py opens the pages in Chromium.)"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import explorer, explorer_data, explorer_page, explorer_words
from attention_jax.evaluation import records
from attention_jax.implicit import word_alignment as wa
from attention_jax.implicit import word_maps
from attention_jax.loaded import loading
from attention_jax.training import train
from experiments.configs import reverse

import helpers
from helpers import run_modules, smoke


def fake_run(workdir, hyps, refs, task='toy', split='test', records_too=True):
  """A finished run (results, config, records) whose outputs are `hyps`; no checkpoint."""
  os.makedirs(workdir)
  run = workdir_lib.Run(str(workdir))
  rows = [{'id': i, 'src': r[::-1], 'src_len': len(r), 'hyp': h, 'ref': r, 'refs': None,
           'align': None} for i, (h, r) in enumerate(zip(hyps, refs))]
  header, recs = records.build(split, rows, 'char')
  exact = 100.0 * np.mean([h == r for h, r in zip(hyps, refs)])
  with open(run.results_path, 'w') as f:
    json.dump({'results': {split: {'exact_match': exact, 'bleu': exact, 'chrf': exact,
                                   'sentences': len(refs), 'by_length': []}}}, f)
  with open(run.config_path, 'w') as f:
    json.dump({'seed': 0, 'data': {'name': task}, 'model': {'encoder': ''}}, f)
  if records_too:
    records.write(run.sentences_path(split), header, recs)
  return str(workdir)


REFS = ['abc', 'de', 'fghi', 'jk']


CASES = {'no_records': 'no per-sentence records', 'other_task': "'other' run",
         'other_split': 'different test', 'bad_out': 'no such folder',
         'foreign_out': 'not written by explore', 'missing': 'no such run',
         'bad_method': 'nosuch'}


def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path):
  """Each case (CASES: what its line says) as `python -m experiments.explore`, all at once."""
  argvs, folders = [], []
  for case in CASES:
    tmp = tmp_path / case
    a = fake_run(tmp / 'a', REFS, REFS)
    out, args = tmp / 'page', [a]
    if case == 'no_records':
      args = [fake_run(tmp / 'b', REFS, REFS, records_too=False)]
    elif case == 'other_task':
      args.append(fake_run(tmp / 'b', REFS, REFS, task='other'))
    elif case == 'other_split':   # other sentences: the fingerprints differ
      args.append(fake_run(tmp / 'b', REFS[:3], REFS[:3]))
    elif case == 'bad_out':
      out = tmp / 'no' / 'such' / 'page'
    elif case == 'foreign_out':
      out.mkdir()
      (out / 'notes.txt').write_text('mine')
    elif case == 'missing':
      args = [tmp / 'nowhere']
    elif case == 'bad_method':
      args.append('--methods=gradient,nosuch')
    argvs.append([*args, f'--out={out}'])
    folders.append((tmp, sorted(os.listdir(tmp))))
  for case, proc, (tmp, before) in zip(CASES, run_modules('experiments.explore', argvs),
                                       folders):
    assert proc.returncode == 2, (case, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), (case, proc.stderr)
    assert CASES[case] in lines[0], (case, lines[0])
    assert sorted(os.listdir(tmp)) == before, case          # nothing half-written beside
  assert os.listdir(tmp_path / 'foreign_out' / 'page') == ['notes.txt']


def test_an_unwritable_out_is_refused(tmp_path):
  """A folder the user cannot write: PermissionError before any work (as root, CI, the check
  runs in a child without the capabilities that override permission bits)."""
  locked = tmp_path / 'locked'
  locked.mkdir(mode=0o500)
  code = ('import sys; from attention_jax.analysis import explorer; '
          'explorer.check_out(sys.argv[1])')
  proc = subprocess.run([sys.executable, '-c', code, str(locked / 'page')], cwd=helpers.ROOT,
                        capture_output=True, text=True, timeout=300,
                        preexec_fn=helpers.without_dac_override if os.geteuid() == 0 else None)
  assert proc.returncode == 1 and 'PermissionError' in proc.stderr, proc.stderr[-2000:]
  assert os.listdir(locked) == []


@pytest.mark.filterwarnings('ignore:Mean of empty slice')   # (runs without a train speed)
def test_resolve_finds_a_sweep_s_runs_and_names_them(tmp_path):
  for variant in ('additive', 'dot'):
    for seed in (0, 1):
      fake_run(tmp_path / 'sweep' / variant / f'seed_{seed}', REFS, REFS)
  runs = explorer_data.resolve([str(tmp_path / 'sweep')], 'test')
  assert [r.name for r in runs] == [f'sweep/{v}/seed_{s}' for v in ('additive', 'dot')
                                    for s in (0, 1)]
  assert {r.task for r in runs} == {'toy'}
  c = explorer_data.comparison(runs, 'test')     # the variants, each over its two seeds
  assert sorted(c['groups']) == ['sweep/additive', 'sweep/dot']
  assert c['compare']['summary'][0]['seeds'] == 2
  one = explorer_data.resolve([str(tmp_path / 'sweep' / 'dot')], 'test')
  c = explorer_data.comparison(one, 'test')       # one variant's seeds: with each other
  assert sorted(c['groups']) == ['dot/seed_0', 'dot/seed_1']
  assert len(c['compare']['comparisons']) == 2      # bleu and exact match: seed_1 vs seed_0


@pytest.mark.filterwarnings('ignore:Mean of empty slice')   # (runs without a train speed)
def test_comparison_says_who_got_each_sentence_right_and_tests_the_variants(tmp_path):
  a = fake_run(tmp_path / 'a', REFS, REFS)
  b = fake_run(tmp_path / 'b', ['abc', 'xx', 'fghi', 'yy'], REFS)
  runs = explorer_data.resolve([a, b], 'test')
  c = explorer_data.comparison(runs, 'test', [(r[::-1], r) for r in REFS])
  assert c['runs'] == ['a', 'b']
  assert [s['right'] for s in c['sentences']] == [[1, 1], [1, 0], [1, 1], [1, 0]]
  assert [s['src'] for s in c['sentences']] == [r[::-1] for r in REFS]
  rows = c['compare']['comparisons']
  assert rows and rows[0]['variant'] == 'b' and rows[0]['baseline'] == 'a'


def test_read_scalars_reads_tensorboardx_event_files(tmp_path):
  from tensorboardX import SummaryWriter   # pylint: disable=g-import-not-at-top
  w = SummaryWriter(str(tmp_path))
  for step in (2, 4, 6):
    w.add_scalar('train/loss', 1.0 / step, step)
  w.add_scalar('validation/bleu', 42.5, 6)
  w.close()
  got = explorer_data.read_scalars(str(tmp_path))
  assert got['train/loss'] == [(2, 0.5), (4, 0.25), (6, pytest.approx(1 / 6))]
  assert got['validation/bleu'] == [(6, 42.5)]
  assert explorer_data.read_scalars(str(tmp_path / 'none')) == {}


def test_maps_are_stored_in_thousandths_and_attributions_normalised_per_token():
  w = np.array([[0.12345, 0.87655], [0.5, 0.5]])
  ints = explorer_data._ints(w)
  assert ints == [[123, 877], [500, 500]]
  assert np.abs(np.array(ints) / explorer_data.SCALE - w).max() <= 5e-4
  s = explorer_data._normalised(np.array([[2.0, -4.0], [0.0, 0.0]]))
  np.testing.assert_allclose(s, [[0.5, -1.0], [0.0, 0.0]])
  pooled = explorer_data._pooled(np.ones((1, 3, 5)), (2, 3), (2, 2))   # cut / padded cells
  np.testing.assert_allclose(pooled, [[[4, 4, 2], [2, 2, 1]]])


@pytest.fixture(scope='module')
def reverse_run(tmp_path_factory, data_dir):
  """A reverse smoke run (8 steps: its maps need not mean anything, only equal the model's)."""
  workdir = str(tmp_path_factory.mktemp('explorer_data') / 'reverse')
  train.train_and_evaluate(smoke(reverse, data_dir), workdir)
  return workdir


@pytest.mark.extended   # every map of 5 sentences recomputed (15 s): after the suite, in CI
def test_sentence_details_equal_the_translator_s_own_maps(reverse_run):
  run = explorer_data.resolve([reverse_run], 'test')[0]
  t = loading.load(reverse_run)
  task = explorer_data.load_task(run.config, (t.src_tok, t.tgt_tok))
  summary = explorer_data.run_summary(run, 'test', task)
  assert [r['id'] for r in summary['sentences']] == list(range(32))
  assert [r['hyp'] for r in summary['sentences']] == [r['hyp'] for r in run.records]
  assert summary['curves']['train/loss'] and summary['by_length']
  details = explorer_data.sentence_details(t, summary, task, ('gradient', 'gradient_x_input'),
                                           beam=2, limit=5)
  assert sorted(details) == list(range(5))
  for k, d in details.items():
    src, ref = task.texts('test')[k]
    out, weights, src_tokens, tgt_tokens = t.attend(src)
    assert (d['output'], d['src_tokens'], d['tgt_tokens']) == (out, src_tokens, tgt_tokens)
    assert out == summary['sentences'][k]['hyp']       # the records' (greedy) output
    np.testing.assert_allclose(np.array(d['attn']) / explorer_data.SCALE, weights, atol=5e-4)
    for m in ('gradient', 'gradient_x_input'):
      want = explorer_data._normalised(t.saliency(src, method=m, reference=out).scores)
      np.testing.assert_allclose(np.array(d['maps'][m]) / explorer_data.SCALE, want,
                                 atol=5e-4 + 1e-5)
    assert d['gold'] == list(task.gold_alignment(np.asarray(task.src_tok.encode(src)),
                                                 np.asarray(task.tgt_tok.encode(ref))))
    assert [o for o, _ in d['nbest']] == [o for o, _ in t.translate([src], beam=2, nbest=2)[0]]


def test_explore_writes_a_page_replaces_an_earlier_one_and_leaves_nothing_on_failure(
    reverse_run, tmp_path, monkeypatch):
  out = tmp_path / 'page'
  index = explorer.explore(reverse_run, str(out), methods=(), beam=1, limit=3, verbose=False)
  page = open(index, encoding='utf-8').read()
  assert len(re.findall(r'<tr data-sentence-id="\d+"', page)) == 32
  assert sorted(os.listdir(out / 'data')) == ['0.js', '1.js', '2.js']
  assert 'https://' not in page and 'http://' not in page
  explorer.explore(reverse_run, str(out), methods=(), beam=1, limit=1, verbose=False)
  assert os.listdir(out / 'data') == ['0.js']                    # replaced whole
  def fail(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(explorer_page, 'write_run_page', fail)
  with pytest.raises(KeyboardInterrupt):
    explorer.explore(reverse_run, str(tmp_path / 'other'), methods=(), beam=1, verbose=False)
  assert sorted(os.listdir(tmp_path)) == ['page']                # no temp folder left


# ---- word alignments (a task with word-level gold) --------------------------------------

WORD_TASK = 'explorer_bible'


def train_bible(tmp, steps: int = 30, **model) -> str:
  """A smoke run on a small Bible wheel's verses (helpers.bible_run) -> its workdir."""
  return helpers.bible_run(tmp, WORD_TASK, steps, word_alignment='', **model)[0]


@pytest.fixture(scope='module')
def bible_run(tmp_path_factory):
  return train_bible(tmp_path_factory.mktemp('explorer_bible'))


def _loaded(workdir):
  run = explorer_data.resolve([workdir], 'test')[0]
  t = loading.load(workdir)
  return run, t, explorer_data.load_task(run.config, (t.src_tok, t.tgt_tok))


def test_word_alignments_carry_each_sentence_s_aer_word_map_and_links(bible_run, monkeypatch):
  run, t, task = _loaded(bible_run)
  ids = sorted(r['id'] for r in run.records)
  with_gold = task.word_gold   # test sentence 1 as a verse without gold (a record-less verse)
  monkeypatch.setattr(task, 'word_gold', lambda split: [
      None if k == 1 else g for k, g in enumerate(with_gold(split))])
  words = explorer_words.word_alignments(t, task, 'test', ids, keep=ids[:4])
  summary = explorer_data.run_summary(run, 'test', task, words)
  details = explorer_data.sentence_details(t, summary, task, (), beam=1, limit=4, words=words)
  assert summary['word_map'] == 'attention'
  # recomputed: word_maps' links of the explicit attention, scored sentence by sentence
  want = word_maps.align_split(t.graphdef, t.params, task, 'test', ['attention'])
  links = dict(zip(want['rows'], want['links']['attention']))
  gold = task.word_gold('test')
  assert gold[1] is None and sum(g is not None for g in gold) == len(ids) - 1
  for r in summary['sentences']:
    k = r['id']
    if gold[k] is None:
      assert r['aer'] is None
    else:
      assert r['aer'] == round(wa.sentence_aer(gold[k], links[k]), 1), k
  assert sorted(details) == ids[:4]
  for k, d in details.items():
    src, ref = task.texts('test')[k]
    w = d['words']
    assert (w['src'], w['tgt']) == (src.split(), ref.split())
    assert np.array(w['map']).shape == (len(ref.split()), len(src.split()))
    assert {tuple(l) for l in w['links']} == links[k]
    # argmax: one link per target word, within the sentence
    assert sorted(j for _, j in w['links']) == list(range(len(ref.split())))
    assert all(0 <= i < len(src.split()) for i, _ in w['links'])
    if gold[k] is None:
      assert 'aer' not in w and 'sure' not in w
    else:
      assert {tuple(l) for l in w['sure']} == gold[k].sure
      assert {tuple(l) for l in w['possible']} == gold[k].possible - gold[k].sure
      f = wa.figures(wa.counts(gold[k], links[k]))
      assert [w[m] for m in ('aer', 'precision', 'recall')] == \
          [round(f[m], 1) for m in ('aer', 'precision', 'recall')]
    # the word map: the explicit attention's, teacher-forced (word_maps keeps it), in ints
    np.testing.assert_allclose(np.array(w['map']) / explorer_data.SCALE,
                               words['sentences'][k]['map'], atol=5e-4)


def test_a_word_gold_run_s_page_has_the_aer_column_and_word_maps(bible_run, tmp_path):
  index = explorer.explore(bible_run, str(tmp_path / 'page'), methods=(), beam=1, limit=2,
                           verbose=False)
  page = open(index, encoding='utf-8').read()
  assert '<th>AER</th>' in page and 'id="f-aer-min"' in page and 'id="words"' in page
  assert len(re.findall(r'data-aer="', page)) == len(re.findall(r'<tr data-sentence-id=', page))
  detail = open(tmp_path / 'page' / 'data' / '0.js', encoding='utf-8').read()
  assert '"words":' in detail


@pytest.mark.extended   # a second Bible run (20 s): after the suite, in CI
def test_a_model_without_attention_is_aligned_by_its_gradient(tmp_path):
  """Score `none` has no attention weights (no link): the word maps are the gradient's."""
  run, t, task = _loaded(train_bible(tmp_path, steps=10, score='none'))
  ids = sorted(r['id'] for r in run.records)
  words = explorer_words.word_alignments(t, task, 'test', ids, keep=ids[:1])
  assert words['map'] == 'gradient'
  want = word_maps.align_split(t.graphdef, t.params, task, 'test', ['gradient'])
  gold = task.word_gold('test')
  for k, links in zip(want['rows'], want['links']['gradient']):
    assert words['sentences'][k]['aer'] == round(wa.sentence_aer(gold[k], links), 1)
  detail = words['sentences'][ids[0]]['detail']
  assert detail['name'] == 'gradient' and np.max(detail['map']) == explorer_data.SCALE


def test_a_run_without_word_gold_has_no_word_alignments(reverse_run, tmp_path):
  run, t, task = _loaded(reverse_run)
  assert not task.has_word_gold
  words = explorer_words.word_alignments(t, task, 'test', [r['id'] for r in run.records])
  assert words is None
  summary = explorer_data.run_summary(run, 'test', task, words)
  assert summary['word_map'] is None and not any('aer' in r for r in summary['sentences'])
  details = explorer_data.sentence_details(t, summary, task, (), beam=1, limit=1, words=words)
  assert 'words' not in details[0]
  page = explorer_page.run_body(summary, (), 1, 1)
  assert 'AER' not in page and 'f-aer' not in page and 'id="words"' not in page
