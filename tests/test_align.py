"""`align` end to end on a smoke run of a task with word-level gold (the greek_english builder
over a small wheel made here): Pharaoh links written, precision / recall / AER printed and
equal to the library's figures for the same run and map, --help, and bad input refused in one
line with exit status 2 and nothing written."""

import os
import re

import pytest

from attention_jax import data as data_lib
from attention_jax.data import pharaoh
from attention_jax.decoding import loading
from attention_jax.evaluation import aligning
from attention_jax.implicit import word_alignment as wa

import helpers

TASK = 'tiny_bible'


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  """A smoke run on the small wheel's verses, and its test verses with gold as files."""
  tmp = tmp_path_factory.mktemp('align')
  _, cfg, summary = helpers.bible_run(tmp, TASK)
  task = data_lib.load_task(cfg.data, tokenizers=data_lib.load_tokenizers(
      os.path.join(tmp / 'run', 'tokenizers')))
  gold = task.word_gold('test')
  rows = [k for k, g in enumerate(gold) if g is not None]
  pairs = [task.texts('test')[k] for k in rows]
  (tmp / 'src').write_text(''.join(s + '\n' for s, _ in pairs))
  (tmp / 'tgt').write_text(''.join(t + '\n' for _, t in pairs))
  pharaoh.write(str(tmp / 'gold'), [gold[k] for k in rows])
  pharaoh.write(str(tmp / 'gold1'), [gold[k] for k in rows], one_indexed=True)
  return tmp, pairs, [gold[k] for k in rows], summary['results']['test']


def _align(tmp, *flags):
  return helpers.run_module('experiments.align', f'--workdir={tmp / "run"}',
                            f'--src={tmp / "src"}', f'--tgt={tmp / "tgt"}', *flags)


def test_align_writes_links_and_prints_the_figures_the_library_gives(run):
  tmp, pairs, gold, results = run
  out = tmp / 'out.links'
  done = _align(tmp, f'--gold={tmp / "gold"}', f'--out={out}', '--heatmaps=2')
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(tmp / 'out.heatmaps')) == ['pair_1.png', 'pair_2.png']
  links = pharaoh.read(str(out), sizes=[(len(s.split()), len(t.split())) for s, t in pairs])
  assert len(links) == len(pairs)
  # argmax: one link per target word with attention, to a source word of its sentence
  for a, (_, t) in zip(links, pairs):
    assert sorted(j for _, j in a.sure) == list(range(len(t.split())))
  t = loading.load(str(tmp / 'run'))
  want = wa.score(gold, aligning.align_pairs(t, pairs, 'attention'))
  got = re.search(r'precision ([\d.]+)  recall ([\d.]+)  AER ([\d.]+)', done.stdout)
  assert got, done.stdout
  assert [float(x) for x in got.groups()] == [round(want[k], 2) for k in
                                                ('precision', 'recall', 'aer')]
  assert wa.score(gold, [a.sure for a in links])['aer'] == pytest.approx(want['aer'])
  # the run's own figure (the word_alignment evaluator at the end of training, on its test
  # split, which the study table reads) is the same as align's on the test files
  for k in ('precision', 'recall', 'aer'):
    assert results['word_alignment']['attention'][k] == pytest.approx(want[k], abs=1e-9)
  # a 1-indexed gold file read with the flag gives the same figures
  again = _align(tmp, f'--gold={tmp / "gold1"}', '--one_indexed', f'--out={tmp / "o1"}')
  assert again.returncode == 0 and got.group(0) in again.stdout, again.stderr
  # another map and extraction rule: a gradient map with a threshold
  grad = _align(tmp, '--map=gradient', '--extract=threshold', '--threshold=0.3',
                f'--gold={tmp / "gold"}', f'--out={tmp / "g.links"}')
  assert grad.returncode == 0 and 'AER' in grad.stdout, grad.stderr


@pytest.mark.parametrize('case', ['one_indexed', 'out_of_range', 'line_counts', 'unknown_map'])
def test_bad_input_is_one_line_exit_2_and_nothing_written(run, case):
  tmp, pairs = run[:2]
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
