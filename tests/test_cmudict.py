"""CMUdict G2P: the split by word (hashed, and the published standard test list), phones as
tokens, WER / PER with several references (the experiment config's smoke run: the configs
tier, tests/test_config_training.py)."""

import importlib.resources
import json

import pytest

from attention_jax.analysis import compare
from attention_jax.data import cmudict, tasks
from attention_jax.data import tokenizers as tok_lib
from attention_jax.evaluation import metrics
from attention_jax.training import train
from experiments import data_info
from experiments.configs import cmudict as cmudict_config


@pytest.fixture(scope='module')
def prons():
  return cmudict.pronunciations(stress=False)


def test_split_is_by_word_deterministic_and_of_the_stated_sizes(prons):
  words = sorted(prons)
  assert len(words) == 124_926
  a = cmudict.split_words(words, 12_000, 0.05, seed=0)
  b = cmudict.split_words(list(reversed(words)), 12_000, 0.05, seed=0)   # input order
  assert a == b
  sizes = {k: len(v) for k, v in a.items()}
  assert sizes == {'test': 12_000, 'validation': 5_646, 'train': 107_280}
  sets = {k: set(v) for k, v in a.items()}
  assert not (sets['train'] & sets['validation'] or sets['train'] & sets['test']
              or sets['validation'] & sets['test'])
  assert set().union(*sets.values()) == set(words)
  assert cmudict.split_words(words, 12_000, 0.05, seed=1)['test'] != a['test']


@pytest.fixture(scope='module')
def shipped():
  """The shipped test list read here on its own: ([(WORD, phones)] per line, the raw text)."""
  text = (importlib.resources.files('attention_jax.data')
          / cmudict.STANDARD_TEST_FILE).read_text('ascii')
  return [tuple(line.split('  ')) for line in text.splitlines()], text


def test_shipped_list_is_the_cntk_file_unchanged(shipped):
  lines, text = shipped
  assert len(text) == 321_219 and len(lines) == 12_855 and text.endswith('ZYCH  Z AY CH\n')
  assert lines[0] == ('ABADI', 'AH B AE D IY')
  assert len({w for w, _ in lines}) == 11_994 and len(set(lines)) == 12_828   # 27 repeats


def test_standard_split_tests_exactly_the_shipped_words_with_their_pronunciations(prons, shipped):
  lines, _ = shipped
  test = cmudict.standard_test()
  assert list(test) == list(dict.fromkeys(w.lower() for w, _ in lines))   # every word, in order
  want = {}
  for w, p in lines:                     # the list's pronunciations, repeats merged, in order
    if p not in want.setdefault(w.lower(), []):
      want[w.lower()].append(p)
  assert test == want
  assert test['arizonans'] == ['ER IH Z OW N AH N Z']                    # a repeated line
  assert test['when'] == ['HH W EH N', 'HH W IH N', 'W EH N', 'W IH N']
  assert test["africa's"] == ['AE F R IH K AA Z'] != prons["africa's"]   # the list's, not ours
  a = cmudict.standard_split_words(sorted(prons), test, 0.05, seed=0)
  assert a == cmudict.standard_split_words(sorted(prons, reverse=True), test, 0.05, seed=0)
  assert a['test'] == list(test)
  assert {k: len(v) for k, v in a.items()} == {'test': 11_994, 'validation': 5_647,
                                               'train': 107_285}
  sets = {k: set(v) for k, v in a.items()}
  assert not (sets['test'] & sets['train'] or sets['test'] & sets['validation']
              or sets['train'] & sets['validation'])
  assert set().union(*sets.values()) == set(prons)
  with pytest.raises(ValueError, match='1 standard test words are not in the dictionary'):
    cmudict.standard_split_words(['a', 'b'], ['a', 'zz'], 0.5, seed=0)


