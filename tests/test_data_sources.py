"""A user's text files (round trip, bad files named by file and line), TFDS translation sets
by name under tfds.testing.mock_data (no download), and the data_info entry point."""

import os

import numpy as np
import pytest

from attention_jax import data
from attention_jax.data import loaders, textfiles, tfds_translation
from experiments import data_info

import helpers

PAIRS = {'train': [('ein Haus', 'a house'), ('das Haus ist groß', 'the house is big'),
                   ('Grüße', 'greetings'), ('zwei  Leerzeichen', 'two  spaces')] * 6,
         'valid': [('ein Baum', 'a tree'), ('ß?', 'ss?')],
         'test': [('ein Gras', 'the grass'),
                  ('ein unbekanntes Zeichen: ✓', 'an unknown sign: ✓')]}


def write_corpus(directory, pairs=PAIRS):
  os.makedirs(directory, exist_ok=True)
  for prefix, rows in pairs.items():
    for side, k in (('src', 0), ('tgt', 1)):
      with open(os.path.join(directory, f'{prefix}.{side}'), 'w', encoding='utf-8') as f:
        f.writelines(row[k] + '\n' for row in rows)
  return str(directory)


def test_a_data_set_is_one_loader_and_one_registry_line(monkeypatch, data_cfg):
  """data.name picks its loader from the registry: one registered at test time is a task; a
  name taken is refused in one line."""
  pairs = {'train': PAIRS['train'], 'validation': PAIRS['valid'], 'test': PAIRS['test']}
  monkeypatch.setattr(loaders, 'LOADERS', dict(loaders.LOADERS))   # undone after the test
  data.register_task('in_memory', lambda d: data.Loaded(pairs, {}, 'this test'))
  task = data.load_task(data_cfg('in_memory', tokenizer='char'))
  assert task.texts('validation') == PAIRS['valid'] and task.location == 'this test'
  with pytest.raises(ValueError, match=r"unknown data.name 'nope'; valid: dates, .*cmudict, .*"
                                       r"textfiles, tfds, .*in_memory"):
    data.load_task(data_cfg('nope'))
  with pytest.raises(ValueError, match=r"task 'dates' is already registered; registered: dates"):
    data.register_task('dates', lambda d: None)


# the registered tasks that read a user's files or a TFDS set (tested above and below with
# their inputs), the whole CMUdict (tests/test_cmudict.py) or a fetched wheel (greek_english:
# tests/test_bible.py, on a wheel made there); every other one, a task registered later
# included (tests/throwaway_task.py), loads from the test config alone
NEEDS_INPUTS = ('textfiles', 'tfds', 'cmudict', 'greek_english')


@pytest.mark.parametrize('name', [n for n in data.TASKS if n not in NEEDS_INPUTS])
def test_every_registered_task_gives_three_splits_that_batch(name, data_cfg):
  """A registered task loads from a small config: three non-empty splits whose batches hold
  the tokens of their texts, a training iterator and its statistics."""
  task = data.load_task(data_cfg(name, num_train=48, num_valid=8, num_test=8))
  assert [len(task.texts(s)) > 0 for s in ('train', 'validation', 'test')] == [True] * 3
  batch = next(iter(task.eval_batches('test', 4)))
  rows = np.flatnonzero(batch['weight'])
  assert len(rows) and batch['tgt_in'].shape == batch['tgt_out'].shape
  for r in rows:
    src, tgt = task.texts('test')[int(batch['index'][r])]
    assert task.tgt_tok.decode(batch['tgt_out'][r]) == task.tgt_tok.decode(
        task.tgt_tok.encode(tgt)), name
    if task.source == 'tokens':
      assert task.src_tok.decode(batch['src'][r]) == task.src_tok.decode(
          task.src_tok.encode(src))
  train = next(iter(task.train_iterator(4, seed=0)))
  assert train['src'].shape[0] == 4 and (train['tgt_out'] != 0).any()
  assert task.stats(4)['splits']['train']['size'] == len(task.texts('train'))


def test_textfiles_round_trip(tmp_path, data_cfg):
  corpus = write_corpus(tmp_path / 'corpus')
  task = data.load_task(data_cfg('textfiles', textfiles_dir=corpus))
  assert task.texts('train') == PAIRS['train']
  assert task.texts('validation') == PAIRS['valid']
  assert task.texts('test') == PAIRS['test']
  decoded = {}
  for b in task.eval_batches('test', 4):
    for r in np.flatnonzero(b['weight']):
      decoded[b['index'][r]] = (task.src_tok.decode(b['src'][r]),
                                task.tgt_tok.decode(b['tgt_out'][r]))
  assert decoded[0] == PAIRS['test'][0]
  seen = [set(''.join(p[k] for p in PAIRS['train'])) for k in (0, 1)]
  assert decoded[1] == tuple(''.join(c if c in seen[k] else '⁇' for c in PAIRS['test'][1][k])
                             for k in (0, 1))  # unseen characters: UNK, no crash
  assert '⁇' in decoded[1][0] and '⁇' in decoded[1][1]


def test_textfiles_crlf_and_bom_are_accepted(tmp_path):
  path = tmp_path / 'x.src'
  path.write_bytes('\ufeffeins\r\nzwei\r\n'.encode())
  assert textfiles.read_lines(str(path)) == ['eins', 'zwei']


