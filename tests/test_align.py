"""`align` end to end on a smoke run of a task with word-level gold (the greek_english builder
over a small wheel made here): Pharaoh links written, precision / recall / AER printed and
equal to the library's figures for the same run and map, --help, and bad input refused in one
line with exit status 2 and nothing written."""

import os
import re

import ml_collections
import pytest

from attention_jax import data as data_lib
from attention_jax.analysis import aligning, alignment_study, compare, saved_run
from attention_jax.data import pharaoh
from attention_jax.implicit import word_alignment as wa
from attention_jax.implicit import word_maps
from attention_jax.loaded import loading
from experiments.configs import common, greek_english

import helpers

TASK = 'tiny_bible'


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  """A smoke run on the small wheel's verses -> (tmp, the test pairs with gold, their gold, the
  run's test results, the pairs of the files). The files (src, tgt, gold, gold1: 1-indexed) hold
  the pairs with gold and, as the study's files hold a verse without gold, the first pair again
  with an empty gold line: aligned, not scored."""
  tmp = tmp_path_factory.mktemp('align')
  _, cfg, summary = helpers.bible_run(tmp, TASK)
  task = data_lib.load_task(cfg.data, tokenizers=data_lib.load_tokenizers(
      os.path.join(tmp / 'run', 'tokenizers')))
  gold = task.word_gold('test')
  rows = [k for k, g in enumerate(gold) if g is not None]
  pairs = [task.texts('test')[k] for k in rows]
  files = pairs + pairs[:1]
  (tmp / 'src').write_text(''.join(s + '\n' for s, _ in files))
  (tmp / 'tgt').write_text(''.join(t + '\n' for _, t in files))
  no_gold = pharaoh.Alignment.of(())
  pharaoh.write(str(tmp / 'gold'), [gold[k] for k in rows] + [no_gold])
  pharaoh.write(str(tmp / 'gold1'), [gold[k] for k in rows] + [no_gold], one_indexed=True)
  return tmp, pairs, [gold[k] for k in rows], summary['results']['test'], files


def _align(tmp, *flags):
  return helpers.run_module('experiments.align', f'--workdir={tmp / "run"}',
                            f'--src={tmp / "src"}', f'--tgt={tmp / "tgt"}', *flags)


def test_align_writes_links_and_prints_the_figures_the_library_gives(run):
  tmp, pairs, gold, results, files = run
  out = tmp / 'out.links'
  done = _align(tmp, f'--gold={tmp / "gold"}', f'--out={out}', '--heatmaps=2', '--by_word=3')
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(tmp / 'out.heatmaps')) == ['pair_1.png', 'pair_2.png']
  links = pharaoh.read(str(out), sizes=[(len(s.split()), len(t.split())) for s, t in files])
  assert len(links) == len(files) == len(pairs) + 1
  # argmax: one link per target word with attention, to a source word of its sentence (the
  # pair without gold too)
  for a, (_, t) in zip(links, files, strict=True):
    assert sorted(j for _, j in a.sure) == list(range(len(t.split())))
  t = loading.load(str(tmp / 'run'))
  want = wa.score(gold, aligning.align_pairs(t, pairs, 'attention'))
  got = re.search(r'precision ([\d.]+)  recall ([\d.]+)  AER ([\d.]+)', done.stdout)
  assert got, done.stdout
  assert [float(x) for x in got.groups()] == [round(want[k], 2) for k in
                                                ('precision', 'recall', 'aer')]
  assert f'{len(pairs)} pairs; 1 with an empty gold line not scored)' in done.stdout
  links = links[:len(pairs)]   # the pairs with gold
  assert wa.score(gold, [a.sure for a in links])['aer'] == pytest.approx(want['aer'])
  # --by_word: the 3 target words missed most, as the library counts them on these links
  rows = wa.by_word(gold, [a.sure for a in links], [t for _, t in pairs])[:3]
  printed = re.findall(r'^\| (\S+) \| (\d+) \| ([\d.]+) \|', done.stdout, re.M)
  assert printed == [(r['word'], str(r['sure']), f'{r["recall"]:.1f}') for r in rows]
  # the run's own figure (the word_alignment evaluator at the end of training, on its test
  # split, which the study table reads) is the same as align's on the test files
  for k in ('precision', 'recall', 'aer'):
    assert results['word_alignment']['attention'][k] == pytest.approx(want[k], abs=1e-9)


def test_aligning_the_first_n_sentences_batches_only_those(run):
  """word_alignment_num = n aligns test sentences 0..n-1 and computes no batch of others (an
  attribution map costs per batch: the study aligns a subset with the slow methods)."""
  tmp = run[0]
  t = loading.load(str(tmp / 'run'))
  task = data_lib.load_task(ml_collections.ConfigDict(t.run_config).data,
                            tokenizers=(t.src_tok, t.tgt_tok))
  batches = []
  real = task.eval_batches
  task.eval_batches = lambda *a, **k: (batches.append(b) or b for b in real(*a, **k))
  out = word_maps.align_split(t.graphdef, t.params, task, 'test', ['attention'], num=3,
                              batch_size=2)
  assert out['rows'] == [0, 1, 2]
  assert sorted(int(i) for b in batches for i, w in zip(b['index'], b['weight']) if w > 0) \
      == [0, 1, 2]


