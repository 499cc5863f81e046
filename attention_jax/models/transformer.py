"""The Transformer (Vaswani et al. 2017, "Attention Is All You Need"): the recurrence replaced
by attention, and every attention taking any content score of the registry.

  encoder layer:  x = x + Drop(SelfAttn(LN(x)))                       pre-norm (norm_first)
                  x = x + Drop(FF(LN(x)))                              FF = W_2 relu(W_1 x)
  decoder layer:  y = y + Drop(CausalSelfAttn(LN(y)))
                  y = y + Drop(CrossAttn(LN(y), encoder output))
                  y = y + Drop(FF(LN(y)))
Post-norm (norm_first=False, the original paper): x = LN(x + Drop(sublayer(x))). Pre-norm
layers end with a final LN (Xiong et al. 2020, "On Layer Normalization in the Transformer
Architecture"). Inputs are E[token]·√D + P[position]; P is `sinusoidal` (Vaswani et al.
§3.5, defined for any length), `learned` (Gehring et al. 2017; one vector per position up to
model.max_positions: positions beyond the training lengths are never trained) or `none` (the
ablation: the encoder sees a bag of tokens, the decoder only the causal order). The output
projection may be tied to the target embeddings and the embeddings shared between source
and target (Press & Wolf 2017, "Using the Output Embedding to Improve Language Models").

Each multi-head attention (multihead.py) uses model.self_attention_score (encoder and
decoder self-attention) or model.cross_attention_score per head. Teacher-forced training is
one parallel pass over all target positions; decoding (`start` / `step`, the interface of
greedy and beam search) keeps each decoder layer's keys and values in a KV cache, so a step
costs one position, not a pass over the prefix.

  model(src [B, S], tgt_in [B, T]) -> (logits [B, T, V], weights [B, T, S])
  weights: the last decoder layer's cross-attention averaged over heads; `forward` also
  returns every layer's and head's, read.layers [B, N, H, T, S].
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import fields

from attention_jax.models import attention, contract, encoders, layers, multihead, sources
from attention_jax.models.layers import dropout

POSITIONS = ('sinusoidal', 'learned', 'none')
CACHE_SEGMENT = 64   # the shortest KV cache segment of decoding (Transformer.cache_lengths)
MAX_SEGMENTS = 3     # ... and at most this many segments, each about twice the one before


def check(cfg) -> None:
  """Raises ValueError for a Transformer config (model.ModelConfig) that cannot be built (the
  combinations of its fields; each one's range: Transformer.Fields)."""
  for name in ('self_attention_score', 'cross_attention_score'):
    multihead.check(getattr(cfg, name), cfg.heads, cfg.d_model,
                    f'the transformer (model.{name})')
  attention.check_combination(cfg.cross_attention_score, 'global', cfg.normaliser, False)
  if cfg.share_embeddings and cfg.src_vocab != cfg.tgt_vocab:
    raise ValueError(f'model.share_embeddings needs one vocabulary for source and target, got '
                     f'{cfg.src_vocab} and {cfg.tgt_vocab} symbols')


def sinusoids(length: int, dim: int, offset: Any = 0) -> jax.Array:
  """P[p, 2i] = sin(p / 10000^(2i/D)), P[p, 2i+1] = cos(...), p = offset .. offset+length-1
  -> [length, D] float32 (Vaswani et al. 2017, §3.5)."""
  pos = jnp.arange(length, dtype=jnp.float32)[:, None] + offset                  # [L, 1]
  inv = jnp.exp(-math.log(10000.0) * jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  angles = pos * inv[None, :]                                                    # [L, D/2]
  return jnp.stack([jnp.sin(angles), jnp.cos(angles)], -1).reshape(length, -1)[:, :dim]


@dataclasses.dataclass(frozen=True)
class Layers(fields.Fields):
  """The fields of a stack of Transformer layers (the Transformer's, the 'vit' encoder's)."""
  d_model: int = fields.positive(128, 'the width of every layer')
  heads: int = fields.positive(4, 'attention heads')
  ff_dim: int = fields.positive(512, 'the feed-forward hidden size')
  transformer_layers: int = fields.positive(3, 'encoder layers, and as many decoder layers')
  max_positions: int = fields.positive(
      512, "learned positions: the table's size (the 'vit' with learned_2d: rows and columns of "
      'patches)')
  norm_first: bool = fields.field(True, 'pre-norm (False: post-norm, as Vaswani et al. 2017)')
  attention_dropout: float = fields.rate(0.0, 'dropout on the attention weights')
  self_attention_score: str = fields.field('scaled_dot', 'the self-attention score')


class DropoutKeys:
  """Dropout keys drawn one by one (None when evaluating)."""

  def __init__(self, key: jax.Array | None):
    self.key, self.i = key, 0

  def __call__(self) -> jax.Array | None:
    if self.key is None:
      return None
    self.i += 1
    return jax.random.fold_in(self.key, self.i)


class FeedForward(nnx.Module):

  def __init__(self, dim: int, hidden: int, *, dtype: Any, rngs: nnx.Rngs):
    self.w1 = layers.Linear(dim, hidden, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    self.w2 = layers.Linear(hidden, dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

  def __call__(self, x):
    return self.w2(jax.nn.relu(self.w1(x)))


class _Sublayers(nnx.Module):
  """Residual connection, dropout and layer norm around each sublayer, pre- or post-norm."""

  def _norms(self, n: int, cfg, rngs):
    self.norm_first, self.dropout = cfg.norm_first, cfg.dropout
    self.norms = nnx.List([nnx.LayerNorm(cfg.d_model, dtype=cfg.compute_dtype,
                                         param_dtype=jnp.float32, rngs=rngs) for _ in range(n)])

  def _in(self, i, x):
    return self.norms[i](x) if self.norm_first else x

  def _out(self, i, x, y, key):
    x = x + dropout(y, self.dropout, key)
    return x if self.norm_first else self.norms[i](x)


def _mha(cfg, score, what, rngs):
  return multihead.MultiHeadAttention(
      cfg.d_model, heads=cfg.heads, score=score, normaliser=cfg.normaliser,
      attention_dropout=cfg.attention_dropout, max_src_len=cfg.max_src_len,
      dtype=cfg.compute_dtype, rngs=rngs, what=what)


class EncoderLayer(_Sublayers):

  def __init__(self, cfg, *, rngs: nnx.Rngs):
    self.attn = _mha(cfg, cfg.self_attention_score, 'encoder self-attention', rngs)
    self.ff = FeedForward(cfg.d_model, cfg.ff_dim, dtype=cfg.compute_dtype, rngs=rngs)
    self._norms(2, cfg, rngs)

  def __call__(self, x, mask, keys: DropoutKeys):
    """x [B, S, D], mask [B, 1, S] -> x [B, S, D]."""
    h = self._in(0, x)
    y, _ = self.attn(h, h, mask, keys(), weights=False)
    x = self._out(0, x, y, keys())
    return self._out(1, x, self.ff(self._in(1, x)), keys())


class DecoderLayer(_Sublayers):

  def __init__(self, cfg, *, rngs: nnx.Rngs):
    self.self_attn = _mha(cfg, cfg.self_attention_score, 'decoder self-attention', rngs)
    self.cross = _mha(cfg, cfg.cross_attention_score, 'cross-attention', rngs)
    self.ff = FeedForward(cfg.d_model, cfg.ff_dim, dtype=cfg.compute_dtype, rngs=rngs)
    self._norms(3, cfg, rngs)

  def __call__(self, y, self_mask, mem: multihead.HeadMemory, cross_mask, keys: DropoutKeys):
    """y [B, T, D], self_mask [B, T, T], cross_mask [B, 1, S] ->
    (y [B, T, D], cross-attention weights [B, H, T, S])."""
    h = self._in(0, y)
    a, _ = self.self_attn(h, h, self_mask, keys(), weights=False)
    y = self._out(0, y, a, keys())
    c, w = self.cross.read(self._in(1, y), mem, cross_mask, keys())
    y = self._out(1, y, c, keys())
    return self._out(2, y, self.ff(self._in(2, y)), keys()), w

  def step(self, y, cache: multihead.KVCache, t, mem: multihead.HeadMemory, cross_mask):
    """y [N, 1, D] at position t -> (y [N, 1, D], weights [N, H, 1, S], cache)."""
    a, _, cache = self.self_attn.step(self._in(0, y), cache, t)
    y = self._out(0, y, a, None)
    c, w = self.cross.read(self._in(1, y), mem, cross_mask)
    y = self._out(1, y, c, None)
    return self._out(2, y, self.ff(self._in(2, y)), None), w, cache


class CrossWeights(NamedTuple):
  """The decoder's cross-attention weights of a teacher-forced pass."""
  weights: jax.Array  # [B, T, S] float32, last layer's cross-attention, mean over heads
  layers: jax.Array   # [B, N, H, T, S] float32, every decoder layer's, per head


class Carry(NamedTuple):
  t: jax.Array         # [] int32, the position of the next input token
  caches: tuple        # one multihead.KVCache per decoder layer, leaves [N, L, ...]


class Transformer(nnx.Module, contract.EncoderDecoder):
  """Encoder-decoder Transformer with the interface of `model.Seq2Seq`: __call__, forward,
  start, step, source_mask. Token id 0 is padding. With model.encoder naming an image
  encoder (encoders.py), that encoder replaces the token encoder."""

  @dataclasses.dataclass(frozen=True)
  class Fields(Layers):
    """Its fields: its layers', its token encoder's (an image encoder's are that encoder's)."""
    positions: str = fields.one_of(
        'sinusoidal', POSITIONS, 'sinusoidal (defined for every length), learned (a table of '
        'max_positions vectors: longer inputs are refused) or none (a bag of tokens)')
    cross_attention_score: str = fields.field('scaled_dot', 'the cross-attention score')
    share_embeddings: bool = fields.field(False, 'one embedding table for source and target')
    tie_output: bool = fields.field(False, 'output projection = target embeddings transposed')

  source_fields: dict = {}   # no field more for any source kind
  token_encoder = ''   # its own, inside this class (model.encoder='')
  instead = {'score': 'cross_attention_score'}   # an RNN's field of the same role
  chosen = staticmethod(lambda values: [])       # no part chosen by its fields
  check = staticmethod(check)

  @staticmethod
  def describe(cfg) -> str:
    return (f'transformer ({cfg.transformer_layers}+{cfg.transformer_layers} layers, '
            f'd_model {cfg.d_model}, {cfg.heads} heads, {cfg.positions} positions), '
            f'{cfg.self_attention_score} self- / {cfg.cross_attention_score} cross-attention')

  @staticmethod
  def variant(cfg) -> str:
    return f'transformer/{cfg.cross_attention_score}'

  @staticmethod
  def cache_width(cfg) -> int:
    """Keys (d_model per layer, after each head's precompute) and values per output position."""
    return 2 * cfg.transformer_layers * cfg.d_model

  @staticmethod
  def memory_width(cfg) -> int:
    """Cross-attention keys and values of every layer per source position."""
    return 2 * cfg.transformer_layers * cfg.d_model

  @staticmethod
  def check_source_length(cfg, length: int) -> None:
    """Its scores are content scores: any length."""

  @staticmethod
  def check_encoder(cfg, encoder: type) -> None:
    """Its token encoder is its own (model.encoder=''); an image encoder replaces it, and
    then there are no source embeddings to share."""
    if sources.lookup(encoder.source).own_encoder:
      raise ValueError(f"model.encoder={cfg.encoder!r} reads tokens; the transformer's token "
                       f"encoder is model.encoder='' (image encoders: "
                       f"{', '.join(encoders.names('images'))})")
    if cfg.share_embeddings:
      raise ValueError('model.share_embeddings needs token sources; the source is images '
                       f'(model.encoder={cfg.encoder!r})')

  def __init__(self, cfg, *, rngs: nnx.Rngs):
    cfg.require_arch('transformer', 'Transformer')
    self.cfg = cfg   # validated by ModelConfig (transformer.check)
    d, dtype = cfg.d_model, cfg.compute_dtype
    embed = lambda v: nnx.Embed(v, d, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    # the source encoder: the token encoder's parameters live here (src_embed, enc_layers,
    # enc_norm: the names saved runs have), another encoder's in `source`
    self.source = encoders.lookup(cfg.encoder).build(cfg, dim=d, rngs=rngs) if cfg.encoder else None
    tokens = self.source is None
    self.src_embed = embed(cfg.src_vocab) if tokens or cfg.share_embeddings else None
    self.tgt_embed = None if cfg.share_embeddings else embed(cfg.tgt_vocab)
    if cfg.positions == 'learned':
      self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg.max_positions, d)))
    self.enc_layers = nnx.List([EncoderLayer(cfg, rngs=rngs)
                                for _ in range(cfg.transformer_layers if tokens else 0)])
    self.dec_layers = nnx.List([DecoderLayer(cfg, rngs=rngs)
                                for _ in range(cfg.transformer_layers)])
    ln = lambda: nnx.LayerNorm(d, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    self.enc_norm = ln() if cfg.norm_first and tokens else None
    self.dec_norm = ln() if cfg.norm_first else None
    self.out = None if cfg.tie_output else layers.Linear(d, cfg.tgt_vocab, dtype=dtype,
                                                      param_dtype=jnp.float32, rngs=rngs)

  # ---- pieces ----------------------------------------------------------------------------
  def _positions(self, length: int, offset: Any = 0) -> jax.Array | float:
    """[length, D] position vectors from `offset` (0.0 for positions 'none')."""
    cfg = self.cfg
    if cfg.positions == 'none':
      return 0.0
    if cfg.positions == 'sinusoidal':
      return sinusoids(length, cfg.d_model, offset)
    return jax.lax.dynamic_slice_in_dim(self.pos[...], offset, length)

  def check_length(self, length: int, what: str) -> None:
    if self.cfg.positions == 'learned' and length > self.cfg.max_positions:
      raise ValueError(f"positions 'learned' are defined up to model.max_positions="
                       f'{self.cfg.max_positions}, got {what} of {length} positions; use '
                       f"positions 'sinusoidal' or a larger max_positions")

  def _embed_tgt(self):
    return self.src_embed if self.tgt_embed is None else self.tgt_embed

  def _inputs(self, embed, tokens, offset: Any = 0, shift: jax.Array | None = None) -> jax.Array:
    """tokens [B, T] -> (E[token] + shift)·√D + P [B, T, D]."""
    x = embed(tokens)
    if shift is not None:
      x = x + shift.astype(x.dtype)
    x = x * jnp.asarray(math.sqrt(self.cfg.d_model), self.cfg.compute_dtype)
    pos = jnp.asarray(self._positions(tokens.shape[1], offset), x.dtype)   # [T, D] or 0.0
    return x + (pos[None] if pos.ndim else pos)

  def _logits(self, y: jax.Array) -> jax.Array:
    """y [B, T, D] (after the final norm) -> logits [B, T, V] float32."""
    if self.out is None:   # as one 2-D product, as layers.Linear computes it
      logits = self._embed_tgt().attend(y.reshape(-1, y.shape[-1]))              # [B*T, V]
      return logits.reshape(*y.shape[:-1], logits.shape[-1]).astype(jnp.float32)
    return self.out(y).astype(jnp.float32)

  def source_mask(self, src: jax.Array) -> jax.Array:
    """src -> [B, S] bool: the memory positions that are real (not padding)."""
    return src != 0 if self.source is None else self.source.source_mask(src)

  def source_embeddings(self, src: jax.Array) -> jax.Array:
    """Token ids [B, S] -> the embedded source [B, S, D] (before scaling and positions)."""
    return self.src_embed(src)

  def encode(self, src: jax.Array, keys: DropoutKeys | None = None,
             shift: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """src [B, S] (or images) -> (encoder output [B, S, D] zero on padding, mask [B, S]).
    shift [B, S, D]: added to the embedded source tokens (attribution.py)."""
    keys = keys or DropoutKeys(None)
    if self.source is not None:
      enc = self.source(src, dropout_key=keys())
      return enc.annotations, enc.mask
    self.check_length(src.shape[1], 'a source')
    mask = src != 0
    x = dropout(self._inputs(self.src_embed, src, shift=shift), self.cfg.dropout, keys())
    for layer in self.enc_layers:
      x = layer(x, mask[:, None, :], keys)
    if self.enc_norm is not None:
      x = self.enc_norm(x)
    return x * mask[:, :, None].astype(x.dtype), mask

  # ---- teacher forcing ---------------------------------------------------------------------
  def forward(self, src: jax.Array, tgt_in: jax.Array, *, dropout_key: jax.Array | None = None,
              sample_key: jax.Array | None = None, source_shift: jax.Array | None = None,
              memory_shift: jax.Array | None = None) -> tuple[jax.Array, CrossWeights]:
    """src [B, S], tgt_in [B, T] -> (logits [B, T, V] float32, CrossWeights): all target
    positions in one pass; position t sees tgt_in[:, :t+1] only (causal mask).
    source_shift [B, S, D] / memory_shift [B, S, D]: added to the embedded source / the
    encoder output (as Seq2Seq)."""
    del sample_key   # no attention mode of the transformer samples
    keys = DropoutKeys(dropout_key)
    enc, mask = self.encode(src, keys, shift=source_shift)
    if memory_shift is not None:
      enc = enc + memory_shift.astype(enc.dtype)
    t = tgt_in.shape[1]
    self.check_length(t, 'a target')
    causal = jnp.tril(jnp.ones((t, t), bool))[None] & (tgt_in != 0)[:, None, :]   # [B, T, T]
    y = dropout(self._inputs(self._embed_tgt(), tgt_in), self.cfg.dropout, keys())
    per_layer = []
    for layer in self.dec_layers:
      y, w = layer(y, causal, layer.cross.memory(enc), mask[:, None, :], keys)
      per_layer.append(w)
    if self.dec_norm is not None:
      y = self.dec_norm(y)
    layers = jnp.stack(per_layer, axis=1)                                        # [B,N,H,T,S]
    return self._logits(y), CrossWeights(jnp.mean(layers[:, -1], axis=1), layers)

  # ---- step-by-step decoding (greedy / beam search) -----------------------------------------
  def start(self, src: jax.Array, max_len: int):
    """src [B, S] -> (Carry with empty caches for max_len positions, memory) for `step`."""
    self.check_length(max_len, 'an output limit')
    enc, mask = self.encode(src)
    mem = (tuple(layer.cross.memory(enc) for layer in self.dec_layers), mask)
    caches = tuple(layer.self_attn.empty_cache(src.shape[0], max_len, enc.dtype)
                   for layer in self.dec_layers)
    return Carry(jnp.zeros((), jnp.int32), caches), mem

  def cache_lengths(self, max_len: int, shortest: int | None = None,
                    most: int | None = None) -> tuple[int, ...]:
    """The KV cache lengths decoding grows through (greedy.segments), the last max_len:
    every step reads the whole cache and beam search reorders it, so on long outputs a cache
    about as long as the output so far costs less than one of max_len positions; but each
    segment is a loop compiled of its own (about as long to compile as the whole decoder
    step). So segments double, max_len / 4, max_len / 2, max_len (rounded up to multiples of
    8), at most `most` (default MAX_SEGMENTS) of them, none shorter than `shortest` (default
    CACHE_SEGMENT): outputs of fewer than 2 x shortest positions decode in one loop. Beam
    search on one core takes a finer schedule (shapes.kv_segments; docs/performance.md)."""
    shortest = CACHE_SEGMENT if shortest is None else shortest
    most = MAX_SEGMENTS if most is None else most
    if shortest < 1 or most < 1:
      raise ValueError(f'KV cache segments need shortest >= 1 and most >= 1, got '
                       f'shortest={shortest!r}, most={most!r}')
    ends = [max_len]
    while len(ends) < most and ends[0] // 2 >= shortest:
      ends.insert(0, -(-(ends[0] // 2) // 8) * 8)
    return tuple(ends)

  def resize(self, carry: Carry, length: int) -> Carry:
    """The carry with every KV cache cut or zero-padded to `length` positions; a cut keeps
    at least the positions written (length >= carry.t, as greedy.run_segments calls it)."""
    def fit(c):                                                                   # [N, L, ...]
      pad = [(0, 0), (0, max(length - c.shape[1], 0))] + [(0, 0)] * (c.ndim - 2)
      return jnp.pad(c[:, :length], pad)
    return carry._replace(caches=jax.tree.map(fit, carry.caches))

  def layer_weights(self, read: CrossWeights) -> jax.Array:
    """forward's read -> every decoder layer's cross-attention per head [B, N, H, T, S]."""
    return read.layers

  def step(self, carry: Carry, y_prev: jax.Array, mem):
    """y_prev [N] int32 (N = B·G) -> (carry, log-probabilities [N, V] float32, weights [N, S]:
    the last layer's cross-attention, mean over heads)."""
    cross, mask = mem
    y = self._inputs(self._embed_tgt(), y_prev[:, None], carry.t)               # [N, 1, D]
    caches = []
    for layer, cache, m in zip(self.dec_layers, carry.caches, cross):
      y, w, cache = layer.step(y, cache, carry.t, m, mask[:, None, :])
      caches.append(cache)
    if self.dec_norm is not None:
      y = self.dec_norm(y)
    logits = self._logits(y)[:, 0]                                               # [N, V]
    return (Carry(carry.t + 1, tuple(caches)), jax.nn.log_softmax(logits),
            jnp.mean(w[:, :, 0], axis=1))
