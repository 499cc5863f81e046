"""The bounded set of shapes that decoding compiles: a jit-compiled decoder compiles once per
(rows, source length) it is called with, so a file of varied lengths decoded at its own
lengths compiles dozens of programs (most of a first translate's time). Sources, sorted by
length, go in full chunks of geometric length buckets (GROWTH, multiples of MULTIPLE; on one
core, where compiling cannot hide behind decoding, the coarser GROWTH_ONE_CORE: growth()): each
chunk takes the smallest bucket L whose full chunk (the most rows that fit at L, a power of
two) holds its sources, so every chunk but a call's last has the shape of its bucket's full
chunk; the last is padded to that where it pads at most 1 / ROWS_PER_OCTAVE of the call's
rows, else to one of ROWS_PER_OCTAVE row counts per octave:

  length_bucket(37)            # -> 40
  buckets(256)                 # -> [8, 16, 24, 32, 40, 56, 72, 96, 120, 152, 192, 240, 304]
  buckets(256, growth(1))      # -> [8, 16, 32, 64, 128, 256] (one core)
  row_bucket(21, most=256)     # -> 22 (16-32 in steps of 2); row_bucket(130, 256) -> 144
  tail_rows(5, most=8, rows=93)   # -> 8: 3 padding rows of 93

A call whose sources have at most L tokens compiles at most len(buckets(L)) + 1 programs per
decoding setting. Only a last chunk pads rows (under 1 / ROWS_PER_OCTAVE of the call's); a
source is padded to its bucket (at most GROWTH - 1 of its length, plus the rounding to
MULTIPLE) or, in a chunk across a bucket's edge, to a bucket above, which costs about as
much work as it saves padding rows (docs/performance.md, "What was tried");
tests/test_translate.py checks that outputs do not depend on it.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
from typing import Any, Iterator, Sequence

from attention_jax.data.batching import round_up
from attention_jax.decoding import greedy

GROWTH = 1.25   # each length bucket at most this times the one below (then rounded up)
GROWTH_ONE_CORE = 2.0   # ... where compiling and decoding share one core (growth())
MULTIPLE = 8    # bucket lengths are multiples of this (as training's: data.bucket_multiple)
ROWS_PER_OCTAVE = 8   # row counts of a bucket's last chunk between 2^k and 2^(k+1) (a power of 2)
CACHE_FALLBACK = 2 ** 20   # a CPU core's L2 cache where the OS does not say (1 MiB)
CACHE_LEAST_ROWS = 4  # a device's rows under a cache budget never fall below this
KV_SEGMENTS_ONE_CORE_BEAM = (32, 6)   # (shortest, most) KV cache segments: kv_segments()


def length_bucket(n: int, growth: float = GROWTH, multiple: int = MULTIPLE) -> int:
  """The padded length of a source of n tokens: the smallest of buckets(n) that holds it."""
  if n < 1:
    raise ValueError(f'a source has at least 1 token (EOS), got {n}')
  if not growth > 1:
    raise ValueError(f'growth must be > 1, got {growth!r}')
  b = multiple
  while b < n:
    b = max(b + multiple, round_up(int(b * growth), multiple))
  return b


def buckets(limit: int, growth: float = GROWTH, multiple: int = MULTIPLE) -> list[int]:
  """Every length bucket up to the one that holds `limit` tokens, increasing."""
  out = [multiple]
  while out[-1] < limit:
    out.append(length_bucket(out[-1] + 1, growth, multiple))
  return out


def _cores(cores: int | None) -> int:
  """`cores`, or the CPU cores this process may run on (os.sched_getaffinity) for None."""
  cores = len(os.sched_getaffinity(0)) if cores is None else cores
  if cores < 1:
    raise ValueError(f'cores must be >= 1, got {cores!r}')
  return cores


def growth(cores: int | None = None) -> float:
  """The bucket growth for a process that may run on `cores` CPU cores (default: those of
  os.sched_getaffinity). With two or more, one core compiles the next shapes while the others
  decode (ahead.py), so fine buckets (GROWTH) cost little compiling and pad little. On one,
  compiling and decoding take turns: every program adds its whole compile time to the
  wall time (1.5-2 s for the bench's RNN), and coarser buckets (GROWTH_ONE_CORE: 4 programs
  instead of 10 for sources of 10-250 symbols) cost less than their padding
  (docs/performance.md, "One core")."""
  cores = _cores(cores)
  return GROWTH if cores > 1 else GROWTH_ONE_CORE


def kv_segments(beam: int, cores: int | None = None) -> tuple[int, int] | None:
  """The bounds (shortest, most) of a Transformer's KV cache segments (cache_lengths) for
  decoding with `beam` hypotheses per sentence in a process that may run on `cores` CPU
  cores (default: os.sched_getaffinity's); None: the model's defaults (at most 3 segments,
  none under 64 positions). Beam search on one core takes KV_SEGMENTS_ONE_CORE_BEAM, finer:
  there each step reorders the beam's whole cache, so shorter caches early on save more
  than the extra loops cost to compile; greedy decoding, which reorders nothing, and two or
  more cores, where compiling takes a core of its own, keep the defaults (finer is slower
  there: docs/performance.md, "What was tried")."""
  cores = _cores(cores)
  return KV_SEGMENTS_ONE_CORE_BEAM if beam > 1 and cores == 1 else None


def tail_rows(n: int, most: int, rows: int, per_octave: int = ROWS_PER_OCTAVE) -> int:
  """The rows a last chunk of n sources is padded to, when a call decodes `rows` sources and
  full chunks at its length have `most`: `most` itself (the full chunks' shape: no program
  more) where that pads at most 1 / per_octave of the rows, else row_bucket(n, most)."""
  if not 1 <= n <= min(most, rows):
    raise ValueError(f'a last chunk has 1..{min(most, rows)} rows, got {n}')
  if (most - n) * per_octave <= rows:
    return most
  return row_bucket(n, most, per_octave)


def row_bucket(n: int, most: int, per_octave: int = ROWS_PER_OCTAVE) -> int:
  """The rows a chunk of n sources is padded to, at most `most` (a power of two: a bucket's
  full chunks): n itself up to per_octave rows (a power of two itself), else the next multiple of
  2^k / per_octave for 2^k < n <= 2^(k+1), so at most 1 / per_octave of the rows are padding.
  per_octave 1: the next power of two."""
  if not 1 <= n <= most:
    raise ValueError(f'a chunk has 1..{most} rows, got {n}')
  if per_octave < 1 or per_octave & (per_octave - 1):
    raise ValueError(f'per_octave must be a power of two, got {per_octave!r}')
  if n <= per_octave:
    return n
  step = (1 << ((n - 1).bit_length() - 1)) // per_octave
  return min(-(-n // step) * step, most)



@functools.cache
def l2_bytes() -> int:
  """One CPU core's L2 cache in bytes, as Linux reports it (sysfs), else CACHE_FALLBACK."""
  for d in sorted(glob.glob('/sys/devices/system/cpu/cpu0/cache/index*')):
    try:
      with open(os.path.join(d, 'level')) as f, open(os.path.join(d, 'size')) as g:
        if f.read().strip() == '2':
          size = g.read().strip().upper()
          scale = {'K': 2 ** 10, 'M': 2 ** 20}.get(size[-1:], 1)
          return int(size.rstrip('KM')) * scale
    except (OSError, ValueError):
      break
  return CACHE_FALLBACK


def cache_rows(row_bytes: int, budget: int, least: int = CACHE_LEAST_ROWS) -> int:
  """The rows one device decodes at a time when each reads `row_bytes` per step: the largest
  power of two whose rows fit `budget` bytes, at least `least` (a step's fixed cost then
  dominates). A CPU decoding loop is bound by reading the attention's memory every step:
  kept in the core's cache it runs faster than streamed from RAM (docs/performance.md)."""
  if row_bytes < 1 or budget < 1 or least < 1:
    raise ValueError(f'row_bytes, budget and least must be positive, got {row_bytes!r}, '
                     f'{budget!r}, {least!r}')
  rows = least
  while 2 * rows * row_bytes <= budget:
    rows *= 2
  return rows


@dataclasses.dataclass(frozen=True)
class Planner:
  """How a list of sources is cut into chunks of (rows, padded length) for decoding: each
  chunk's attention weights and caches within memory_budget bytes, on CPUs its attention's
  reads per row and step within cache_budget (2x a core's L2), and few shapes compiled.

  configs: the decoded models' configs (their cache_width and memory_width); factor: the output
  limit's (greedy.max_output_len); bucket_growth: geometric length buckets (None: multiples of
  8, chunks as they come); devices: the local devices a chunk's rows are shared among."""
  configs: Sequence[Any]
  factor: float
  chunk_size: int = 256
  memory_budget: int = 256 * 2 ** 20
  cache_budget: int | None = None
  bucket_growth: float | None = GROWTH
  rows_per_octave: int = ROWS_PER_OCTAVE
  devices: int = 1

  def length(self, n: int) -> int:
    """The padded length of a batch whose longest source has n tokens: a length bucket
    (few compiled shapes), or with bucket_growth None a multiple of 8."""
    if self.bucket_growth is None:
      return max(MULTIPLE, round_up(n, MULTIPLE))
    return length_bucket(n, self.bucket_growth)

  def fits(self, rows: int, length: int, hyps: int) -> bool:
    """Whether the attention weights [rows x hyps, L, S] and decoder caches [rows x hyps, L,
    cache_width] of a chunk of sources padded to `length` fit memory_budget."""
    return (rows * hyps * (length + sum(c.cache_width for c in self.configs))
            * greedy.max_output_len(length, self.factor) * 4 <= self.memory_budget)

  def cache_cap(self, length: int, hyps: int) -> int:
    """The most rows of a chunk of sources padded to `length` under cache_budget: each of the
    devices (inference.split_batch shares a chunk's rows among them) decodes cache_rows of
    the bytes its attention reads per row and step (the memory, and a Transformer's KV caches
    per hypothesis); no cap without a cache_budget."""
    if self.cache_budget is None:
      return self.chunk_size
    steps = greedy.max_output_len(length, self.factor)
    row_bytes = 4 * sum(length * c.memory_width + hyps * steps * c.cache_width
                        for c in self.configs)
    return self.devices * cache_rows(row_bytes, self.cache_budget)

  def most(self, length: int, hyps: int) -> int:
    """A full chunk's rows for sources padded to `length`: the most, a power of two, within
    chunk_size, memory_budget (fits) and, on CPUs, the cache (cache_cap); at least 1."""
    most = 1
    cap = min(self.chunk_size, self.cache_cap(length, hyps))
    while 2 * most <= cap and self.fits(2 * most, length, hyps):
      most *= 2
    return most

  def chunks(self, todo: list[int], lengths: list[int], hyps: int
             ) -> Iterator[tuple[list[int], tuple[int, int]]]:
    """Consecutive slices of `todo` (sorted by length; lengths in tokens, EOS included), each
    with its padded (rows, length): at most chunk_size rows whose weights and caches fit
    memory_budget (fits; at least one row) and, on CPUs, whose attention reads stay in cache
    (cache_cap). With length buckets, each slice is a full chunk of the smallest bucket that
    holds its rows: (most(L), L), one shape per bucket whatever the file; only the last slice
    has fewer rows, padded to a full chunk's where that pads at most 1 / rows_per_octave of
    the rows, else to one of rows_per_octave counts per octave (tail_rows). A source is padded
    to its own bucket, or (a slice across a bucket's edge) to the next ones up."""
    start = 0
    if self.bucket_growth is None:
      while start < len(todo):
        end = start + 1
        while (end < min(len(todo), start + self.chunk_size)
               and self.fits(end + 1 - start, self.length(lengths[end]), hyps)
               and end - start < self.cache_cap(self.length(lengths[end]), hyps)):
          end += 1
        yield todo[start:end], (end - start, self.length(lengths[end - 1]))
        start = end
      return
    while start < len(todo):
      length = self.length(lengths[start])
      while True:   # the smallest bucket whose full chunk holds the next rows
        most = self.most(length, hyps)
        end = min(start + most, len(todo))
        if lengths[end - 1] <= length:
          break
        length = self.length(length + 1)
      n = end - start
      yield todo[start:end], (tail_rows(n, most, len(todo), self.rows_per_octave), length)
      start = end