def test_prepared_standard_split_holds_the_shipped_references(data_cfg, prons):
  d = data_cfg('cmudict', split='standard', valid_fraction=0.0003, num_train=200,
               tgt_tokenizer='word')
  task = tasks.load_task(d)
  test = cmudict.standard_test()
  rows = task.texts('test')                                              # TFDS's order
  assert sorted(w for w, _ in rows) == sorted(test)                       # one row per word
  assert dict(zip((w for w, _ in rows), task.references('test'))) == test
  assert all(tgt == test[w][0] for w, tgt in rows)
  words = {s: {w for w, _ in task.texts(s)} for s in ('train', 'validation')}
  assert (len(words['train']), len(words['validation'])) == (200, 34)
  assert not (words['train'] | words['validation']) & set(test)
  assert sorted(task.texts('train')) == sorted((w, p) for w in words['train'] for p in prons[w])


def test_data_info_states_the_split_against_the_published_sizes(data_cfg):
  cfg = cmudict_config.get_config()
  cfg.data = data_cfg('cmudict', split='standard', valid_fraction=0.0003, num_train=200,
                      tgt_tokenizer='word')                  # prepared by the test above
  text = data_info.describe(cfg)
  assert ('cmudict split standard: 200 train / 34 validation / 11,994 test words; test = the '
          'published CMUdict 0.7b test list (papers: 106,837 train / 12,000 test words') in text
  assert 'test: 11994 distinct sources in 11994 pairs' in text
  assert cmudict.split_note('hashed', {'train': 9, 'validation': 2, 'test': 3}).startswith(
      'cmudict split hashed: 9 train / 2 validation / 3 test words by SHA-256')


def test_unknown_split_fails_naming_the_valid_ones_and_a_missing_one_means_hashed(data_cfg):
  with pytest.raises(ValueError, match=r"unknown data\.split 'published'.*valid: hashed, standard"):
    cmudict.make_config(data_cfg('cmudict', split='published'))
  with pytest.raises(ValueError, match='no stress digits'):
    cmudict.make_config(data_cfg('cmudict', split='standard', stress=True))
  old = data_cfg('cmudict', num_test=12_000, num_train=0)
  del old['split']                                  # a config saved before data.split existed
  c = cmudict.make_config(old)
  assert c.split == 'hashed' and c.name == 'test12000_valid0.05_trainall_nostress_variants_seed0'
  assert cmudict.make_config(data_cfg('cmudict', split='standard')).name.startswith('standard_')
  cfg = cmudict_config.get_config()
  saved = json.loads(cfg.to_json())
  del saved['data']['split']
  train.check_same_config(saved, cfg, 'runs/x')     # an old run resumes
  cfg.data.split = 'standard'
  with pytest.raises(ValueError, match=r"data\.split: saved 'hashed', now 'standard'"):
    train.check_same_config(saved, cfg, 'runs/x')


def test_compare_counts_a_run_without_data_split_as_hashed(tmp_path):
  old, new = tmp_path / 'old', tmp_path / 'new'
  for run, data in ((old, {'name': 'cmudict'}), (new, {'name': 'cmudict', 'split': 'hashed'})):
    run.mkdir()
    (run / 'config.json').write_text(json.dumps({'data': data}))
  a, b = (compare.Evaluated(str(r), results={}, records={}) for r in (old, new))
  assert a.data_config() == b.data_config() and a.data_config()['split'] == 'hashed'


def test_stress_is_removed_and_duplicates_merged(prons):
  assert prons['quebec'] == ['K W AH B EH K']
  assert prons['tomato'] == ['T AH M EY T OW', 'T AH M AA T OW']
  phones = {p for ps in prons.values() for pron in ps for p in pron.split()}
  assert phones == set(cmudict.PHONES)
  assert all(len(set(ps)) == len(ps) for ps in prons.values())
  stressed = cmudict.pronunciations(stress=True)
  assert stressed['quebec'] == ['K W AH0 B EH1 K']


