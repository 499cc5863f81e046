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


def decode_limit(max_train_len: int) -> int:
  """The longest input (tokens) that evaluation or translation decodes for a run trained up to
  max_train_len tokens: 4x that, at least 512; beyond it the work or memory would be unbounded."""
  return max(512, 4 * max_train_len)


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
class TokenizedSplit:
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
  """Padded shapes (S, T), increasing in both; an example goes to the first that fits it.
  `multiple`: what an extra shape's lengths are rounded up to (with_overflow)."""
  shapes: tuple[tuple[int, int], ...]
  multiple: int = MULTIPLE

  def assign(self, src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
    """src_len, tgt_len [N] -> bucket index [N] (-1 where no shape fits)."""
    out = np.full(len(src_len), -1, np.int64)
    for b in reversed(range(len(self.shapes))):
      s, t = self.shapes[b]
      out[(src_len <= s) & (tgt_len <= t)] = b
    return out

  def with_overflow(self, src_len: np.ndarray, tgt_len: np.ndarray) -> 'Buckets':
    """These shapes plus one more, rounded up to `multiple`, for the examples none fits."""
    over = self.assign(src_len, tgt_len) < 0
    if not over.any():
      return self
    s_max, t_max = self.shapes[-1]
    extra = (max(s_max, round_up(src_len[over].max(), self.multiple)),
             max(t_max, round_up(tgt_len[over].max(), self.multiple)))
    return Buckets(self.shapes + (extra,), self.multiple)


GRID = 48  # make_buckets' candidate lengths per side (exact below this many distinct ones)


def make_buckets(src_len: np.ndarray, tgt_len: np.ndarray, *, num_buckets: int,
                 max_src_len: int, max_tgt_len: int, multiple: int = MULTIPLE) -> Buckets:
  """The at most num_buckets shapes (S, T), increasing in both, lengths multiples of
  `multiple` (or the maxima), the last fitting every (kept) training example, that pad these
  examples least (source + target positions): the optimum, by dynamic programming.

  An example goes to the first shape that fits it, so with shapes increasing in both the
  examples of shape b are those within it but not within shape b-1: with C(S, T) the number of
  examples within (S, T), a chain of shapes costs sum_b (S_b + T_b) (C(S_b, T_b) -
  C(S_b-1, T_b-1)), and cost_k(S, T), the least cost of k shapes ending at (S, T), follows from
  cost_k-1 over the shapes below it. Lengths are the examples' own (rounded up); a side with
  more than GRID distinct ones keeps GRID of them (quantiles; then the optimum over those).
  """
  if num_buckets < 1:
    raise ValueError(f'data.num_buckets must be >= 1, got {num_buckets}')
  if multiple < 1:
    raise ValueError(f'data.bucket_multiple must be >= 1, got {multiple}')
  if len(src_len) == 0:
    raise ValueError('no training example fits data.max_src_len / data.max_tgt_len')
  sizes_s, at_s = _grid(np.asarray(src_len, np.int64), multiple, max_src_len)   # [m], [N]
  sizes_t, at_t = _grid(np.asarray(tgt_len, np.int64), multiple, max_tgt_len)   # [n], [N]
  count = np.zeros((len(sizes_s), len(sizes_t)))
  np.add.at(count, (at_s, at_t), 1)
  within = count.cumsum(0).cumsum(1)                                  # C [m, n]
  width = (sizes_s[:, None] + sizes_t[None, :]).astype(np.float64)     # S + T [m, n]
  m, n = within.shape
  cost, back = [width * within], [None]    # cost[k-1]: k shapes; back: argmin below each
  for _ in range(1, num_buckets):
    prev, new = cost[-1], np.full((m, n), np.inf)
    arg = np.zeros((m, n), np.int64)
    for i in range(m):
      for j in range(n):
        below = prev[:i + 1, :j + 1] - width[i, j] * within[:i + 1, :j + 1]
        below[i, j] = np.inf                                  # the previous shape is smaller
        arg[i, j] = int(np.argmin(below))
        new[i, j] = below.flat[arg[i, j]] + width[i, j] * within[i, j]
    cost.append(new)
    back.append(arg)
  k = int(np.argmin([c[-1, -1] for c in cost]))   # the fewest shapes among the cheapest
  i, j, shapes = m - 1, n - 1, []
  while True:
    shapes.append((int(sizes_s[i]), int(sizes_t[j])))
    if k == 0:
      return Buckets(tuple(shapes[::-1]), multiple)
    i, j = divmod(int(back[k][i, j]), j + 1)
    k -= 1


def _grid(length: np.ndarray, multiple: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
  """length [N] -> (candidate sizes [<= GRID], increasing; each example's smallest fitting
  one [N]): the lengths rounded up to `multiple`, capped at `cap`."""
  rounded = np.minimum(-(-length // multiple) * multiple, cap)
  sizes = np.unique(rounded)
  if len(sizes) > GRID:
    sizes = np.unique(np.quantile(rounded, np.arange(1, GRID + 1) / GRID, method='higher'))
  return sizes, np.searchsorted(sizes, rounded)


def make_batch(enc: TokenizedSplit, rows: Sequence[int], shape: tuple[int, int],
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

  def __init__(self, enc: TokenizedSplit, kept: np.ndarray, buckets: Buckets, batch_size: int,
               seed: int, source: Callable[[dict], dict] | None = None):
    self._enc = enc
    self._source = source   # batch -> batch with other sources (Task: images), or None
    self._kept = np.asarray(kept, np.int64)
    self._use(buckets)
    self.batch_size, self.seed = int(batch_size), int(seed)
    self._epoch, self._position = 0, 0
    self._plan = self._epoch_plan(0)

  def _use(self, buckets: Buckets) -> None:
    bucket = buckets.assign(self._enc.src_len[self._kept], self._enc.tgt_len[self._kept])
    if (bucket < 0).any():
      raise ValueError(f'a kept training example fits none of the bucket shapes {buckets.shapes}')
    self._buckets, self._bucket = buckets, bucket

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
            'batch_size': self.batch_size, 'num_examples': int(len(self._kept)),
            'buckets': [list(shape) for shape in self._buckets.shapes]}

  def set_state(self, state: dict) -> None:
    """Also takes the state's bucket shapes (a run keeps the shapes it started with, should
    make_buckets choose others in a later version); a state without them keeps these."""
    for key in ('seed', 'batch_size', 'num_examples'):
      if int(state[key]) != self.get_state()[key]:
        raise ValueError(f'iterator state is for {key}={state[key]}, this iterator has '
                         f'{self.get_state()[key]} (a different data or batch config)')
    if 'buckets' in state:
      self._use(Buckets(tuple(tuple(int(x) for x in shape) for shape in state['buckets']),
                        self._buckets.multiple))
    self._epoch, self._position = int(state['epoch']), int(state['position'])
    self._plan = self._epoch_plan(self._epoch)


def eval_batches(enc: TokenizedSplit, buckets: Buckets, batch_size: int,
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


def padding_share(enc: TokenizedSplit, rows: np.ndarray, buckets: Buckets, batch_size: int) -> float:
  """The share of PAD positions (src + tgt, filler rows included) in one pass over `rows`."""
  buckets = buckets.with_overflow(enc.src_len[rows], enc.tgt_len[rows])
  assigned = buckets.assign(enc.src_len[rows], enc.tgt_len[rows])
  total = 0
  for b, (s, t) in enumerate(buckets.shapes):
    n = int((assigned == b).sum())
    total += -(-n // batch_size) * batch_size * (s + t)
  real = int(enc.src_len[rows].sum() + enc.tgt_len[rows].sum())
  return 1.0 - real / total if total else 0.0
