"""Image encoders: an image -> a grid of annotation vectors, the memory a decoder attends over
(Xu et al. 2015, "Show, Attend and Tell", §3.1.1: the L = H' x W' vectors of a CNN's last
feature map, one per image region).

Sources: images [B, H, W] (grayscale) or [B, H, W, C] float, pixels in [0, 1]; images of
different sizes are padded to one size with -1. H and W must be multiples of the grid's cell
size (2^cnn_layers for 'cnn', patch_size for 'vit').

  'cnn'  model.cnn_layers blocks of (3x3 convolution, ReLU, 2x2 max pool), model.cnn_width
         channels doubling per block, then a linear map to the annotation size, plus 2-D
         sinusoidal positions: H' = H / 2^L. (Convolutions are translation-equivariant: two
         equal characters at two places would get equal annotations, and a decoder that must
         read in order could not tell them apart.) With model.cnn_row_rnn, a bidirectional
         RNN (model.cell) runs along each row of the grid first, so that every annotation
         also describes its neighbours (the row encoder of Deng et al. 2017, im2markup).
         With model.cnn_norm, each convolution's output is layer-normalised over its
         channels at every pixel before the ReLU (as ConvNeXt's per-position LayerNorm,
         Liu et al. 2022; unlike batch or group norm it reads no other pixel, so padding
         stays invisible): features start at unit scale instead of the tiny ones a sparse
         image (dark background, thin strokes) gives an unnormalised stack.
         With model.cnn_columns, the last feature map's rows are max-pooled into one before
         the linear map: a 1 x W' grid, one annotation per column of 2^L pixels over the
         image's whole height, as a text line is read (CRNN, Shi et al. 2016); a character
         that straddles two rows of cells is then one annotation, not two halves.
         With model.cnn_cell_width = c < 2^L (a power of 2), the blocks after the first
         log2(c) pool 2 x 1 (down only), so cells are c pixels wide: more, narrower columns
         where characters are only a few pixels wide (CRNN keeps 4-pixel columns too).
         model.cnn_positions says where the 2-D sinusoids enter: added to the annotations
         ('annotations'), to the row RNN's input ('rnn_input': the RNN carries them, and its
         outputs start as content rather than as positions that are the same in every
         image), or nowhere ('none').
  'vit'  non-overlapping p x p patches (p = model.patch_size), each a linear embedding plus a
         2-D position (half the numbers for the row, half for the column), then
         model.transformer_layers Transformer encoder layers of width model.d_model
         (Dosovitskiy et al. 2021): H' = H / p. With model.vit_stem = s > 0, a convolutional
         stem reads the pixels first (Xiao et al. 2021, "Early convolutions help transformers
         see better"): s 3x3 convolutions of stride 2, each layer-normalised over its channels
         at every pixel and ReLU'd (Xiao et al. use batch norm; a per-pixel norm reads no other
         pixel, so padding stays invisible), d_model / 2^(s-1-i) channels for layer i (doubling
         up to d_model, as their 24-48-96-192 before a 192-wide ViT); the patches are then
         p / 2^s stem pixels across, and their linear embedding is the stem's final projection
         (a 1x1 convolution when 2^s = p). The grid stays H / p x W / p whatever s is.
         model.vit_positions: fixed 2-D sinusoids ('sinusoid_2d') or learned ones
         ('learned_2d': a vector per row and one per column, up to model.max_positions of
         each, concatenated as the sinusoids are).

A grid cell is real if any pixel it covers is; padded cells are zero and masked (they get no
attention), and the convolutions see zeros there, so padding aligned to the grid changes no
real cell's annotation. The grid is flattened row by row: position s = i * W' + j.
The summary (the RNN decoders' initial state) is the mean annotation over the real cells, as
Xu et al. initialise their LSTM from the average annotation vector (§3.1.2).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_jax import fields

from attention_jax.models import cells, multihead, transformer
from attention_jax.models.encoders import Encoded, register_encoder
from attention_jax.models.layers import Linear, dropout


def pixels(src: jax.Array) -> tuple[jax.Array, jax.Array]:
  """images [B, H, W] or [B, H, W, C] -> (x [B, H, W, C] with padding set to 0, real [B, H, W])."""
  x = src[..., None] if src.ndim == 3 else src
  real = x[..., 0] >= 0
  return jnp.where(real[..., None], x, 0), real


def check_grid(shape, cell: int, what: str) -> tuple[int, int]:
  """(H', W') of images of `shape` with cells of `cell` x `cell` pixels; ValueError otherwise."""
  if len(shape) not in (3, 4):
    raise ValueError(f'image sources are [B, H, W] or [B, H, W, C] arrays, got shape '
                     f'{tuple(shape)}')
  h, w = shape[1], shape[2]
  if h % cell or w % cell:
    raise ValueError(f'images of {h} x {w} pixels do not divide into {cell} x {cell} cells '
                     f'({what}): pad them to multiples of {cell}')
  return h // cell, w // cell


def pool_mask(real: jax.Array, cell: int | tuple[int, int]) -> jax.Array:
  """real [B, H, W] bool -> [B, H/ch, W/cw] for cells of (ch, cw) pixels (an int: square): a
  cell is real if any of its pixels is."""
  ch, cw = (cell, cell) if isinstance(cell, int) else cell
  b, h, w = real.shape
  return real.reshape(b, h // ch, ch, w // cw, cw).any(axis=(2, 4))


def mean_over(ann: jax.Array, mask: jax.Array) -> jax.Array:
  """ann [B, S, K], mask [B, S] -> [B, K]: the mean over the real positions."""
  m = mask.astype(ann.dtype)[..., None]
  return jnp.sum(ann * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1)


def sinusoids_2d(h: int, w: int, dim: int) -> jax.Array:
  """[h * w, dim] float32: row i's sinusoids (dim/2 numbers) then column j's, at s = i*w + j."""
  rows = transformer.sinusoids(h, dim // 2)                                       # [h, D/2]
  cols = transformer.sinusoids(w, dim - dim // 2)                                 # [w, D/2]
  return rows_then_columns(rows, cols)


def rows_then_columns(rows: jax.Array, cols: jax.Array) -> jax.Array:
  """rows [h, A], cols [w, C] -> [h * w, A + C]: row i's vector then column j's, at s = i*w + j."""
  h, w = rows.shape[0], cols.shape[0]
  return jnp.concatenate([jnp.repeat(rows, w, axis=0), jnp.tile(cols, (h, 1))], axis=-1)


class _ImageEncoder(nnx.Module):
  source = 'images'
  cell: int
  what: str
  columns = False     # the grid's rows pooled into one (CNN, model.cnn_columns)
  cell_width = None   # pixels per cell across where it differs from `cell` (CNN)

  @classmethod
  def cell_size(cls, cfg) -> int:
    """Pixels per side of a grid cell: images are padded to multiples of it."""
    raise NotImplementedError

  @classmethod
  def check(cls, cfg) -> None:
    """Combinations of its fields (each field's range: model.ModelConfig)."""

  @classmethod
  def cell_width_of(cls, cfg) -> int:
    """Pixels per grid cell across (square cells: cell_size)."""
    return cls.cell_size(cfg)

  @classmethod
  def grid_shape(cls, cfg, size: tuple[int, int]) -> tuple[int, int]:
    """(H', W') of the grid over a (padded) image of `size` (H, W) pixels."""
    return size[0] // cls.cell_size(cfg), size[1] // cls.cell_width_of(cfg)

  def grid(self, shape) -> tuple[int, int]:
    return check_grid(shape, self.cell, self.what)

  def source_mask(self, src: jax.Array) -> jax.Array:
    """images -> [B, H' * W'] bool, the real grid cells."""
    self.grid(src.shape)
    _, real = pixels(src)
    real = pool_mask(real, (self.cell, self.cell_width or self.cell))
    if self.columns:
      real = real.any(axis=1, keepdims=True)
    return real.reshape(src.shape[0], -1)


# where the CNN's 2-D sinusoidal positions enter (model.cnn_positions)
CNN_POSITIONS = ('annotations', 'rnn_input', 'none')
# the ViT's 2-D positions (model.vit_positions): fixed sinusoids or learned row and column vectors
VIT_POSITIONS = ('sinusoid_2d', 'learned_2d')
# an image to decode may be at most MAX_SCALE times the training canvas's height and width
# (a 32 x 256 canvas: 128 x 1024): far beyond what the model has seen, and a bound on memory
MAX_SCALE = 4


@register_encoder('cnn')
class CNNEncoder(_ImageEncoder):
  """Convolution blocks -> the annotation grid (see the module docstring)."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    image_channels: int = fields.positive(1, '1 grayscale, 3 RGB')
    cnn_layers: int = fields.positive(3, 'conv blocks, each halving H and W: cells of 2^L pixels')
    cnn_width: int = fields.positive(32, 'channels of the first block, doubling per block')
    cnn_row_rnn: bool = fields.field(False, 'a bidirectional RNN (model.cell) along each row')
    cnn_norm: bool = fields.field(False, 'LayerNorm over channels after each convolution')
    cnn_columns: bool = fields.field(False, 'max over each column of the grid: a 1 x W grid')
    cnn_cell_width: int = fields.field(
        0, 'pixels per grid cell across (0: 2^cnn_layers, square)',
        valid='0 or a power of 2 up to 2^cnn_layers')
    cnn_positions: str = fields.one_of(
        'annotations', CNN_POSITIONS, "where 2-D positions are added: the annotations, the row "
        "RNN's input, or nowhere")
    cell: str = fields.one_of('gru', lambda: cells.CELLS, "the row RNN's cell")

  @classmethod
  def cell_size(cls, cfg) -> int:
    return 2 ** cfg.cnn_layers

  @classmethod
  def cell_width_of(cls, cfg) -> int:
    """Pixels per grid cell across: model.cnn_cell_width, or 2^cnn_layers (square cells)."""
    return cfg.cnn_cell_width or cls.cell_size(cfg)

  @classmethod
  def grid_shape(cls, cfg, size: tuple[int, int]) -> tuple[int, int]:
    h, w = super().grid_shape(cfg, size)
    return (1, w) if cfg.cnn_columns else (h, w)

  @classmethod
  def check(cls, cfg) -> None:
    super().check(cfg)
    cw, cell = cfg.cnn_cell_width, 2 ** cfg.cnn_layers
    if cw and (cw & (cw - 1) or cw > cell) or cw < 0:
      raise ValueError(f'model.cnn_cell_width must be 0 (square cells of 2^cnn_layers = {cell} '
                       f'pixels) or a power of 2 up to {cell}, got {cw!r}')
    if cfg.cnn_positions == 'rnn_input' and not cfg.cnn_row_rnn:
      raise ValueError("model.cnn_positions='rnn_input' adds the positions to the row RNN's "
                       "input: set model.cnn_row_rnn=True, or use 'annotations' or 'none'")
    name = 'image_dim' if cfg.arch == 'rnn' else 'd_model'   # the annotation size it gives
    if cfg.cnn_row_rnn and getattr(cfg, name) % 2:
      raise ValueError(f'model.cnn_row_rnn: the two directions split model.{name}; make it '
                       f'even, got {getattr(cfg, name)}')

  @classmethod
  def build(cls, cfg, *, dim: int, rngs: nnx.Rngs) -> 'CNNEncoder':
    return cls(channels=cfg.image_channels, layers=cfg.cnn_layers, width=cfg.cnn_width,
               dim=dim, dropout=cfg.dropout, dtype=cfg.compute_dtype,
               row_cell=cfg.cell if cfg.cnn_row_rnn else None, norm=cfg.cnn_norm,
               columns=cfg.cnn_columns, cell_width=cls.cell_width_of(cfg),
               positions=cfg.cnn_positions, rngs=rngs)

  def __init__(self, *, channels: int, layers: int, width: int, dim: int, dropout: float,
               dtype: Any, rngs: nnx.Rngs, row_cell: str | None = None, norm: bool = False,
               columns: bool = False, cell_width: int | None = None,
               positions: str = 'annotations'):
    convs, norms, c_in = [], [], channels
    for layer in range(layers):
      c_out = width * 2 ** layer
      convs.append(nnx.Conv(c_in, c_out, (3, 3), padding='SAME', dtype=dtype,
                            param_dtype=jnp.float32, rngs=rngs))
      if norm:
        norms.append(nnx.LayerNorm(c_out, dtype=dtype, param_dtype=jnp.float32, rngs=rngs))
      c_in = c_out
    self.convs = nnx.List(convs)
    self.norms = nnx.List(norms) if norm else None
    self.proj = Linear(c_in, dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    # the row encoder (Deng et al. 2017): a bidirectional RNN along each row of the grid
    self.rows = None if row_cell is None else nnx.List([
        cells.make_cell(row_cell, dim, dim // 2, dtype=dtype, rngs=rngs) for _ in range(2)])
    self.cell, self.what = 2 ** layers, f'{layers} blocks of 2 x 2 pooling (model.cnn_layers)'
    self.cell_width = cell_width or self.cell
    # block i pools 2 x 2 while the cells are narrower than cell_width, then 2 x 1 (down only)
    self.pools = tuple((2, 2 if 2 ** (i + 1) <= self.cell_width else 1) for i in range(layers))
    self.dropout, self.dtype, self.columns = dropout, dtype, columns
    self.positions = positions

  def __call__(self, src: jax.Array, *, dropout_key: jax.Array | None = None) -> Encoded:
    """images [B, H, W(, C)] -> Encoded: annotations [B, H'W', K], mask [B, H'W']."""
    self.grid(src.shape)
    x, real = pixels(src)
    x = x.astype(self.dtype)                                                  # [B, H, W, C]
    for i, (conv, (ph, pw)) in enumerate(zip(self.convs, self.pools)):
      x = conv(x)
      x = jax.nn.relu(x if self.norms is None else self.norms[i](x))
      b, h, w, c = x.shape
      x = x.reshape(b, h // ph, ph, w // pw, pw, c).max(axis=(2, 4))         # ph x pw max pool
      real = pool_mask(real, (ph, pw))
      x = x * real[..., None].astype(x.dtype)     # padded cells stay zero for the next block
    if self.columns:      # features are >= 0 (ReLU) and padding 0: the max is the real rows'
      x, real = x.max(axis=1, keepdims=True), real.any(axis=1, keepdims=True)  # [B, 1, W', C]
    b, h, w, _ = x.shape
    mask = real.reshape(b, h * w)
    ann = self.proj(x.reshape(b, h * w, -1))                                 # [B, S, K]
    pos = sinusoids_2d(h, w, ann.shape[-1]).astype(ann.dtype)[None]          # [1, S, K]
    if self.positions == 'rnn_input':
      ann = ann + pos
    if self.rows is not None:        # each row [W', K] read both ways -> [W', K/2 + K/2]
      seq, m = ann.reshape(b * h, w, -1), mask.reshape(b * h, w)
      fwd, bwd = self.rows
      out_f, _ = cells.run(fwd, fwd.project(seq), m)
      out_b, _ = cells.run(bwd, bwd.project(seq), m, reverse=True)
      ann = jnp.concatenate([out_f, out_b], axis=-1).reshape(b, h * w, -1)
    if self.positions == 'annotations':
      ann = ann + pos
    ann = ann * mask[..., None].astype(ann.dtype)
    ann = dropout(ann, self.dropout, dropout_key)
    return Encoded(annotations=ann, mask=mask, summary=mean_over(ann, mask))


def stem_widths(layers: int, dim: int) -> tuple[int, ...]:
  """Channels of the ViT's convolutional stem (model.vit_stem layers, model.d_model = dim):
  doubling per layer up to dim, e.g. 32, 64, 128 for 3 layers before d_model 128 (Xiao et al.
  2021: 24, 48, 96, 192 before a ViT of width 192)."""
  return tuple(max(1, dim // 2 ** (layers - 1 - i)) for i in range(layers))


@register_encoder('vit')
class ViTEncoder(_ImageEncoder):
  """[A convolutional stem,] patch embeddings + 2-D positions -> Transformer encoder layers
  (see the module docstring)."""

  @dataclasses.dataclass(frozen=True)
  class Fields(transformer.Layers):
    """The fields of its Transformer layers (d_model, heads, ...) and its own."""
    image_channels: int = fields.positive(1, '1 grayscale, 3 RGB')
    patch_size: int = fields.positive(4, 'p x p pixel patches')
    vit_stem: int = fields.count(0, 'stride-2 3x3 convolutions before the patches (Xiao et '
                                 'al. 2021; 0: linear patch embeddings)',
                                 'stride-2 convolutions before the patches; 0: none')
    vit_positions: str = fields.one_of('sinusoid_2d', VIT_POSITIONS,
                                       'fixed sinusoids, or a learned vector per row and column')

  @classmethod
  def check(cls, cfg) -> None:
    super().check(cfg)
    multihead.check(cfg.self_attention_score, cfg.heads, cfg.d_model,
                    "the 'vit' encoder (model.self_attention_score, model.heads)")
    stem = cfg.vit_stem
    if cfg.patch_size % 2 ** stem:
      raise ValueError(f'model.vit_stem={stem} halves the image {stem} times (by 2^{stem} = '
                       f'{2 ** stem}) before the patches, and model.patch_size={cfg.patch_size} '
                       f'is not a multiple of {2 ** stem}: make patch_size a multiple of '
                       f'2^vit_stem, or use fewer stem layers')
    if cfg.vit_positions not in VIT_POSITIONS:
      raise ValueError(f'unknown model.vit_positions {cfg.vit_positions!r}; valid: '
                       f'{", ".join(VIT_POSITIONS)}')

  @classmethod
  def cell_size(cls, cfg) -> int:
    return cfg.patch_size

  @classmethod
  def build(cls, cfg, *, dim: int, rngs: nnx.Rngs) -> 'ViTEncoder':
    return cls(cfg, dim=dim, rngs=rngs)

  def __init__(self, cfg, *, dim: int, rngs: nnx.Rngs):
    p, d, dtype = cfg.patch_size, cfg.d_model, cfg.compute_dtype
    conv = lambda c_in, c_out: nnx.Conv(c_in, c_out, (3, 3), strides=(2, 2), padding='SAME',
                                        dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    ln = lambda c: nnx.LayerNorm(c, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    c_in, convs, norms = cfg.image_channels, [], []
    for c_out in stem_widths(cfg.vit_stem, d):  # the stem (Xiao et al. 2021); none: vit_stem=0
      convs.append(conv(c_in, c_out))
      norms.append(ln(c_out))
      c_in = c_out
    self.stem = nnx.List(convs) if convs else None
    self.stem_norms = nnx.List(norms) if norms else None
    self.patch = p // 2 ** cfg.vit_stem          # patches of p pixels: p / 2^s stem pixels across
    self.embed = Linear(self.patch * self.patch * c_in, d, dtype=dtype,
                            param_dtype=jnp.float32, rngs=rngs)
    if cfg.vit_positions == 'learned_2d':         # initialised as the Transformer's learned
      learned = lambda n: nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg.max_positions,
                                                                            n)))
      self.pos_rows, self.pos_cols = learned(d // 2), learned(d - d // 2)
    else:                                         # 'sinusoid_2d': fixed
      self.pos_rows = self.pos_cols = None
    self.layers = nnx.List([transformer.EncoderLayer(cfg, rngs=rngs)
                            for _ in range(cfg.transformer_layers)])
    self.norm = ln(d) if cfg.norm_first else None
    self.proj = None if dim == d else Linear(d, dim, dtype=dtype, param_dtype=jnp.float32,
                                                 rngs=rngs)
    self.cell, self.what = p, 'patches of model.patch_size pixels'
    self.dim, self.dropout, self.dtype = d, cfg.dropout, dtype
    self.max_positions = cfg.max_positions

  def positions(self, gh: int, gw: int) -> jax.Array:
    """[gh * gw, D] in the compute dtype: row i's vector then column j's, at s = i * gw + j."""
    if self.pos_rows is None:
      return sinusoids_2d(gh, gw, self.dim).astype(self.dtype)
    if max(gh, gw) > self.max_positions:
      raise ValueError(f"model.vit_positions='learned_2d' are defined for up to "
                       f'model.max_positions={self.max_positions} rows and columns of patches, '
                       f'got a grid of {gh} x {gw}; use a smaller image, sinusoid_2d or a '
                       f'larger max_positions')
    rows, cols = self.pos_rows[...][:gh], self.pos_cols[...][:gw]              # [gh, D/2], [gw, D/2]
    return rows_then_columns(rows, cols).astype(self.dtype)

  def __call__(self, src: jax.Array, *, dropout_key: jax.Array | None = None) -> Encoded:
    """images [B, H, W(, C)] -> Encoded: annotations [B, H'W', K], mask [B, H'W']."""
    gh, gw = self.grid(src.shape)
    x, real = pixels(src)                                          # [B, H, W, C], [B, H, W]
    x = x.astype(self.dtype)
    for conv, norm in zip(self.stem or (), self.stem_norms or ()):
      x = jax.nn.relu(norm(conv(x)))                               # [B, H/2, W/2, C'] per layer
      real = pool_mask(real, 2)
      x = x * real[..., None].astype(x.dtype)      # padded cells stay zero for the next layer
    b, p, c = x.shape[0], self.patch, x.shape[-1]
    patches = (x.reshape(b, gh, p, gw, p, c).transpose(0, 1, 3, 2, 4, 5)
               .reshape(b, gh * gw, p * p * c))                                 # [B, S, p*p*C]
    mask = pool_mask(real, p).reshape(b, gh * gw)                              # [B, S]
    keys = transformer.DropoutKeys(dropout_key)
    h = self.embed(patches) + self.positions(gh, gw)[None]
    h = dropout(h, self.dropout, keys()) * mask[..., None].astype(self.dtype)
    for layer in self.layers:
      h = layer(h, mask[:, None, :], keys)
    if self.norm is not None:
      h = self.norm(h)
    if self.proj is not None:
      h = self.proj(h)
    ann = h * mask[..., None].astype(h.dtype)
    return Encoded(annotations=ann, mask=mask, summary=mean_over(ann, mask))


def read_image(source, channels: int = 1,
               max_shape: tuple[int, int] | None = None) -> np.ndarray:
  """An image as a model reads it: a file path (PNG, or any format matplotlib reads) or an
  array ([H, W] or [H, W, C]; uint8 0-255 or float 0-1) -> float32 [H, W] (channels=1: RGB is
  averaged) or [H, W, C], pixels in [0, 1]. An image taller or wider than `max_shape` is
  refused before its pixels are decoded (a file's size is read from its header). Every
  failure is a ValueError naming the file: '<file>: not a readable image (...)'."""
  if isinstance(source, (str, os.PathLike)):
    path = os.fspath(source)
    if not os.path.isfile(path):
      raise ValueError(f'{path}: no such file' if not os.path.exists(path) else
                       f'{path}: not a readable image (not a file)')
    import matplotlib.image  # pylint: disable=g-import-not-at-top  (a second of import time)
    from PIL import Image  # pylint: disable=g-import-not-at-top  (matplotlib's image library)
    # Pillow raises SyntaxError for a corrupt PNG, OSError for a truncated or unknown file
    unreadable = (SyntaxError, OSError, ValueError)
    try:   # the header only: the size before any pixel is decoded (Pillow's warning about a
      with warnings.catch_warnings():   # huge one is ours to give: check_size, one line)
        warnings.simplefilter('ignore', Image.DecompressionBombWarning)
        with Image.open(path) as im:
          width, height = im.size
    except Image.DecompressionBombError:   # beyond Pillow's own bound: too large for ours
      width = height = float('inf')
    except unreadable as e:
      raise _unreadable(path, e) from None
    check_size(height, width, max_shape, path)
    try:
      source = matplotlib.image.imread(path)
    except unreadable as e:
      raise _unreadable(path, e) from None
  elif max_shape is not None:
    shape = np.shape(source)
    if len(shape) >= 2:
      check_size(shape[0], shape[1], max_shape, 'the image')
  x = np.asarray(source)
  if x.dtype == np.uint8:
    x = x.astype(np.float32) / 255.0
  x = x.astype(np.float32)
  if x.ndim == 3 and x.shape[-1] == 4:          # RGBA: drop the alpha channel
    x = x[..., :3]
  if x.ndim == 3 and channels == 1:
    x = x.mean(-1)
  if x.ndim not in (2, 3) or x.size == 0 or (x.ndim == 3 and x.shape[-1] != channels):
    raise ValueError(f'an image must be [H, W] or [H, W, {channels}], got shape {x.shape}')
  if not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
    raise ValueError(f'pixels must be in [0, 1] (floats) or 0-255 (uint8), got '
                     f'{x.min():.3g} to {x.max():.3g}')
  return x


def _unreadable(path: str, e: BaseException) -> ValueError:
  return ValueError(f'{path}: not a readable image ({type(e).__name__}: {e})')


def check_size(height, width, max_shape: tuple[int, int] | None, name: str) -> None:
  """Refuses (ValueError) an image taller or wider than max_shape (None: no bound)."""
  if max_shape is not None and (height > max_shape[0] or width > max_shape[1]):
    size = 'too large to open' if height == float('inf') else f'{height} x {width} pixels'
    raise ValueError(f'{name}: {size} is over the bound of {max_shape[0]} x {max_shape[1]} '
                     f'(height x width: {MAX_SCALE} times the training canvas); scale it down '
                     'to about the training height')


def pad_batch(images, cell: int, shape: tuple[int, int] | None = None) -> np.ndarray:
  """[H_i, W_i(, C)] images -> float32 [B, H, W(, C)], H and W the largest (or `shape`) rounded
  up to multiples of cell, padding -1."""
  h = max([im.shape[0] for im in images] + ([shape[0]] if shape else []))
  w = max([im.shape[1] for im in images] + ([shape[1]] if shape else []))
  h, w = -(-h // cell) * cell, -(-w // cell) * cell
  out = np.full((len(images), h, w) + images[0].shape[2:], -1.0, np.float32)
  for i, im in enumerate(images):
    out[i, :im.shape[0], :im.shape[1]] = im
  return out
