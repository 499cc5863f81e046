"""CMUdict G2P: the split by word, phones as tokens, WER / PER with several references, and a
smoke run of the experiment config."""

import numpy as np
import pytest

from attention_jax import metrics, train
from attention_jax.data import cmudict, tasks
from attention_jax.data import tokenizers as tok_lib
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


def test_stress_is_removed_and_duplicates_merged(prons):
  assert prons['quebec'] == ['K W AH B EH K']
  assert prons['tomato'] == ['T AH M EY T OW', 'T AH M AA T OW']
  phones = {p for ps in prons.values() for pron in ps for p in pron.split()}
  assert phones == set(cmudict.PHONES)
  assert all(len(set(ps)) == len(ps) for ps in prons.values())
  stressed = cmudict.pronunciations(stress=True)
  assert stressed['quebec'] == ['K W AH0 B EH1 K']


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


def test_smoke_config_trains_in_seconds_and_reports_wer_per(tmp_path):
  c = cmudict_config.get_config('smoke')
  c.data.data_dir = str(tmp_path / 'tfds')
  summary = train.train_and_evaluate(c, str(tmp_path / 'run'))
  test = summary['results']['test']
  assert test['sentences'] == 32
  assert 0 <= test['wer'] <= 100 and 0 <= test['per'] < np.inf   # PER passes 100 on long junk
  assert np.isfinite(test['loss'])
  assert {r['bucket'] for r in test['by_length']} <= {'1-3', '4-7', '8-11', '12-15', '16-19'}
  assert all('wer' in r and 'per' in r for r in test['by_length'])