@pytest.mark.extended   # the whole dictionary prepared (20 s): after the suite, in CI
def test_prepared_splits_keep_all_pronunciations_of_a_word_together(data_cfg):
  d = data_cfg('cmudict', num_test=30, valid_fraction=0.0003, num_train=200, variants=True,
               stress=False, tgt_tokenizer='word')
  task = tasks.load_task(d)
  words = {s: {w for w, _ in task.texts(s)} for s in tasks.SPLITS}
  assert (len(words['test']), len(words['validation']), len(words['train'])) == (30, 37, 200)
  assert not (words['train'] & words['test'] or words['train'] & words['validation']
              or words['validation'] & words['test'])
  prons = cmudict.pronunciations(stress=False)
  train_pairs = task.texts('train')
  assert len(train_pairs) == sum(len(prons[w]) for w in words['train'])   # every variant
  assert sorted(train_pairs) == sorted((w, p) for w in words['train'] for p in prons[w])
  for split in ('validation', 'test'):                                  # one row per word
    for (w, tgt), refs in zip(task.texts(split), task.references(split)):
      assert tgt == prons[w][0] and refs == prons[w]
  again = tasks.load_task(d)                                            # same on every run
  assert again.texts('test') == task.texts('test')
  first_only = tasks.load_task(data_cfg('cmudict', num_test=30, valid_fraction=0.0003,
                                        num_train=200, variants=False, tgt_tokenizer='word'))
  assert sorted(first_only.texts('train')) == sorted((w, prons[w][0]) for w in words['train'])


def test_phone_tokenizer_treats_a_phone_as_one_token_and_round_trips():
  plain = ['K W EH B EH K', 'T AH M EY T OW', 'HH AY B R AH D']
  stressed = ['K W AH0 B EH1 K', 'T AH0 M EY1 T OW2']
  for texts in (plain, stressed):
    tok = tok_lib.train_tokenizer('word', texts)
    for t in texts:
      ids = tok.encode(t)
      assert len(ids) == len(t.split()) and tok_lib.UNK not in ids
      assert tok.pieces(t) == t.split()
      assert tok.decode([tok_lib.BOS, *ids, tok_lib.EOS, tok_lib.PAD]) == t
  tok = tok_lib.train_tokenizer('word', stressed)
  assert tok.encode('AH0 EH1')[0] != tok.encode('AH0 EH1')[1]            # stress kept apart
  assert tok.encode('EH0') == [tok_lib.UNK]                              # unseen phone


def test_edit_distance_on_tokens():
  assert metrics.edit_distance([], []) == 0
  assert metrics.edit_distance('K AE T'.split(), []) == 3
  assert metrics.edit_distance('K AE T'.split(), 'K AE T'.split()) == 0
  assert metrics.edit_distance('K AE T'.split(), 'K AA T S'.split()) == 2   # sub + ins
  assert metrics.edit_distance('S IH T IH NG'.split(), 'K IH T AH N'.split()) == 3


def test_wer_and_per_against_hand_computed_examples_with_several_references():
  hyps = ['T AH M AA T OW',          # equals the 2nd reference: right, 0 edits / 6
          'T AH M EY D OW',          # 1 edit from 'T AH M EY T OW' (6), 2 from the other
          'HH AY B R IH D',          # equals the 2nd reference
          'K W EH B K',              # deletion: 1 edit / 6
          '']                        # empty output: 4 edits / 4
  refs = [['T AH M EY T OW', 'T AH M AA T OW'],
          ['T AH M EY T OW', 'T AH M AA T OW'],
          ['HH AY B R AH D', 'HH AY B R IH D'],
          ['K W EH B EH K'],
          ['AH B AW T', 'B AW T']]   # closest: 'B AW T' (3 edits), the first of least distance
  got = metrics.g2p_metrics(hyps, refs)
  assert got['wer'] == pytest.approx(100 * 3 / 5)
  assert got['per'] == pytest.approx(100 * (0 + 1 + 0 + 1 + 3) / (6 + 6 + 6 + 6 + 3))
  assert metrics.g2p_sums('AH B AW T', ['B AW T', 'AH B AW T']) == (0, 0, 4)
  with pytest.raises(ValueError, match='reference'):
    metrics.g2p_metrics(['A'], [[]])
  with pytest.raises(ValueError, match='2 outputs for 1'):
    metrics.g2p_metrics(['A', 'B'], [['A']])


