"""Source encoders, found by name (model.encoder): a batch of sources -> the memory a decoder
attends over. The RNN decoders (Bahdanau, Luong) and the Transformer decoder read any of them.

  enc = encoder(src, dropout_key=None)  # Encoded: annotations [B, S, K], mask [B, S], summary [B, K]
  encoder.source_mask(src)              # [B, S] bool: the memory's real positions, cheaply
  encoder.grid(src.shape)               # (H', W') when the S positions are a 2-D grid, else None

Sources are what a task gives:
  tokens  [B, S] int32, 0 = padding                         'rnn' (rnn_encoder.py)
  images  [B, H, W] or [B, H, W, C] float, pixels in [0, 1],
          padding -1 (variable-size images padded)          'cnn', 'vit' (images.py)
The Transformer's own token encoder is model.encoder='' with model.arch='transformer' (it stays
inside transformer.py, so saved runs keep their parameter names).

An encoder is one class and one registry line:

  @register_encoder('mine')
  class Mine(nnx.Module):
    source = 'images'                          # or 'tokens': what it reads
    @classmethod
    def build(cls, cfg, *, dim, rngs): ...     # dim: the annotation size K the decoder needs
    def __call__(self, src, *, dropout_key=None) -> Encoded: ...
    def source_mask(self, src) -> jax.Array: ...
    def grid(self, shape) -> tuple[int, int] | None: ...
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from attention_jax import registry


class Encoded(NamedTuple):
  annotations: jax.Array  # [B, S, K], zero on padding
  mask: jax.Array         # [B, S] bool
  summary: jax.Array      # [B, K]: the RNN decoders' initial state is a function of it


ENCODERS: dict[str, type] = {}
register_encoder = registry.registrar(ENCODERS, 'encoder')


def lookup(name: str) -> type:
  return registry.lookup(ENCODERS, 'encoder', name)


def grid_shape(cfg, size: tuple[int, int]) -> tuple[int, int]:
  """(H', W'): the grid that model config `cfg`'s image encoder makes over a (padded) image of
  `size` (H, W) pixels."""
  return lookup(cfg.encoder).grid_shape(cfg, size)


def names(source: str) -> list[str]:
  """The registered encoders that read `source` ('tokens' or 'images')."""
  return sorted(n for n, cls in ENCODERS.items() if cls.source == source)