@pytest.mark.extended   # a beam decode and a gradient map: CI's extended tier
def test_evaluate_adds_an_attribution_maps_figures_which_the_study_reads_and_align_repeats(run):
  """The study's attribution rows: `evaluate --word_alignment_methods=gradient` writes the
  gradient map's figures into eval_test.json, the study table reads them beside the explicit
  maps of results.json, and align's AER for that map on the same verses is the same."""
  tmp, pairs, gold, results, _ = run
  report = saved_run.evaluate_run(str(tmp / 'run'), split='test', num_heatmaps=0,
                                  word_alignment_methods='gradient', verbose=False)
  assert set(report['word_alignment']) == {'attention', 'gradient'}
  assert report['word_alignment']['attention']['aer'] == pytest.approx(
      results['word_alignment']['attention']['aer'], abs=1e-9)
  run_read = compare.Evaluated(str(tmp / 'run'), {'results': {'test': results}}, {})
  study = alignment_study.word_alignments(run_read)
  assert study['gradient']['sentences'] == len(gold)
  want = wa.score(gold, aligning.align_pairs(loading.load(str(tmp / 'run')), pairs, 'gradient'))
  for k in ('precision', 'recall', 'aer'):
    assert study['gradient'][k] == pytest.approx(want[k], abs=1e-9)


@pytest.mark.extended   # two more commands (the suite keeps the first): CI's extended tier
def test_a_one_indexed_gold_with_its_flag_and_a_gradient_map_with_a_threshold(run):
  tmp = run[0]
  first = _align(tmp, f'--gold={tmp / "gold"}', f'--out={tmp / "z.links"}')
  figures = re.search(r'precision .*AER [\d.]+', first.stdout).group(0)
  again = _align(tmp, f'--gold={tmp / "gold1"}', '--one_indexed', f'--out={tmp / "o1"}')
  assert again.returncode == 0 and figures in again.stdout, again.stderr
  grad = _align(tmp, '--map=gradient', '--extract=threshold', '--threshold=0.3',
                f'--gold={tmp / "gold"}', f'--out={tmp / "g.links"}')
  assert grad.returncode == 0 and 'AER' in grad.stdout, grad.stderr
  assert pharaoh.read(str(tmp / 'g.links')) != pharaoh.read(str(tmp / 'z.links'))


@pytest.mark.parametrize('case', ['one_indexed', 'out_of_range', 'line_counts', 'unknown_map'])
def test_bad_input_is_one_line_exit_2_and_nothing_written(run, case):
  tmp, pairs = run[0], run[4]   # the files' pairs
  out = tmp / f'bad_{case}.links'
  flags, want = [], ''
  if case == 'one_indexed':      # a 1-indexed gold file without the flag
    flags, want = [f'--gold={tmp / "gold1"}'], '1-indexed'
  elif case == 'out_of_range':
    bad = tmp / 'gold_bad'
    bad.write_text('0-0\n' * (len(pairs) - 1) + f'0-{len(pairs[-1][1].split()) + 3}\n')
    flags, want = [f'--gold={bad}'], f'gold_bad line {len(pairs)}: link 0-'
  elif case == 'line_counts':
    short = tmp / 'tgt_short'
    short.write_text(''.join(t + '\n' for _, t in pairs[:-1]))
    done = helpers.run_module('experiments.align', f'--workdir={tmp / "run"}',
                              f'--src={tmp / "src"}', f'--tgt={short}', f'--out={out}')
    want = f'--src has {len(pairs)} lines, --tgt {len(pairs) - 1}'
  else:
    flags, want = ['--map=attention_L9H9'], "unknown map 'attention_L9H9' for this run; valid: "
  if case != 'line_counts':
    done = _align(tmp, *flags, f'--out={out}')
  assert done.returncode == 2, done.stderr
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith('error: ') and want in lines[0], lines
  assert not out.exists() and not os.path.exists(str(out) + '.tmp')


def test_align_help_names_its_flags():
  done = helpers.run_module('experiments.align', '--help')
  assert done.returncode == 0
  for flag in ('--workdir', '--src', '--tgt', '--out', '--map', '--gold', '--one_indexed',
               '--extract', '--reverse_workdir'):
    assert flag in done.stdout, flag


@pytest.mark.extended   # a second tiny run, a Transformer's: CI's extended tier
def test_a_transformers_every_layer_and_head_and_its_shift_rows_align(tmp_path):
  model = {k.split('.', 1)[1]: v for k, v in common.switch(
      greek_english.get_config('smoke'), arch='transformer', transformer_layers=2,
      heads=2).items()}
  workdir, cfg, summary = helpers.bible_run(tmp_path, TASK + '_transformer', steps=4, **model)
  t = loading.load(workdir)
  names = word_maps.map_names(t.graphdef, t.params)
  layers = ['attention_L1', 'attention_L1H1', 'attention_L1H2', 'attention_L2',
            'attention_L2H1', 'attention_L2H2']
  assert names == ['attention', *layers, 'attention_shift', *[n + '_shift' for n in layers]]
  figures = summary['results']['test']['word_alignment']
  assert set(figures) == set(names)   # the evaluator measured every one
  task = data_lib.load_task(cfg.data, tokenizers=(t.src_tok, t.tgt_tok))
  pairs = [p for p, g in zip(task.texts('test'), task.word_gold('test')) if g is not None]
  gold = [g for g in task.word_gold('test') if g is not None]
  for name in ('attention_L2H1', 'attention_L2H1_shift'):
    got = wa.score(gold, aligning.align_pairs(t, pairs, name))
    assert got['aer'] == pytest.approx(figures[name]['aer'], abs=1e-9), name
