"""The greek_english task's builder, on a small wheel in the real layout that the test makes
(helpers.bible_wheel): verse pairs, detokenised English, word-level gold over whitespace words
(punctuation, a word without a link, a verse without gold, a link into another verse), the
stable split rule; and the refusal, in one line and leaving nothing behind, where the wheel
cannot be fetched. No network: the real wheel is used by CI's configs tier only."""

import hashlib
import os

import numpy as np
import pytest

from attention_jax.data import bible, data_fields, loaders, pharaoh, tasks
from attention_jax.data import tokenizers as tok_lib
from experiments.configs import greek_english

import helpers


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('bible')
  wheel = helpers.bible_wheel(tmp / 'tiny.whl', verses=64)
  cfg = greek_english.get_config('smoke')
  cfg.data.data_dir = str(tmp / 'tfds')
  builder = bible.prepare(cfg.data, wheel=wheel, expected_sha256=bible.sha256(wheel))
  return wheel, cfg, builder


def test_verse_pairs_hold_detokenised_english_and_gold_over_whitespace_words(prepared):
  wheel, _, _ = prepared
  examples, left_out = bible.read_wheel(wheel)
  assert len(examples) == 64
  first = examples[0]                         # verse 1 of chapter 1: ends with 'word.'
  assert first['tgt'].endswith('.') and ' .' not in first['tgt']
  n_tgt = len(first['tgt'].split())
  links = pharaoh.parse(first['links']).sure
  # the last English word ('x.': a word and the excluded full stop) has no link; the others do
  assert {j for _, j in links} == set(range(n_tgt - 1))
  # two words swapped: Greek word 0 is English word 1 and Greek word 1 English word 0
  assert {(0, 1), (1, 0)} <= links
  assert examples[1]['gold'] == '0' and examples[1]['links'] == ''
  assert all(e['gold'] == '1' for k, e in enumerate(examples) if k % 20 != 1)
  assert left_out == {'links to another verse': 1, 'English verses without Greek': 0}
  # each gold link joins the Greek word and the English word the lexicon pairs
  lexicon = dict(zip(['logos', 'theos', 'kai', 'ho', 'en', 'arche', 'pneuma', 'kosmos',
                      'agape', 'zoe'], ['word', 'god', 'and', 'the', 'in', 'beginning',
                                        'spirit', 'world', 'love', 'life']))
  for e in examples:
    src, tgt = e['src'].split(), e['tgt'].split()
    for i, j in pharaoh.parse(e['links']).sure:
      assert tgt[j].rstrip('.') == lexicon[src[i]]


def test_the_split_rule_is_the_verse_ids_sha256_and_the_task_reads_it(prepared):
  wheel, _, builder = prepared
  examples, _ = bible.read_wheel(wheel)
  want = {split: sorted(e['verse'] for e in examples if bible.split_of(e['verse']) == split)
          for split in ('train', 'validation', 'test')}
  assert sum(map(len, want.values())) == 64 and all(want.values())
  ds = builder.as_data_source()
  for split, verses in want.items():
    assert sorted(x['verse'].decode() for x in ds[split]) == verses
  # the rule, spelled out: the first byte of SHA-256(verse id) mod 16
  for verse in ('40001001', '43003016', '66022021'):
    byte = hashlib.sha256(verse.encode()).digest()[0] % 16
    assert bible.split_of(verse) == {0: 'test', 1: 'validation'}.get(byte, 'train')
  task = _task(builder)
  for g, (src, tgt), ex in zip(task.word_gold('test'), task.texts('test'), ds['test']):
    if ex['gold'] == b'0':
      assert g is None
    else:
      assert all(i < len(src.split()) and j < len(tgt.split()) for i, j in g.sure)


_TASKS = {}


def _task(builder):
  """The task over the prepared builder, with small sentencepiece models."""
  key = id(builder)
  if key not in _TASKS:
    loaded = loaders._read_builder(builder)   # pylint: disable=protected-access
    train = loaded.texts['train']
    src_tok = tok_lib.train_tokenizer('sentencepiece', [s for s, _ in train], vocab_size=40)
    tgt_tok = tok_lib.train_tokenizer('sentencepiece', [t for _, t in train], vocab_size=40)
    _TASKS[key] = tasks.Task('greek_english', loaded.texts, src_tok, tgt_tok, max_src_len=64,
                             max_tgt_len=64, num_buckets=1, extras=loaded.extras)
  return _TASKS[key]


