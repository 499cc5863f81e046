"""The bounded set of shapes that decoding compiles: a jit-compiled decoder compiles once per
(rows, source length) it is called with, so a file of varied lengths decoded at its own
lengths compiles dozens of programs (most of a first translate's time). Sources are padded to
geometric length buckets (GROWTH, multiples of MULTIPLE) and a bucket's last chunk to its
full chunks' rows (a power of two) where that pads at most 1 / ROWS_PER_OCTAVE of the
bucket's rows, else to one of ROWS_PER_OCTAVE row counts per octave:

  length_bucket(37)            # -> 40
  buckets(256)                 # -> [8, 16, 24, 32, 40, 56, 72, 96, 120, 152, 192, 240, 304]
  row_bucket(21, most=256)     # -> 22 (16-32 in steps of 2); row_bucket(130, 256) -> 144
  tail_rows(5, most=8, bucket_rows=93)   # -> 8: 3 padding rows of 93 (one program a bucket)

A length bucket wastes at most GROWTH - 1 of a row (plus the rounding to MULTIPLE); the rows
at most 1 / ROWS_PER_OCTAVE of a bucket's (its last chunk only: padded to a power of two, as
before 2026-11-28, a uniform file's decoding did 1.49x the rows x steps its sentences need;
so, 1.13x: docs/performance.md). A file whose sources have at most L tokens compiles at most
2 x len(buckets(L)) programs per decoding setting: per bucket, its full chunks and one tail,
and one program for a bucket of many chunks (on CPUs chunks are small: a bucket's tail takes
its full chunks' shape; tests/test_translate.py checks outputs do not depend on it); another
file's tails may need other programs (fewer shared through the compilation cache).
"""

from __future__ import annotations

import functools
import glob
import os

from attention_jax.data.batching import round_up

GROWTH = 1.25   # each length bucket at most this times the one below (then rounded up)
MULTIPLE = 8    # bucket lengths are multiples of this (as training's: data.bucket_multiple)
ROWS_PER_OCTAVE = 8   # row counts of a bucket's last chunk between 2^k and 2^(k+1) (a power of 2)
CACHE_FALLBACK = 2 ** 20   # a CPU core's L2 cache where the OS does not say (1 MiB)
CACHE_LEAST_ROWS = 4  # a device's rows under a cache budget never fall below this


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


def tail_rows(n: int, most: int, bucket_rows: int, per_octave: int = ROWS_PER_OCTAVE) -> int:
  """The rows a bucket's last chunk of n sources is padded to, when the bucket has
  `bucket_rows` sources in chunks of `most`: `most` itself (the shape of its full chunks:
  one program for the bucket) where that pads at most 1 / per_octave of the bucket's rows,
  else row_bucket(n, most)."""
  if not 1 <= n <= min(most, bucket_rows):
    raise ValueError(f'a last chunk has 1..{min(most, bucket_rows)} rows, got {n}')
  if (most - n) * per_octave <= bucket_rows:
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
  kept in the core's cache it runs 1.4-2.1x faster than streamed from RAM (docs/performance.md)."""
  if row_bytes < 1 or budget < 1 or least < 1:
    raise ValueError(f'row_bytes, budget and least must be positive, got {row_bytes!r}, '
                     f'{budget!r}, {least!r}')
  rows = least
  while 2 * rows * row_bytes <= budget:
    rows *= 2
  return rows
