"""Tokenizers: `char`, `word` (whitespace) and `sentencepiece`, saved as JSON / a .model file.

Every tokenizer reserves the same ids: PAD=0, BOS=1, EOS=2, UNK=3. An unknown symbol maps to
UNK and never raises. `decode(encode(text)) == text` holds exactly for `char` (for symbols
seen in training) and for `sentencepiece` (any text without its meta symbol '▁' U+2581:
unseen characters fall back to bytes when the vocabulary has room for the 256 byte pieces);
`word` joins words by one space.

  tok = train_tokenizer('char', ['hello', 'world'])
  tok.encode('hold')               # [ids], no BOS/EOS
  tok.decode([*ids, EOS, PAD])     # 'hold' (stops at EOS, skips PAD/BOS)
  tok.save(dir); load_tokenizer(dir)
"""

from __future__ import annotations

import collections
import io
import json
import os
import re
from typing import Iterable, Protocol, Sequence

import numpy as np

from attention_jax.symbols import BOS, EOS, PAD, UNK  # noqa: F401 (re-exported)

SPECIAL_PIECES = ('<pad>', '<s>', '</s>', '<unk>')
UNK_TEXT = '\u2047'  # '⁇', what decode writes for UNK (as sentencepiece does)
_JSON = 'tokenizer.json'
_SP_MODEL = 'sentencepiece.model'


class Tokenizer(Protocol):
  """What the model, training and plotting code rely on."""
  kind: str
  vocab_size: int

  def encode(self, text: str) -> list[int]: ...
  def decode(self, ids: Iterable[int]) -> str: ...
  def pieces(self, text: str) -> list[str]: ...
  def spans(self, text: str) -> list[tuple[int, int]]: ...
  def id_to_piece(self, i: int) -> str: ...
  def save(self, directory: str) -> None: ...


def _strip(ids: Iterable[int]) -> list[int]:
  """Ids up to the first EOS, without PAD and BOS."""
  out = []
  for i in ids:
    i = int(i)
    if i == EOS:
      break
    if i not in (PAD, BOS):
      out.append(i)
  return out


def _write_json(directory: str, obj: dict) -> None:
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, _JSON)
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    json.dump(obj, f, ensure_ascii=False, indent=1)
  os.replace(path + '.tmp', path)


class _VocabTokenizer:
  """A fixed list of symbols after the 4 special pieces (shared by char and word)."""
  kind = ''

  def __init__(self, symbols: Sequence[str]):
    if len(set(symbols)) != len(symbols) or set(symbols) & set(SPECIAL_PIECES):
      raise ValueError(f'{self.kind} vocabulary has duplicates or special pieces')
    self.symbols = list(symbols)
    self._itos = list(SPECIAL_PIECES) + self.symbols
    self._stoi = {s: i for i, s in enumerate(self._itos) if i >= len(SPECIAL_PIECES)}
    self.vocab_size = len(self._itos)

  def _split(self, text: str) -> list[str]:
    raise NotImplementedError

  def _join(self, symbols: list[str]) -> str:
    raise NotImplementedError

  def encode(self, text: str) -> list[int]:
    return [self._stoi.get(s, UNK) for s in self._split(text)]

  def decode(self, ids: Iterable[int]) -> str:
    return self._join([UNK_TEXT if not 0 <= i < self.vocab_size or i == UNK else self._itos[i]
                       for i in _strip(ids)])

  def pieces(self, text: str) -> list[str]:
    return [self.id_to_piece(i) for i in self.encode(text)]

  def id_to_piece(self, i: int) -> str:
    return self._itos[i] if 0 <= i < self.vocab_size else SPECIAL_PIECES[UNK]

  def save(self, directory: str) -> None:
    _write_json(directory, {'kind': self.kind, 'symbols': self.symbols})

  def __repr__(self):
    return f'{type(self).__name__}(vocab_size={self.vocab_size})'


class CharTokenizer(_VocabTokenizer):
  """One token per Unicode code point (spaces included)."""
  kind = 'char'

  def spans(self, text: str) -> list[tuple[int, int]]:
    """Each token's (begin, end) character offsets in `text`."""
    return [(i, i + 1) for i in range(len(text))]

  def _split(self, text):
    return list(text)

  def _join(self, symbols):
    return ''.join(symbols)


class WordTokenizer(_VocabTokenizer):
  """One token per whitespace-separated word; decode joins with single spaces."""
  kind = 'word'

  def spans(self, text: str) -> list[tuple[int, int]]:
    """Each token's (begin, end) character offsets in `text`."""
    return [m.span() for m in re.finditer(r'\S+', text)]

  def _split(self, text):
    return text.split()

  def _join(self, symbols):
    return ' '.join(symbols)


class SentencePieceTokenizer:
  """A SentencePiece unigram model (Kudo & Richardson 2018), identity normalisation."""
  kind = 'sentencepiece'

  def __init__(self, model_proto: bytes):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    self.model_proto = model_proto
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self.vocab_size = self._sp.vocab_size()
    got = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
    if got != (PAD, BOS, EOS, UNK):
      raise ValueError(f'sentencepiece model has special ids {got}, want {(PAD, BOS, EOS, UNK)}')

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    return self._sp.encode(texts)

  def decode(self, ids: Iterable[int]) -> str:
    return self._sp.decode([i if 0 <= i < self.vocab_size else UNK for i in _strip(ids)])

  def pieces(self, text: str) -> list[str]:
    return self._sp.encode(text, out_type=str)

  def spans(self, text: str) -> list[tuple[int, int]]:
    """Each piece's (begin, end) character offsets in `text` (its surfaces concatenate to the
    text under the identity normalisation; a dummy-prefix '▁' has no surface)."""
    out, at = [], 0
    for piece in self._sp.encode(text, return_type='proto').pieces:
      out.append((at, at + len(piece.surface)))
      at += len(piece.surface)
    return out

  def id_to_piece(self, i: int) -> str:
    return self._sp.id_to_piece(int(i)) if 0 <= i < self.vocab_size else SPECIAL_PIECES[UNK]

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, _SP_MODEL)
    with open(path + '.tmp', 'wb') as f:
      f.write(self.model_proto)
    os.replace(path + '.tmp', path)
    _write_json(directory, {'kind': self.kind, 'model_file': _SP_MODEL})

  def __repr__(self):
    return f'SentencePieceTokenizer(vocab_size={self.vocab_size})'


