"""The bounded set of shapes that decoding compiles: a jit-compiled decoder compiles once per
(rows, source length) it is called with, so a file of varied lengths decoded at its own
lengths compiles dozens of programs (most of a first translate's time). Sources are padded to
geometric length buckets (GROWTH, multiples of MULTIPLE) and chunks to powers of two rows:

  length_bucket(37)            # -> 40
  buckets(256)                 # -> [8, 16, 24, 32, 40, 56, 72, 96, 120, 152, 192, 240, 304]
  row_bucket(21, most=256)     # -> 32

A length bucket wastes at most GROWTH - 1 of a row (plus the rounding to MULTIPLE); a chunk's
rows at most half of them (its last chunk per bucket only). A file whose sources have at most
L tokens compiles at most 2 x len(buckets(L)) programs per decoding setting: per bucket, its
full chunks and one tail (tests/test_translate.py checks outputs do not depend on it).
"""

from __future__ import annotations

from attention_jax.data.batching import round_up

GROWTH = 1.25   # each length bucket at most this times the one below (then rounded up)
MULTIPLE = 8    # bucket lengths are multiples of this (as training's: data.bucket_multiple)


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


def row_bucket(n: int, most: int) -> int:
  """The rows a chunk of n sources is padded to: the next power of two, at most `most` (a
  power of two itself: a bucket's full chunks)."""
  if not 1 <= n <= most:
    raise ValueError(f'a chunk has 1..{most} rows, got {n}')
  return min(1 << (n - 1).bit_length(), most)