def test_data_verses_keeps_the_first_verses_before_the_split(prepared, tmp_path):
  """data.verses=N (the smoke config's 640): the wheel's first N verses in verse order, each in
  the split the rule gives it; a data set of its own beside the full one."""
  wheel, cfg, builder = prepared
  examples, _ = bible.read_wheel(wheel)
  first = [e['verse'] for e in examples[:20]]
  assert first == sorted(first)
  d = cfg.data.copy_and_resolve_references()
  d.update(data_dir=str(tmp_path / 'tfds'), verses=20)
  ds = bible.prepare(d, wheel=wheel, expected_sha256=bible.sha256(wheel)).as_data_source()
  kept = {split: sorted(x['verse'].decode() for x in ds[split]) for split in ds}
  assert sorted(v for vs in kept.values() for v in vs) == first
  assert all(bible.split_of(v) == split for split, vs in kept.items() for v in vs)
  assert greek_english.get_config('smoke').data.verses == 640
  assert greek_english.get_config().data.verses == 0
  assert sum(len(x) for x in builder.as_data_source().values()) == 64   # the full one, as it was
  d.verses = -3
  with pytest.raises(ValueError, match=r'^data\.verses must be an integer >= 0 \(0: all\), got -3$'):
    data_fields.check(d)


def test_token_words_of_the_task_cover_every_word(prepared):
  task = _task(prepared[2])
  for index, (src, tgt) in enumerate(task.texts('train')[:10]):
    sw, tw = task.token_words('train', index)
    assert set(sw[sw >= 0]) == set(range(len(src.split())))
    assert set(tw[tw >= 0]) == set(range(len(tgt.split())))
    assert len(sw) == len(task.src_tok.encode(src)) and len(tw) == len(task.tgt_tok.encode(tgt))
    assert np.all(np.diff(sw[sw >= 0]) >= 0)     # words in order


def test_a_wheel_with_another_checksum_is_refused_in_one_line(prepared, tmp_path):
  wheel, cfg, _ = prepared
  with pytest.raises(bible.DataUnavailable, match=r'tiny.whl: SHA-256 [0-9a-f]{16}\.\.\. is not '
                                                  r'the expected 84f6b15e70665777'):
    bible.prepare(cfg.data, wheel=wheel)
  # a stored wheel that is not the real one: refused, naming it, with what to do
  store = tmp_path / 'tfds' / 'downloads'
  store.mkdir(parents=True)
  (store / bible.WHEEL).write_bytes(b'not a wheel')
  with pytest.raises(bible.DataUnavailable, match='delete it and run again'):
    bible.fetch_wheel(str(tmp_path / 'tfds'))


def _no_network(monkeypatch):
  monkeypatch.setenv('PIP_INDEX_URL', 'http://127.0.0.1:9/simple')   # nothing listens there
  monkeypatch.setenv('PIP_FIND_LINKS', '')
  monkeypatch.setenv('PIP_NO_CACHE_DIR', '1')


def test_without_network_fetching_refuses_in_one_line_and_leaves_nothing(tmp_path, monkeypatch):
  _no_network(monkeypatch)
  data_dir = tmp_path / 'tfds'
  with pytest.raises(bible.DataUnavailable) as e:
    bible.fetch_wheel(str(data_dir), timeout=5)
  msg = str(e.value)
  assert '\n' not in msg and msg.startswith('greek_english: could not fetch bible-alignments==0.4.2')
  assert f'put {bible.WHEEL} (sha256 {bible.SHA256}) at {data_dir}/downloads/' in msg
  assert not data_dir.exists()


def test_train_without_network_is_one_line_exit_2_and_no_workdir(tmp_path, monkeypatch):
  _no_network(monkeypatch)
  run = helpers.run_module(
      'experiments.main', '--config=experiments/configs/greek_english.py:smoke',
      f'--config.data.data_dir={tmp_path / "tfds"}', f'--workdir={tmp_path / "run"}')
  assert run.returncode == 2, run.stderr
  lines = [l for l in run.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith('error: greek_english: could not fetch'), lines
  assert sorted(os.listdir(tmp_path)) == []