@pytest.mark.parametrize('defect, message', [
    ('mismatch', r'valid\.src has 2 lines but .*valid\.tgt has 3: .*valid\.tgt:3 has no partner'),
    ('empty', r'test\.tgt: empty file'),
    ('utf8', r'train\.src:3: not valid UTF-8'),
    ('blank', r'train\.tgt:2: blank line'),
    ('missing', r'test\.src: file not found'),
])
def test_textfiles_rejects_bad_files(tmp_path, data_cfg, defect, message):
  corpus = write_corpus(tmp_path / 'corpus')
  p = lambda name: os.path.join(corpus, name)  # pylint: disable=unnecessary-lambda-assignment
  if defect == 'mismatch':
    with open(p('valid.tgt'), 'a', encoding='utf-8') as f:
      f.write('one more\n')
  elif defect == 'empty':
    open(p('test.tgt'), 'w').close()
  elif defect == 'utf8':
    with open(p('train.src'), 'rb') as f:
      lines = f.read().split(b'\n')
    lines[2] = b'caf\xe9 latin-1'
    with open(p('train.src'), 'wb') as f:
      f.write(b'\n'.join(lines))
  elif defect == 'blank':
    with open(p('train.tgt'), 'rb') as f:
      lines = f.read().split(b'\n')
    lines[1] = b'   '
    with open(p('train.tgt'), 'wb') as f:
      f.write(b'\n'.join(lines))
  elif defect == 'missing':
    os.remove(p('test.src'))
  with pytest.raises(data.CorpusError, match=message):
    data.load_task(data_cfg('textfiles', textfiles_dir=corpus))


def test_textfiles_needs_a_directory(data_cfg, tmp_path):
  with pytest.raises(data.CorpusError, match='textfiles_dir is empty'):
    data.load_task(data_cfg('textfiles', textfiles_dir=''))
  with pytest.raises(data.CorpusError, match='not a directory'):
    data.load_task(data_cfg('textfiles', textfiles_dir=str(tmp_path / 'nope')))


@pytest.mark.parametrize('name, src_lang, tgt_lang', [
    ('ted_hrlr_translate/pt_to_en', 'pt', 'en'),
    ('ted_hrlr_translate/pt_to_en', 'en', 'pt'),
    ('wmt14_translate/de-en', 'de', 'en'),
])
def test_tfds_translation_by_name_under_mock_data(data_cfg, name, src_lang, tgt_lang):
  tfds = pytest.importorskip('tensorflow_datasets')
  pytest.importorskip('tensorflow')  # tfds.testing needs it (the test extra only)
  cfg = data_cfg('tfds', tfds_name=name, src_lang=src_lang, tgt_lang=tgt_lang,
                 tokenizer='sentencepiece', vocab_size=64)
  with tfds.testing.mock_data(num_examples=6):
    raw = tfds.data_source(name, split='train')
    want = [(str(raw[i][src_lang]), str(raw[i][tgt_lang])) for i in range(len(raw))]
    task = data.load_task(cfg)
  assert task.texts('train') == want and len(task.texts('test')) == 6
  batch = next(iter(task.train_iterator(4)))
  assert batch['src'].shape[1] in {s for s, _ in task.buckets.shapes}
  r = 0
  assert task.src_tok.decode(batch['src'][r]) == want[batch['index'][r]][0]
  assert sum(int(b['weight'].sum()) for b in task.eval_batches('validation', 4)) == 6


def test_example_structures():
  pair = tfds_translation.example_pair
  assert pair({'de': b'Haus', 'en': b'house'}, 'de', 'en') == ('Haus', 'house')
  assert pair({'en': 'house', 'de': 'Haus'}, 'de', 'en') == ('Haus', 'house')
  assert pair({'translation': {'de': b'Haus', 'en': b'house'}}, 'de', 'en') == ('Haus', 'house')
  assert pair((b'Haus', b'house'), 'de', 'en') == ('Haus', 'house')
  assert pair({'source': b'Haus', 'target': b'house'}, 'de', 'en',
              ('source', 'target')) == ('Haus', 'house')
  assert pair({'de': np.array(b'Haus', dtype=object), 'en': np.bytes_(b'house')},
              'de', 'en') == ('Haus', 'house')
  with pytest.raises(KeyError, match="data.src_lang"):
    pair({'fr': b'maison', 'en': b'house'}, 'de', 'en')


@pytest.mark.parametrize('name', ['dates', 'reverse'])
def test_data_info_describes_a_task(data_cfg, name):
  from experiments.configs import common  # pylint: disable=g-import-not-at-top
  cfg = common.base_config()
  cfg.data = data_cfg(name)
  text = data_info.describe(cfg)
  for needle in ('train: 300 examples', 'validation: 40 examples', 'test: 40 examples',
                 'source tokens: min', 'target tokens: min', 'source vocab', 'buckets (S, T)',
                 'padding'):
    assert needle in text, (needle, text)
  examples = [line for line in text.splitlines() if line.startswith('  [')]
  assert len(examples) == 3 and all(' -> ' in line for line in examples)
  assert ('gold alignment' in text) == (name == 'reverse')


def test_data_info_command_on_a_textfiles_corpus(tmp_path, tfds_dir):
  corpus = write_corpus(tmp_path / 'corpus')
  config = tmp_path / 'textfiles_config.py'
  config.write_text('from experiments.configs import common\n\n'
                    'def get_config(arg=None):\n'
                    '  c = common.base_config()\n'
                    "  c.data.name = 'textfiles'\n"
                    '  return c\n')
  out = helpers.run_module(   # (the server runs in the project's root: its imports resolve)
      'experiments.data_info', f'--config={config}', f'--config.data.textfiles_dir={corpus}',
      '--config.data.batch_size=8', f'--config.data.data_dir={tfds_dir}', timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  assert 'train: 24 examples' in out.stdout and 'test: 2 examples' in out.stdout
  examples = [line for line in out.stdout.splitlines() if line.startswith('  [')]
  assert len(examples) == 3
  assert all(any(f"'{s}' -> '{t}'" in line for s, t in PAIRS['train']) for line in examples)
