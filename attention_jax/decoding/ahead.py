"""A file's decoding programs compiled ahead of use, in a background thread: Translator.decode
knows every chunk's shape before it decodes the first (shapes.py), so while one chunk decodes
the next shapes trace and compile (or are read from the persistent cache) beside it. On a CPU
a decoding loop seldom keeps every core busy (a step is a chain of small dependent operations)
and XLA compiles a program on one thread, so most of a cold file's compiling hides behind its
decoding (docs/performance.md has the measurement).

  programs = Programs(fn)        # fn: inference.make_decoder's (jax.jit, or split_batch's)
  programs.schedule(params, [(rows, length, max_len, factor), ...])   # compiled in this order
  out = programs.get(params, (rows, length, max_len, factor))(params, src)   # src [rows, length]

A program is compiled once per shape and kept (a second translate compiles nothing). Errors of
compiling surface in `get`, in the caller's thread, as they would from calling fn.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable, Sequence

import jax
import numpy as np

Shape = tuple[int, int, int, float | None]   # (rows, source length, max_len, factor)


class Programs:
  """The compiled programs of one decoder, by shape; compiled by one background thread."""

  def __init__(self, fn):
    if not hasattr(fn, 'lower'):
      raise TypeError(f'Programs needs a jax.jit function (with .lower), got {fn!r}')
    self._fn = fn
    self._futures: dict[Shape, concurrent.futures.Future] = {}
    self._pool: concurrent.futures.ThreadPoolExecutor | None = None

  def _compile(self, params, shape: Shape):
    rows, length, max_len, factor = shape
    src = jax.ShapeDtypeStruct((rows, length), np.int32)
    return self._fn.lower(params, src, max_len, factor).compile()

  def schedule(self, params, shapes: Sequence[Shape]) -> None:
    """Starts compiling the shapes not yet compiled or under way, in this order."""
    for shape in shapes:
      if shape not in self._futures:
        if self._pool is None:
          self._pool = concurrent.futures.ThreadPoolExecutor(1, 'compile_ahead')
        self._futures[shape] = self._pool.submit(self._compile, params, shape)

  def get(self, params, shape: Shape) -> Callable:
    """The compiled program of `shape` (waits for it; compiles it now if never scheduled):
    call it as program(params, src)."""
    self.schedule(params, [shape])
    return self._futures[shape].result()

  def cancel(self) -> None:
    """Drops the compilations not yet started (a decode that stopped early): one under way
    finishes in the background."""
    for shape, future in list(self._futures.items()):
      if future.cancel():
        del self._futures[shape]

  @property
  def shapes(self) -> list[Shape]:
    """The shapes compiled (or scheduled), in the order first asked for."""
    return list(self._futures)
