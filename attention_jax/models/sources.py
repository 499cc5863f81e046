"""What a model reads, as one seam: a source kind ('tokens', id sequences; 'images', pixel
grids) owns what differs between them, and the model config, the evaluators, the explorer
and the attribution probe ask it instead of branching on the kind's name.

  kind = sources.of(cfg)                      # the kind model config cfg reads (cfg.source)
  kind.key_dim(cfg); kind.describe(cfg)       # annotation size K; the log line's prefix
  p = kind.probe_inputs(model, src, tgt_in, baseline='zero', erase='zero')   # attribution's

A new modality is a class here with one `@register_source` line, and encoders that declare it
(`source = '<name>'`, encoders.py).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from attention_jax import registry, symbols
from attention_jax.models import encoders

SOURCES: dict[str, type['Source']] = {}
register_source = registry.registrar(SOURCES, 'source kind')


def lookup(name: str) -> type['Source']:
  return registry.lookup(SOURCES, 'source kind', name)


def of(cfg) -> type['Source']:
  """The source kind model config `cfg` reads."""
  return lookup(cfg.source)


class ProbeInputs(NamedTuple):
  """One example as attribution differentiates it: x0 [*P, C] the input (embedded tokens
  [S, E] or pixels [H, W, C]); real [*P] its real positions; baseline and erased [*P, C]
  (integrated gradients' b; erasure's value at every position); units [S', *P] bool the real
  entries each source position covers (tokens: S' = S, row s; images: grid cell s's pixels);
  forward(x [*P, C]) -> the model's (logits [1, T, V], Read) on x in place of x0."""
  x0: jax.Array
  real: jax.Array
  baseline: jax.Array
  erased: jax.Array
  units: jax.Array
  forward: Callable


class Source:
  """A source kind (see the module docstring); the class attributes say what differs."""
  name: str
  gives: str                        # what a task of this kind gives, for messages
  own_encoder = False               # an arch's own token encoder (model.encoder='') reads it
  baselines: tuple[str, ...] = ()   # integrated gradients' baselines that apply
  erasures: tuple[str, ...] = ()    # erasure's values that apply
  grid = False                      # the memory is a 2-D grid of cells (maps drawn over it)
  ensembles = False                 # runs of it can be decoded as one ensemble

  @classmethod
  def describe(cls, cfg) -> str:
    """The start of ModelConfig.describe's line."""
    return ''

  @classmethod
  def key_dim(cls, cfg) -> int:
    """The size K of the annotations an RNN decoder reads."""
    raise NotImplementedError

  @classmethod
  def check(cls, cfg) -> None:
    """Model config combinations this kind cannot read (one ValueError line)."""

  @classmethod
  def decode_basis(cls, src: np.ndarray, max_tgt_len: int) -> int:
    """The length an output limit is computed from (decode.max_output_len) for a batch of
    sources src: the padded source length, or the longest training target."""
    raise NotImplementedError

  @classmethod
  def shown(cls, row: np.ndarray) -> np.ndarray | None:
    """What a kept output (scoring's examples) shows beside its text: the source row, or
    None where the text says it all."""
    return None

  @classmethod
  def probe_inputs(cls, model, src: jax.Array, tgt_in: jax.Array, baseline: str,
                   erase: str) -> ProbeInputs:
    """One example src ([S] ids, or an image [H, W(, C)]) with teacher-forced inputs tgt_in
    [1, T] -> what attribution differentiates."""
    raise NotImplementedError


@register_source('tokens')
class Tokens(Source):
  gives = 'token ids'
  own_encoder = True
  ensembles = True
  baselines = ('zero', 'pad')
  erasures = ('zero', 'pad', 'unk')   # the zero embedding, or the PAD / UNK token's

  @classmethod
  def key_dim(cls, cfg) -> int:
    return cfg.enc_hidden * (2 if cfg.bidirectional else 1)

  @classmethod
  def decode_basis(cls, src, max_tgt_len):
    return src.shape[1]

  @classmethod
  def probe_inputs(cls, model, src, tgt_in, baseline, erase):
    src1 = src[None]
    x0 = model.source_embeddings(src1)[0].astype(jnp.float32)                 # [S, E]
    real = src != 0
    units = jnp.eye(src.shape[0], dtype=bool) & real[None]                     # [S, S]
    forward = lambda x: model.forward(src1, tgt_in, source_shift=(x - x0)[None])
    return ProbeInputs(x0, real, _embedded(model, baseline, x0), _embedded(model, erase, x0),
                       units, forward)


def _embedded(model, value: str, x0: jax.Array) -> jax.Array:
  """'zero', 'pad' or 'unk' -> that vector at every position of x0 [S, E]: [S, E]."""
  if value == 'zero':
    return jnp.zeros_like(x0)
  token = jnp.full((1, 1), symbols.PAD if value == 'pad' else symbols.UNK, jnp.int32)
  return jnp.broadcast_to(model.source_embeddings(token)[0, 0], x0.shape).astype(x0.dtype)


@register_source('images')
class Images(Source):
  gives = 'images'
  baselines = ('zero',)               # a black image
  erasures = ('zero', 'mean')         # a grid cell's pixels black, or the image's mean (grey)
  grid = True

  @classmethod
  def describe(cls, cfg) -> str:
    return f'{cfg.encoder} image encoder, '

  @classmethod
  def key_dim(cls, cfg) -> int:
    return cfg.image_dim

  @classmethod
  def check(cls, cfg) -> None:
    if cfg.attention_mode in ('local_m', 'local_p'):
      raise ValueError(
          f'model.attention_mode={cfg.attention_mode!r} places a window p_t ± D on a 1-D '
          f'source; an image encoder ({cfg.encoder!r}) gives a 2-D grid, where that window '
          'is not defined here: use global, hard, hard_st or the sparsemax normaliser')

  @classmethod
  def decode_basis(cls, src, max_tgt_len):
    return max_tgt_len

  @classmethod
  def shown(cls, row):
    return row

  @classmethod
  def probe_inputs(cls, model, src, tgt_in, baseline, erase):
    img = (src[..., None] if src.ndim == 2 else src).astype(jnp.float32)       # [H, W, C]
    real = img[..., 0] >= 0
    x0 = jnp.where(real[..., None], img, 0.0)
    mean = jnp.sum(x0, axis=(0, 1)) / jnp.maximum(jnp.sum(real), 1)            # [C]
    erased = jnp.zeros_like(x0) if erase == 'zero' else jnp.broadcast_to(mean, x0.shape)

    def forward(x):   # padding stays padding (-1); a real pixel pushed below 0 (SmoothGrad's
      # noise) is read as 0, not as padding (the model reads pixels < 0 as padding)
      x = jnp.where(real[..., None], jnp.where(x >= 0, x, 0.0), img)
      return model.forward((x if src.ndim == 3 else x[..., 0])[None], tgt_in)
    return ProbeInputs(x0, real, jnp.zeros_like(x0), erased, _cells(model.cfg, real), forward)


def _cells(cfg, real: jax.Array) -> jax.Array:
  """real [H, W] -> [S', H, W] bool: the real pixels of each grid cell (s = i * W' + j)."""
  h, w = real.shape
  gh, gw = encoders.grid_shape(cfg, (h, w))
  cell = (np.arange(h) * gh // h)[:, None] * gw + (np.arange(w) * gw // w)[None]   # [H, W]
  return (np.arange(gh * gw)[:, None, None] == cell[None]) & real[None]
