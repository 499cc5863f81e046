"""Length buckets, padded batches, the resumable training iterator and evaluation batches.

A batch is a dict of numpy arrays, with (S, T) one of a few bucket shapes:
  src      int32   [B, S]  source ids + EOS, then PAD
  tgt_in   int32   [B, T]  BOS + target ids, then PAD
  tgt_out  int32   [B, T]  target ids + EOS, then PAD
  weight   float32 [B]     1 for real rows, 0 for all-PAD filler rows
  index    int32   [B]     the example's index within its split, -1 for filler
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence

import numpy as np

from attention_jax.symbols import BOS, EOS, PAD

MULTIPLE = 8  # bucket lengths are rounded up to a multiple of this


def round_up(n: int, multiple: int = MULTIPLE) -> int:
  return int(-(-int(n) // multiple) * multiple)


@dataclasses.dataclass(frozen=True)
class Ragged:
  """Token id sequences of one split: values int32 [sum of lengths], offsets int64 [N + 1]."""
  values: np.ndarray
  offsets: np.ndarray

  @classmethod
  def from_lists(cls, seqs: Sequence[Sequence[int]]) -> 'Ragged':
    lengths = np.fromiter((len(s) for s in seqs), np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter((i for s in seqs for i in s), np.int32, count=int(offsets[-1]))
    return cls(values, offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def __getitem__(self, i: int) -> np.ndarray:
    return self.values[self.offsets[i]:self.offsets[i + 1]]

  @property
  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)


@dataclasses.dataclass(frozen=True)
class Encoded:
  """A tokenized split. src_len / tgt_len [N]: padded lengths needed (tokens + EOS)."""
  src: Ragged
  tgt: Ragged

  def __len__(self) -> int:
    return len(self.src)

  @property
  def src_len(self) -> np.ndarray:
    return self.src.lengths + 1

  @property
  def tgt_len(self) -> np.ndarray:
    return self.tgt.lengths + 1


@dataclasses.dataclass(frozen=True)
class Buckets:
  """Padded shapes (S, T), increasing in both; an example goes to the first that fits it."""
  shapes: tuple[tuple[int, int], ...]

  def assign(self, src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
    """src_len, tgt_len [N] -> bucket index [N] (-1 where no shape fits)."""
    out = np.full(len(src_len), -1, np.int64)
    for b in reversed(range(len(self.shapes))):
      s, t = self.shapes[b]
      out[(src_len <= s) & (tgt_len <= t)] = b
    return out

  def with_overflow(self, src_len: np.ndarray, tgt_len: np.ndarray) -> 'Buckets':
    """These shapes plus one more, rounded up to MULTIPLE, for the examples none fits."""
    over = self.assign(src_len, tgt_len) < 0
    if not over.any():
      return self
    s_max, t_max = self.shapes[-1]
    extra = (max(s_max, round_up(src_len[over].max())), max(t_max, round_up(tgt_len[over].max())))
    return Buckets(self.shapes + (extra,))


def make_buckets(src_len: np.ndarray, tgt_len: np.ndarray, *, num_buckets: int,
                 max_src_len: int, max_tgt_len: int) -> Buckets:
  """At most num_buckets shapes, lengths rounded up to a multiple of 8 and capped at the
  maxima, that pad the (kept) training examples least; the last fits them all.

  Candidates: the quantiles k/num_buckets of each side's lengths (zipped), and the optimal
  split of the examples by source (or by target) length into contiguous ranges (dynamic
  programming, each range's other side padded to its longest). The candidate with the fewest
  padded tokens wins. On the dates task this is the optimum over multiples of 8.
  """
  if num_buckets < 1:
    raise ValueError(f'data.num_buckets must be >= 1, got {num_buckets}')
  if len(src_len) == 0:
    raise ValueError('no training example fits data.max_src_len / data.max_tgt_len')
  src_len, tgt_len = np.asarray(src_len, np.int64), np.asarray(tgt_len, np.int64)
  q = np.arange(1, num_buckets + 1) / num_buckets
  s = [min(round_up(x), max_src_len) for x in np.quantile(src_len, q, method='higher')]
  t = [min(round_up(x), max_tgt_len) for x in np.quantile(tgt_len, q, method='higher')]
  candidates = [_monotone(s, t),
                _monotone(*_split(src_len, tgt_len, num_buckets, max_src_len, max_tgt_len)),
                _monotone(*_split(tgt_len, src_len, num_buckets, max_tgt_len, max_src_len)[::-1])]
  return min(candidates, key=lambda b: _padded_tokens(b, src_len, tgt_len))


def _monotone(s: Sequence[int], t: Sequence[int]) -> Buckets:
  """Shapes increasing in both S and T (running maxima), duplicates dropped."""
  return Buckets(tuple(sorted(set(zip(np.maximum.accumulate(s).tolist(),
                                      np.maximum.accumulate(t).tolist())))))


def _padded_tokens(buckets: Buckets, src_len: np.ndarray, tgt_len: np.ndarray) -> int:
  """Source + target positions (real and PAD) of the examples padded to their buckets."""
  shapes = np.asarray(buckets.shapes, np.int64)
  return int(shapes[buckets.assign(src_len, tgt_len)].sum())


def _split(key: np.ndarray, other: np.ndarray, num_buckets: int, max_key: int,
           max_other: int) -> tuple[list[int], list[int]]:
  """The split of the examples by `key` length into at most num_buckets contiguous ranges
  with the fewest padded positions, each range padded to its longest key and other side
  (rounded up to MULTIPLE, capped at the maxima). -> (key sizes, other sizes), increasing key."""
  key_r = np.minimum(-(-key // MULTIPLE) * MULTIPLE, max_key)
  other_r = np.minimum(-(-other // MULTIPLE) * MULTIPLE, max_other)
  sizes, group = np.unique(key_r, return_inverse=True)           # [M] distinct key sizes
  m = len(sizes)
  count = np.bincount(group, minlength=m)
  longest = np.zeros(m, np.int64)
  np.maximum.at(longest, group, other_r)
  # cost[k][j]: fewest padded positions of groups 0..j-1 in k buckets; prev: the argmin
  inf = float('inf')
  cost = np.full((num_buckets + 1, m + 1), inf)
  prev = np.zeros((num_buckets + 1, m + 1), np.int64)
  cost[0, 0] = 0.0
  for k in range(1, num_buckets + 1):
    for j in range(1, m + 1):
      n, o = 0, 0
      for i in range(j - 1, -1, -1):     # groups i..j-1 in one bucket (sizes[j-1], o)
        n, o = n + count[i], max(o, longest[i])
        c = cost[k - 1, i] + n * (sizes[j - 1] + o)
        if c < cost[k, j]:
          cost[k, j], prev[k, j] = c, i
  k, j = int(np.argmin(cost[:, m])), m
  keys, others = [], []
  while j > 0:
    i = int(prev[k, j])
    keys.append(int(sizes[j - 1]))
    others.append(int(longest[i:j].max()))
    k, j = k - 1, i
  return keys[::-1], others[::-1]


def make_batch(enc: Encoded, rows: Sequence[int], shape: tuple[int, int],
               batch_size: int) -> dict[str, np.ndarray]:
  """Example indices `rows` (at most batch_size) -> a padded batch of [batch_size, S|T]."""
  s, t = shape
  src = np.full((batch_size, s), PAD, np.int32)
  tgt_in = np.full((batch_size, t), PAD, np.int32)
  tgt_out = np.full((batch_size, t), PAD, np.int32)
  weight = np.zeros(batch_size, np.float32)
  index = np.full(batch_size, -1, np.int32)
  for r, i in enumerate(rows):
    x, y = enc.src[i], enc.tgt[i]
    src[r, :len(x)] = x
    src[r, len(x)] = EOS
    tgt_in[r, 0] = BOS
    tgt_in[r, 1:len(y) + 1] = y
    tgt_out[r, :len(y)] = y
    tgt_out[r, len(y)] = EOS
    weight[r] = 1.0
    index[r] = i
  return {'src': src, 'tgt_in': tgt_in, 'tgt_out': tgt_out, 'weight': weight, 'index': index}


def check_batch_size(batch_size: int, num_devices: int) -> None:
  if batch_size < 1 or num_devices < 1:
    raise ValueError(f'batch size ({batch_size}) and device count ({num_devices}) must be >= 1')
  if batch_size % num_devices:
    suggestion = max(1, batch_size // num_devices) * num_devices
    raise ValueError(f'batch size {batch_size} is not divisible by the device count '
                     f'{num_devices}: use a multiple of {num_devices} '
                     f'(e.g. --config.data.batch_size={suggestion})')


class TrainIterator:
  """Bucketed training batches forever, epoch after epoch, resumable exactly.

  Epoch e: the kept examples are permuted with rng(seed, e), cut into batches within each
  bucket (a bucket's last, partial batch is filled with weight-0 rows), and the batches are
  shuffled with the same rng. `get_state()` is a small JSON-able dict; `set_state(state)`
  makes the next batch the one that followed when the state was taken.
  """

  def __init__(self, enc: Encoded, kept: np.ndarray, buckets: Buckets, batch_size: int,
               seed: int, source: Callable[[dict], dict] | None = None):
    self._enc, self._buckets = enc, buckets
    self._source = source   # batch -> batch with other sources (Task: images), or None
    self._kept = np.asarray(kept, np.int64)
    self._bucket = buckets.assign(enc.src_len[self._kept], enc.tgt_len[self._kept])
    if (self._bucket < 0).any():
      raise ValueError('a kept training example fits no bucket')
    self.batch_size, self.seed = int(batch_size), int(seed)
    self._epoch, self._position = 0, 0
    self._plan = self._epoch_plan(0)

  def _epoch_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    """[(bucket, example indices [<= B])] in this epoch's order."""
    rng = np.random.default_rng([self.seed, epoch])
    perm = rng.permutation(len(self._kept))
    plan = []
    for b in range(len(self._buckets.shapes)):
      members = self._kept[perm[self._bucket[perm] == b]]
      plan += [(b, members[i:i + self.batch_size])
               for i in range(0, len(members), self.batch_size)]
    order = rng.permutation(len(plan))
    return [plan[k] for k in order]

  @property
  def batches_per_epoch(self) -> int:
    return len(self._plan)

  def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._position >= len(self._plan):
      self._epoch, self._position = self._epoch + 1, 0
      self._plan = self._epoch_plan(self._epoch)
    b, rows = self._plan[self._position]
    self._position += 1
    batch = make_batch(self._enc, rows, self._buckets.shapes[b], self.batch_size)
    return batch if self._source is None else self._source(batch)

  def get_state(self) -> dict:
    return {'epoch': self._epoch, 'position': self._position, 'seed': self.seed,
            'batch_size': self.batch_size, 'num_examples': int(len(self._kept))}

  def set_state(self, state: dict) -> None:
    for key in ('seed', 'batch_size', 'num_examples'):
      if int(state[key]) != self.get_state()[key]:
        raise ValueError(f'iterator state is for {key}={state[key]}, this iterator has '
                         f'{self.get_state()[key]} (a different data or batch config)')
    self._epoch, self._position = int(state['epoch']), int(state['position'])
    self._plan = self._epoch_plan(self._epoch)


def eval_batches(enc: Encoded, buckets: Buckets, batch_size: int,
                 rows: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Every example (of `rows`, default all) once, in a fixed order (by bucket, then index); a
  longer example than the largest bucket gets one extra shape (see Buckets.with_overflow),
  never truncated."""
  rows = np.arange(len(enc)) if rows is None else np.asarray(rows)
  buckets = buckets.with_overflow(enc.src_len[rows], enc.tgt_len[rows])
  assigned = buckets.assign(enc.src_len[rows], enc.tgt_len[rows])
  for b, shape in enumerate(buckets.shapes):
    members = rows[assigned == b]
    for i in range(0, len(members), batch_size):
      yield make_batch(enc, members[i:i + batch_size], shape, batch_size)


def padding_share(enc: Encoded, rows: np.ndarray, buckets: Buckets, batch_size: int) -> float:
  """The share of PAD positions (src + tgt, filler rows included) in one pass over `rows`."""
  buckets = buckets.with_overflow(enc.src_len[rows], enc.tgt_len[rows])
  assigned = buckets.assign(enc.src_len[rows], enc.tgt_len[rows])
  total = 0
  for b, (s, t) in enumerate(buckets.shapes):
    n = int((assigned == b).sum())
    total += -(-n // batch_size) * batch_size * (s + t)
  real = int(enc.src_len[rows].sum() + enc.tgt_len[rows].sum())
  return 1.0 - real / total if total else 0.0
