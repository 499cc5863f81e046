"""`load_task(cfg.data)`: prepare (offline) and open a data set, train its tokenizers, batch it.

  task = load_task(cfg.data)                     # deterministic from the config
  task.texts('validation')[0]                    # ('22. November 2026', '2026-11-22')
  it = task.train_iterator(64, seed=0)           # batches forever; it.get_state() / set_state()
  it = task.train_iterator(64, guide_share=1.0)  # ... with 'guide' [B, T, S] (word-level gold)
  for batch in task.eval_batches('test', 64): ...
  save_tokenizers(task, workdir)                 # what a checkpoint needs to decode

Tasks (data.name): the names of loaders.LOADERS (our TFDS builders, CMUdict, a user's text
files, any TFDS translation set; loaders.register_task adds one).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import hashlib

import numpy as np
from absl import logging

from attention_jax.data import batching, builders, cmudict, data_fields, loaders, pharaoh, strips
from attention_jax.data import tokenizers as tok_lib
from attention_jax.data.batching import decode_limit  # re-exported

SPLITS = loaders.SPLITS
WORD_GOLD_TASKS = ('greek_english',)   # the built-in tasks whose examples carry gold word links


def guided_share(index: np.ndarray, share: float) -> np.ndarray:
  """Training example indices [N] -> bool [N]: whether each is among the `share` of pairs
  whose gold guides attention. u = the first 8 bytes of SHA-256(str(index)) / 2^64, in
  [0, 1), and u < share: fixed per example, whatever the batch order, seed or resumption."""
  if not 0.0 <= share <= 1.0:
    raise ValueError(f'the guided share must be in [0, 1], got {share!r}')
  u = [int.from_bytes(hashlib.sha256(str(int(i)).encode()).digest()[:8], 'big') / 2.0**64
       for i in np.asarray(index).ravel()]
  return np.asarray(u, np.float64).reshape(np.shape(index)) < share


def _encode(tok, texts: Sequence[str]) -> batching.Ragged:
  if hasattr(tok, 'encode_batch'):
    return batching.Ragged.from_lists(tok.encode_batch(list(texts)))
  return batching.Ragged.from_lists([tok.encode(t) for t in texts])


def length_stats(lengths: np.ndarray) -> dict[str, float]:
  """min / mean / max and the 50th, 90th, 99th percentiles of token counts."""
  if len(lengths) == 0:
    return {}
  p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
  return {'min': int(lengths.min()), 'mean': float(lengths.mean()), 'p50': float(p50),
          'p90': float(p90), 'p99': float(p99), 'max': int(lengths.max())}


class Task:
  """A tokenized data set with its tokenizers and length buckets (see module doc).

  With `images` ({split: uint8 [N, H, W]}) the sources are images: batches carry them as
  float32 [B, H, W] in [0, 1] (padding -1) in place of token ids, while the source strings
  (what is drawn) still give the length buckets, the records and the heatmaps' labels."""

  def __init__(self, name: str, texts: dict[str, list[tuple[str, str]]], src_tok, tgt_tok, *,
               max_src_len: int, max_tgt_len: int, num_buckets: int,
               bucket_multiple: int = batching.MULTIPLE,
               extras: dict[str, dict[str, list[str]]] | None = None, location: str = '',
               images: dict[str, np.ndarray] | None = None):
    self.name = name
    self.location = location  # where the data lives (a TFDS dir, a corpus dir)
    self._texts = texts
    self._extras = extras or {}
    self._images = images
    self.source = 'tokens' if images is None else 'images'
    self._train_gold: list[pharaoh.Alignment | None] | None = None   # word_gold('train')

    self._limits = dict(max_src_len=max_src_len, max_tgt_len=max_tgt_len,
                        num_buckets=num_buckets, multiple=bucket_multiple)
    self._src_tok, self._tgt_tok = src_tok, tgt_tok
    self._tokenize()

  @classmethod
  def from_pairs(cls, pairs: Sequence[tuple[str, str]], src_tok, tgt_tok, *,
                 references: Sequence[Sequence[str]] | None = None, max_src_len: int,
                 max_tgt_len: int, num_buckets: int, bucket_multiple: int = batching.MULTIPLE,
                 name: str = 'files') -> 'Task':
    """A task over given (source, reference) pairs, e.g. a user's test files, with the
    tokenizers of a trained run; every split holds the pairs (evaluate any of them).
    `references`: every acceptable target per pair, for WER / PER."""
    if not pairs:
      raise ValueError(f'{name}: no sentence pairs')
    texts = {split: list(pairs) for split in SPLITS}
    extras = None
    if references is not None:
      refs = [cmudict.REF_SEP.join(r) for r in references]
      extras = {split: {'refs': refs} for split in SPLITS}
    return cls(name, texts, src_tok, tgt_tok, max_src_len=max_src_len,
               max_tgt_len=max_tgt_len, num_buckets=num_buckets,
               bucket_multiple=bucket_multiple, extras=extras, location='text files')

  def _tokenize(self) -> None:
    """(Re)encodes with the current tokenizers: drops too-long examples, sets the buckets."""
    self._encoded: dict[str, batching.TokenizedSplit] = {}
    self._guides: dict[int, tuple[np.ndarray, ...] | None] = {}   # guide_entries, by index
    train = self.encoded('train')
    max_src_len, max_tgt_len = self._limits['max_src_len'], self._limits['max_tgt_len']
    keep = (train.src_len <= max_src_len) & (train.tgt_len <= max_tgt_len)
    self.kept = np.flatnonzero(keep)  # training examples within the maximum lengths
    self.num_dropped = int(len(train) - len(self.kept))
    if self.num_dropped:
      logging.warning('%s: dropped %d of %d training examples longer than %d source / %d '
                      'target tokens (EOS included; data.max_src_len / data.max_tgt_len)',
                      self.name, self.num_dropped, len(train), max_src_len, max_tgt_len)
    self.buckets = batching.make_buckets(train.src_len[self.kept], train.tgt_len[self.kept],
                                         **self._limits)
    self.has_alignment = (self.name in builders.ALIGNMENTS
                          and self._src_tok.kind == self._tgt_tok.kind == 'char')
    # digit_strips: each digit's box on the image; target token t is digit t with char targets
    self.has_boxes = (self._tgt_tok.kind == 'char'
                      and all('boxes' in self._extras.get(split, {}) for split in SPLITS))

  # Assigning a tokenizer (e.g. one restored with a checkpoint) re-encodes the data.
  @property
  def src_tok(self):
    return self._src_tok

  @src_tok.setter
  def src_tok(self, tok):
    self._src_tok = tok
    self._tokenize()

  @property
  def tgt_tok(self):
    return self._tgt_tok

  @tgt_tok.setter
  def tgt_tok(self, tok):
    self._tgt_tok = tok
    self._tokenize()

  @property
  def splits(self) -> tuple[str, ...]:
    """train, validation, test, then the task's extra test splits (image_dates:
    test_heldout_fonts)."""
    return tuple(self._texts)

  @property
  def test_splits(self) -> tuple[str, ...]:
    """The splits a finished training reports besides validation: test and any extra."""
    return tuple(s for s in self._texts if s not in ('train', 'validation'))

  def _check_split(self, split: str) -> None:
    if split not in self._texts:
      raise ValueError(f'unknown split {split!r} of {self.name}; valid: {", ".join(self.splits)}')

  def texts(self, split: str) -> list[tuple[str, str]]:
    """[(src, tgt)] raw strings of the split, in index order."""
    self._check_split(split)
    return self._texts[split]

  def features(self, split: str) -> dict[str, list[str]]:
    """Extra per-example fields (dates: 'locale', 'style'), in index order; may be empty."""
    self._check_split(split)
    return self._extras.get(split, {})

  def references(self, split: str) -> list[list[str]] | None:
    """Every acceptable target of each example (cmudict: all pronunciations of the word),
    in index order; None for tasks with one reference per source."""
    refs = self.features(split).get('refs')
    return None if refs is None else [r.split(cmudict.REF_SEP) for r in refs]

  @property
  def has_word_gold(self) -> bool:
    """Whether the examples carry word-level gold links (the `links` feature, Pharaoh)."""
    return all('links' in self._extras.get(split, {}) for split in SPLITS)

  def word_gold(self, split: str) -> list[pharaoh.Alignment | None] | None:
    """Each example's gold links over whitespace words (source word, target word), None for
    an example without gold (`gold` feature '0'); None for a task without word-level gold."""
    f = self.features(split)
    if 'links' not in f:
      return None
    has = f.get('gold')
    return [pharaoh.parse(line, where=f'{self.name} {split}[{k}]')
            if has is None or has[k] == '1' else None for k, line in enumerate(f['links'])]

  def token_words(self, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Example `index` of `split` -> (the word of each source token [S'], of each target
    token [T']), -1 for a token of spaces alone (tokenizers.token_words)."""
    src, tgt = self.texts(split)[index]
    return tok_lib.token_words(self.src_tok, src), tok_lib.token_words(self.tgt_tok, tgt)

  def guide_entries(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Training example `index` -> its guide's nonzero entries (target token t [K], source
    token s [K], value [K] float32), None without gold (cached): target token t of word j
    has 1/k on each of the k source tokens of the words that gold links (sure) to j."""
    if index not in self._guides:
      if self._train_gold is None:
        self._train_gold = self.word_gold('train')
      gold = self._train_gold[index]
      entries = None
      if gold is not None:
        sw, tw = self.token_words('train', index)                           # [S'], [T']
        enc = self.encoded('train')
        if (len(sw), len(tw)) != (len(enc.src[index]), len(enc.tgt[index])):
          raise ValueError(f'{self.name} train[{index}]: the tokenizers give {len(sw)}/{len(tw)} '
                           f'token spans for {len(enc.src[index])}/{len(enc.tgt[index])} tokens')
        links = np.asarray(sorted(gold.sure), np.int64).reshape(-1, 2)      # [L, 2] (i, j)
        src_of = sw[None, :] == links[:, :1]                                # [L, S']
        tgt_of = tw[None, :] == links[:, 1:]                                # [L, T']
        linked = (tgt_of.T.astype(np.int64) @ src_of.astype(np.int64)) > 0  # [T', S']
        share = linked / np.maximum(linked.sum(1, keepdims=True), 1)
        t, s = np.nonzero(linked)
        entries = (t.astype(np.int32), s.astype(np.int32), share[t, s].astype(np.float32))
      self._guides[index] = entries
    return self._guides[index]

  def guide(self, batch: dict[str, np.ndarray], share: float = 1.0) -> np.ndarray:
    """A training batch -> float32 [B, T, S] the gold attention of its tgt_out positions
    (guide_entries; objective.guided_alignment): zero rows for target tokens without a link,
    EOS, padding, filler rows, and pairs without gold or outside `share` (guided_share)."""
    src, tgt = batch['src'], batch['tgt_out']
    out = np.zeros((tgt.shape[0], tgt.shape[1], src.shape[1]), np.float32)
    rows = np.flatnonzero(batch['weight'] > 0)
    for r in rows[guided_share(batch['index'][rows], share)]:
      entries = self.guide_entries(int(batch['index'][r]))
      if entries is not None:
        t, s, value = entries
        out[r, t, s] = value
    return out

  def encoded(self, split: str) -> batching.TokenizedSplit:
    """The split's token ids (cached), without BOS/EOS."""
    self._check_split(split)
    if split not in self._encoded:
      pairs = self._texts[split]
      self._encoded[split] = batching.TokenizedSplit(_encode(self.src_tok, [s for s, _ in pairs]),
                                              _encode(self.tgt_tok, [t for _, t in pairs]))
    return self._encoded[split]

  def train_iterator(self, batch_size: int, seed: int = 0, num_devices: int = 1,
                     guide_share: float | None = None) -> batching.TrainIterator:
    """Training batches of [batch_size, S|T] forever, reshuffled from (seed, epoch); with
    guide_share, each also has 'guide' [B, T, S] float32 (`guide`: gold attention on that
    share of the pairs; needs word-level gold, has_word_gold)."""
    batching.check_batch_size(batch_size, num_devices)
    source = self._source_fn('train')
    if guide_share is not None:
      if not self.has_word_gold:
        raise ValueError(f'guided alignment (train.guided_alignment_weight > 0) needs word-level '
                         f'gold alignments; data.name={self.name!r} has none (tasks with them: '
                         f'{", ".join(WORD_GOLD_TASKS)})')
      guided_share(np.zeros(0, np.int64), guide_share)   # its range, before any batch
      images = source

      def source(batch: dict) -> dict:
        guide = self.guide(batch, guide_share)   # from the token batch, before any images
        return {**(batch if images is None else images(batch)), 'guide': guide}
    return batching.TrainIterator(self.encoded('train'), self.kept, self.buckets, batch_size,
                                  seed, source=source)

  @property
  def max_tgt_len(self) -> int:
    return self._limits['max_tgt_len']

  @property
  def image_shape(self) -> tuple[int, int] | None:
    """(H, W) of an image task's batches (its largest image), None for token sources."""
    if self._images is None:
      return None
    shapes = [im.shape[1:3] for im in self._images.values()]
    return max(s[0] for s in shapes), max(s[1] for s in shapes)

  def image(self, split: str, index: int) -> np.ndarray:
    """One source image as float32 [H, W] in [0, 1]."""
    return self._images[split][index].astype(np.float32) / 255.0

  def _source_fn(self, split: str) -> Callable | None:
    """For image tasks: batch -> the batch with `src` = its images (float32 [B, H, W], pixels
    in [0, 1], -1 on padding and filler rows); None for token sources."""
    if self._images is None:
      return None
    images, (h, w) = self._images[split], self.image_shape

    def with_images(batch: dict) -> dict:
      src = np.full((len(batch['index']), h, w), -1.0, np.float32)
      for r in np.flatnonzero(batch['weight'] > 0):
        im = images[batch['index'][r]]
        src[r, :im.shape[0], :im.shape[1]] = im.astype(np.float32) / 255.0
      return {**batch, 'src': src}
    return with_images

  @property
  def eval_limits(self) -> tuple[int, int]:
    """The longest (source, target) an evaluation decodes, in tokens: 4x the training maxima,
    at least 512. Longer examples are skipped and counted (too_long), so one huge line
    cannot make evaluation ask for terabytes or run for days."""
    return (decode_limit(self._limits['max_src_len']), decode_limit(self._limits['max_tgt_len']))

  def eval_rows(self, split: str) -> np.ndarray:
    """Indices of the split's examples within eval_limits."""
    enc = self.encoded(split)
    s, t = self.eval_limits
    return np.flatnonzero((enc.src_len <= s) & (enc.tgt_len <= t))

  def too_long(self, split: str) -> int:
    """How many examples of the split evaluation skips (beyond eval_limits)."""
    return len(self.encoded(split)) - len(self.eval_rows(split))

  def eval_batches(self, split: str, batch_size: int, num_devices: int = 1,
                   num: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Every example of the split within eval_limits (of the first `num`, if given) exactly
    once, fixed order, filler rows with weight 0."""
    batching.check_batch_size(batch_size, num_devices)
    rows = self.eval_rows(split)
    batches = batching.eval_batches(self.encoded(split), self.buckets, batch_size,
                                    rows if num is None else rows[rows < num])
    source = self._source_fn(split)
    return batches if source is None else map(source, batches)

  def eval_shapes(self, split: str) -> tuple[tuple[int, int], ...]:
    """The (S, T) shapes eval_batches(split) uses (the buckets plus any overflow shape)."""
    enc, rows = self.encoded(split), self.eval_rows(split)
    return self.buckets.with_overflow(enc.src_len[rows], enc.tgt_len[rows]).shapes

  def gold_alignment(self, src_ids, tgt_ids) -> np.ndarray | None:
    """src_ids [S'], tgt_ids [T'] (no BOS/EOS) -> int32 [T' + 1] gold source positions for
    the tgt_out positions (the last, EOS, -> S'), -1 where none; None without a gold."""
    if not self.has_alignment:
      return None
    return builders.gold_alignment(self.name, src_ids, tgt_ids)

  def batch_alignment(self, batch: dict[str, np.ndarray]) -> np.ndarray | None:
    """A batch -> int32 [B, T] gold source position per tgt_out position, -1 on padding and
    filler rows; None for tasks without a gold alignment."""
    if not self.has_alignment:
      return None
    src, tgt = batch['src'], batch['tgt_out']
    out = np.full(tgt.shape, -1, np.int32)
    for r in range(len(src)):
      if batch['weight'][r] == 0:
        continue
      n_src, n_tgt = int((src[r] != tok_lib.PAD).sum()) - 1, int((tgt[r] != tok_lib.PAD).sum()) - 1
      gold = builders.gold_alignment(self.name, src[r, :n_src], tgt[r, :n_tgt])
      out[r, :len(gold)] = gold
    return out

  def batch_boxes(self, batch: dict[str, np.ndarray], split: str) -> np.ndarray | None:
    """A batch of `split` -> int32 [B, T, 4] the ink box (y0, x0, y1, x1: half-open, pixels of
    the source image) of the digit each tgt_out position outputs, -1 rows on EOS, padding and
    filler rows (and for a digit off the canvas); None for tasks without boxes (has_boxes)."""
    if not self.has_boxes:
      return None
    boxes, tgt = self.features(split)['boxes'], batch['tgt_out']
    out = np.full((*tgt.shape, 4), -1, np.int32)
    for r in np.flatnonzero(batch['weight'] > 0):
      index = int(batch['index'][r])
      digits = strips.parse_boxes(boxes[index])                  # [n, 4]
      n_tgt = int((tgt[r] != tok_lib.PAD).sum()) - 1                    # without EOS
      if len(digits) != n_tgt:
        raise ValueError(f'{self.name} {split}[{index}]: {len(digits)} boxes for {n_tgt} target '
                         f'tokens (is the batch from split {split!r}?)')
      out[r, :n_tgt] = digits
    return out

  def stats(self, batch_size: int) -> dict[str, Any]:
    """Split sizes, token-length statistics, vocabularies, shapes and padding share."""
    out = {'name': self.name, 'location': self.location,
           'src_vocab': self.src_tok.vocab_size, 'tgt_vocab': self.tgt_tok.vocab_size,
           'bucket_shapes': list(self.buckets.shapes), 'num_dropped': self.num_dropped,
           'splits': {}}
    for split in self.splits:
      enc = self.encoded(split)
      rows = self.kept if split == 'train' else np.arange(len(enc))
      out['splits'][split] = {
          'size': len(enc), 'src_len': length_stats(enc.src.lengths),
          'tgt_len': length_stats(enc.tgt.lengths), 'shapes': list(self.eval_shapes(split)),
          'padding_share': batching.padding_share(enc, rows, self.buckets, batch_size)}
    return out


def load_task(data_cfg, *, seed: int = 0, tokenizers: tuple | None = None) -> Task:
  """Prepares (offline) and opens the data set of `data_cfg` (cfg.data) as a Task.

  Tokenizers (data.tokenizer for the source, data.tgt_tokenizer or else data.tokenizer for the
  target; data.vocab_size, data.tgt_vocab_size for the target when set) are trained on the training split with `seed` (deterministically),
  unless `tokenizers=(src_tok, tgt_tok)` are given, e.g. those saved
  with a checkpoint (`load_tokenizers(workdir)`).
  """
  d = data_cfg
  data_fields.check(d)   # no field the task does not read set
  texts, extras, location, images = loaders.load(d)
  if not texts['train']:
    raise ValueError(f'{d.name}: the training split is empty')
  if tokenizers is None:
    train = texts['train']
    src_tok = tok_lib.train_tokenizer(d.tokenizer, [s for s, _ in train],
                                      vocab_size=d.vocab_size, seed=seed)
    tgt_tok = tok_lib.train_tokenizer(d.get('tgt_tokenizer') or d.tokenizer,
                                      [t for _, t in train],
                                      vocab_size=data_fields.get(d, 'tgt_vocab_size') or d.vocab_size,
                                      seed=seed)
  else:
    src_tok, tgt_tok = tokenizers
  if d.name in builders.ALIGNMENTS and d.tokenizer != 'char':
    logging.warning('%s with tokenizer %r: the gold alignment needs char tokens; none given',
                    d.name, d.tokenizer)
  return Task(d.name, texts, src_tok, tgt_tok, max_src_len=int(d.max_src_len),
              max_tgt_len=int(d.max_tgt_len), num_buckets=int(d.num_buckets),
              bucket_multiple=int(data_fields.get(d, 'bucket_multiple')),
              extras=extras, location=location, images=images)