def _vocab_by_frequency(texts: Iterable[str], split, max_symbols: int | None) -> list[str]:
  """The most frequent symbols (ties by symbol), returned in sorted order (ids follow it)."""
  counts = collections.Counter()
  for t in texts:
    counts.update(split(t))
  ranked = sorted(counts, key=lambda s: (-counts[s], s))
  if max_symbols is not None:
    ranked = ranked[:max(max_symbols, 0)]
  return sorted(ranked)


def _train_sentencepiece(texts: Sequence[str], vocab_size: int, seed: int):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  num_chars = len(set().union(*map(set, texts))) if texts else 0
  # Byte fallback (exact round trip of unseen characters) needs room for 256 byte pieces.
  byte_fallback = vocab_size >= len(SPECIAL_PIECES) + 256 + num_chars
  model = io.BytesIO()
  spm.set_random_generator_seed(seed)
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
        model_type='unigram', pad_id=PAD, bos_id=BOS, eos_id=EOS, unk_id=UNK,
        normalization_rule_name='identity', remove_extra_whitespaces=False,
        byte_fallback=byte_fallback, character_coverage=1.0, hard_vocab_limit=False,
        input_sentence_size=2_000_000, shuffle_input_sentence=True,
        num_threads=1,  # more threads make the result depend on scheduling
        minloglevel=2)
  except RuntimeError as e:
    raise ValueError(f'sentencepiece training failed with vocab_size={vocab_size} on '
                     f'{len(texts)} sentences ({num_chars} distinct characters): {e}') from e
  return SentencePieceTokenizer(model.getvalue())


def train_tokenizer(kind: str, texts: Sequence[str], *, vocab_size: int = 8000,
                    seed: int = 0) -> Tokenizer:
  """Builds a tokenizer from training texts, deterministically.

  char: every character of `texts` (at most vocab_size - 4, the most frequent);
  word: the vocab_size - 4 most frequent words; sentencepiece: a unigram model of at most
  vocab_size pieces (fewer when the texts do not support that many).
  """
  if kind not in TOKENIZERS:
    raise ValueError(f'unknown tokenizer {kind!r}; valid: {", ".join(sorted(TOKENIZERS))}')
  texts = list(texts)
  if kind == 'sentencepiece':
    return _train_sentencepiece(texts, vocab_size, seed)
  cls = TOKENIZERS[kind]
  max_symbols = vocab_size - len(SPECIAL_PIECES)
  split = list if kind == 'char' else str.split
  return cls(_vocab_by_frequency(texts, split, max_symbols))


TOKENIZERS = {'char': CharTokenizer, 'word': WordTokenizer,
              'sentencepiece': SentencePieceTokenizer}


def load_tokenizer(directory: str) -> Tokenizer:
  """Reads a tokenizer written by `tok.save(directory)`."""
  path = os.path.join(directory, _JSON)
  if not os.path.exists(path):
    raise FileNotFoundError(f'no tokenizer at {directory} (missing {_JSON})')
  with open(path, encoding='utf-8') as f:
    meta = json.load(f)
  kind = meta.get('kind')
  if kind == 'sentencepiece':
    model = os.path.join(directory, meta['model_file'])
    with open(model, 'rb') as f:
      data = f.read()
    try:
      return SentencePieceTokenizer(data)
    except RuntimeError as e:   # sentencepiece's parse error: a truncated or foreign file
      raise ValueError(f'{model}: not a readable SentencePiece model ({len(data):,} bytes; '
                       f'{str(e).splitlines()[0][:120]})') from None
  if kind in ('char', 'word'):
    return TOKENIZERS[kind](meta['symbols'])
  raise ValueError(f'{path}: unknown tokenizer kind {kind!r}')


def save_tokenizers(task, directory: str) -> None:
  """Saves task.src_tok and task.tgt_tok under directory/src and directory/tgt."""
  task.src_tok.save(os.path.join(directory, 'src'))
  task.tgt_tok.save(os.path.join(directory, 'tgt'))


def load_tokenizers(directory: str) -> tuple[Tokenizer, Tokenizer]:
  """(src_tok, tgt_tok) saved by `save_tokenizers`."""
  return (load_tokenizer(os.path.join(directory, 'src')),
          load_tokenizer(os.path.join(directory, 'tgt')))


def token_words(tok: Tokenizer, text: str) -> np.ndarray:
  """The word of each of `tok`'s tokens of `text` -> int [T'], words being the whitespace-
  separated tokens of the text (as word aligners read it): a token belongs to the word that
  holds its first non-space character, -1 for a token of spaces alone."""
  bounds = [m.span() for m in re.finditer(r'\S+', text)]
  starts = np.asarray([b for b, _ in bounds], np.int64)
  out = np.full(len(spans := tok.spans(text)), -1, np.int64)
  for k, (b, e) in enumerate(spans):
    piece = text[b:e]
    p = b + len(piece) - len(piece.lstrip())
    if p >= e:
      continue
    w = int(np.searchsorted(starts, p, side='right')) - 1
    if w >= 0 and p < bounds[w][1]:
      out[k] = w
  return out
