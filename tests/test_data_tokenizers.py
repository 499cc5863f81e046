"""Tokenizers: reserved ids, exact round trips (char, sentencepiece), unknown symbols -> UNK
(never a crash), save/load without pickle, deterministic training. Parametrized over
attention_jax.data.TOKENIZERS, so a new tokenizer is tested for free."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_jax import data
from attention_jax.data import tokenizers as tok_lib

CORPUS = ['22. November 2026', 'Sunday, November 22, 2026', '22nd of November 2026',
          'dimanche 22 novembre 2026', '5 de marzo de 1999', '11/22/26', 'März 2001',
          'the cat sat on the mat', 'a b  c', 'élan vital'] * 5
KINDS = sorted(data.TOKENIZERS)
EXACT = ('char', 'sentencepiece')


def _train(kind, texts=CORPUS, vocab_size=300):
  return data.train_tokenizer(kind, texts, vocab_size=vocab_size, seed=0)


def test_reserved_ids():
  assert (data.PAD, data.BOS, data.EOS, data.UNK) == (0, 1, 2, 3)


@pytest.mark.parametrize('kind', KINDS)
def test_round_trip_and_specials(kind):
  tok = _train(kind)
  assert [tok.id_to_piece(i) for i in range(4)] == ['<pad>', '<s>', '</s>', '<unk>']
  for text in CORPUS[:10]:
    ids = tok.encode(text)
    assert ids and all(4 <= i < tok.vocab_size for i in ids), (text, ids)
    expected = text if kind in EXACT else ' '.join(text.split())
    assert tok.decode(ids) == expected
    # decode stops at EOS and skips PAD / BOS
    assert tok.decode([data.BOS, *ids, data.EOS, *ids, data.PAD]) == expected
    assert tok.decode([*ids, data.PAD, data.PAD]) == expected
    pieces = tok.pieces(text)
    assert len(pieces) == len(ids) and pieces == [tok.id_to_piece(i) for i in ids]


@pytest.mark.parametrize('kind', KINDS)
def test_unknown_symbols_never_crash(kind):
  tok = _train(kind)
  text = 'Ωmega ✓ 漢字 zzz'
  ids = tok.encode(text)
  assert all(0 <= i < tok.vocab_size for i in ids)
  if kind == 'sentencepiece':
    assert tok.decode(ids) == text  # byte fallback: still exact
  else:
    assert data.UNK in ids
    assert tok_lib.UNK_TEXT in tok.decode(ids)
  tok.decode([tok.vocab_size + 5, -1, data.UNK])  # out-of-range ids decode as UNK
  assert tok.id_to_piece(tok.vocab_size + 5) == '<unk>'


def test_char_unknown_maps_to_unk():
  tok = _train('char', ['abc'])
  assert tok.encode('abz') == [tok.encode('a')[0], tok.encode('b')[0], data.UNK]
  assert tok.vocab_size == 4 + 3


def test_word_vocab_is_capped_by_frequency():
  tok = data.train_tokenizer('word', ['a a a b b c'], vocab_size=6)
  assert tok.vocab_size == 6 and tok.encode('a b c') == [4, 5, data.UNK]


def test_sentencepiece_small_vocab_and_too_small_vocab():
  tok = _train('sentencepiece', vocab_size=60)  # too small for byte fallback: UNK instead
  ids = tok.encode('漢字')
  assert data.UNK in ids and tok.vocab_size <= 60
  with pytest.raises(ValueError, match='vocab_size=10'):
    _train('sentencepiece', vocab_size=10)


@pytest.mark.parametrize('kind', KINDS)
def test_save_load_is_json_and_equivalent(kind, tmp_path):
  tok = _train(kind)
  tok.save(str(tmp_path))
  meta = json.loads((tmp_path / 'tokenizer.json').read_text())
  assert meta['kind'] == kind
  assert not [f for f in os.listdir(tmp_path) if f.endswith(('.pkl', '.pickle'))]
  loaded = data.load_tokenizer(str(tmp_path))
  assert type(loaded) is type(tok) and loaded.vocab_size == tok.vocab_size
  for text in CORPUS[:10] + ['unseen ✓']:
    assert loaded.encode(text) == tok.encode(text)
    assert loaded.decode(tok.encode(text)) == tok.decode(tok.encode(text))


def test_load_missing_tokenizer_fails_clearly(tmp_path):
  with pytest.raises(FileNotFoundError, match='tokenizer.json'):
    data.load_tokenizer(str(tmp_path))


def test_a_truncated_sentencepiece_model_is_one_clear_error(tmp_path):
  """(It used to be a 41-line RuntimeError from sentencepiece's parser.)"""
  _SP_TOK.save(str(tmp_path))
  model = tmp_path / 'sentencepiece.model'
  model.write_bytes(model.read_bytes()[:1000])
  with pytest.raises(ValueError, match=r'sentencepiece.model: not a readable SentencePiece '
                                       r'model \(1,000 bytes; '):
    data.load_tokenizer(str(tmp_path))


@pytest.mark.parametrize('kind', KINDS)
def test_training_is_deterministic(kind, tmp_path):
  a, b = _train(kind), _train(kind)
  a.save(str(tmp_path / 'a'))
  b.save(str(tmp_path / 'b'))
  for name in os.listdir(tmp_path / 'a'):
    assert (tmp_path / 'a' / name).read_bytes() == (tmp_path / 'b' / name).read_bytes()


def test_unknown_kind_lists_valid_ones():
  with pytest.raises(ValueError, match='valid: char, sentencepiece, word'):
    data.train_tokenizer('bpe', CORPUS)


_CHAR_TOK = data.train_tokenizer('char', CORPUS)
_SP_TOK = data.train_tokenizer('sentencepiece', CORPUS, vocab_size=400)


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=sorted(set(''.join(CORPUS))), max_size=40))
def test_char_round_trip_property(text):
  assert _CHAR_TOK.decode(_CHAR_TOK.encode(text)) == text


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=30).filter(lambda t: '\u2581' not in t))
def test_sentencepiece_round_trip_property(text):
  # Exact for any text but sentencepiece's own space symbol '▁' (U+2581), read as a space.
  assert _SP_TOK.decode(_SP_TOK.encode(text)) == text
