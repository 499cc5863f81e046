"""Encoder: embeddings -> N layers of (bi)directional GRU/LSTM -> annotations h̄_s.

For a bidirectional layer h̄_s = [→h_s; ←h_s] (Bahdanau et al. 2015), so the annotation
size is K = 2·hidden (hidden if unidirectional). Dropout is applied to the embeddings and
between layers. The summary (the context of score 'none', and the decoder's initial state)
is [→h_last; ←h_first] (Cho et al. 2014; Bahdanau et al. 2015, appendix A.2.2).
Optionally, self-attention layers (self_attention.py) refine the annotations. Registered as
the source encoder 'rnn' of token sources (encoders.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import fields

from attention_jax.models import cells
from attention_jax.models.encoders import Encoded, register_encoder
from attention_jax.models.layers import dropout
from attention_jax.models import self_attention
from attention_jax.models.self_attention import SelfAttentionLayer

__all__ = ['Encoded', 'Encoder']


@register_encoder('rnn')
class Encoder(nnx.Module):
  source = 'tokens'

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SMOKE = {'emb_dim': 16, 'enc_hidden': 16, 'attn_dim': 16}
    emb_dim: int = fields.positive(64, 'source embedding size')
    enc_hidden: int = fields.positive(64, 'state size of each direction')
    enc_layers: int = fields.positive(1, 'stacked encoder cells')
    bidirectional: bool = fields.field(True, 'a backward RNN too (annotations 2 x enc_hidden)')
    cell: str = fields.one_of('gru', lambda: cells.CELLS, 'the recurrent cell')
    self_attention_layers: int = fields.count(0, 'self-attention layers over the annotations '
                                              '(0: none)')
    self_attention_heads: int = fields.positive(4, "their heads")
    self_attention_score: str = fields.field('scaled_dot', 'their score')
    attn_dim: int = fields.positive(64, "the additive score's hidden size")

  @classmethod
  def check(cls, cfg) -> None:
    if cfg.self_attention_layers:
      self_attention.check(cfg.self_attention_score, cfg.self_attention_heads, cfg.key_dim)

  @classmethod
  def build(cls, cfg, *, dim: int, rngs: nnx.Rngs) -> 'Encoder':
    """From a model.ModelConfig; its annotation size is cfg.key_dim (= dim)."""
    if dim != cfg.key_dim:
      raise ValueError(f"the 'rnn' encoder's annotations have {cfg.key_dim} numbers "
                       f'(model.enc_hidden x directions), the decoder needs {dim}')
    return cls(vocab=cfg.src_vocab, emb_dim=cfg.emb_dim, hidden=cfg.enc_hidden,
               layers=cfg.enc_layers, bidirectional=cfg.bidirectional, cell=cfg.cell,
               dropout=cfg.dropout, dtype=cfg.compute_dtype,
               self_layers=cfg.self_attention_layers, self_heads=cfg.self_attention_heads,
               self_score=cfg.self_attention_score, attn_dim=cfg.attn_dim,
               max_src_len=cfg.max_src_len, rngs=rngs)

  def __init__(self, *, vocab: int, emb_dim: int, hidden: int, layers: int,
               bidirectional: bool, cell: str, dropout: float, dtype: Any, rngs: nnx.Rngs,
               self_layers: int = 0, self_heads: int = 4, self_score: str = 'scaled_dot',
               attn_dim: int = 64, max_src_len: int = 128):
    self.embed = nnx.Embed(vocab, emb_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    self.dropout = dropout
    self.directions = 2 if bidirectional else 1
    self.out_dim = hidden * self.directions
    fwd, bwd = [], []
    for layer in range(layers):
      in_dim = emb_dim if layer == 0 else self.out_dim
      fwd.append(cells.make_cell(cell, in_dim, hidden, dtype=dtype, rngs=rngs))
      if bidirectional:
        bwd.append(cells.make_cell(cell, in_dim, hidden, dtype=dtype, rngs=rngs))
    self.fwd = nnx.List(fwd)
    self.bwd = nnx.List(bwd)
    self.self_attention = nnx.List([
        SelfAttentionLayer(self.out_dim, heads=self_heads, score=self_score, attn_dim=attn_dim,
                           max_src_len=max_src_len, dropout=dropout, dtype=dtype, rngs=rngs)
        for _ in range(self_layers)])

  def source_mask(self, src: jax.Array) -> jax.Array:
    """src [B, S] int32 -> [B, S] bool: the tokens that are not padding (id 0)."""
    return src != 0

  def grid(self, shape) -> None:
    del shape
    return None

  def __call__(self, src: jax.Array, *, dropout_key: jax.Array | None = None,
               shift: jax.Array | None = None) -> Encoded:
    """src [B, S] int32 (0 = padding) -> Encoded. shift [B, S, E]: added to the embedded
    source (attribution.py differentiates with respect to it)."""
    mask = self.source_mask(src)                                      # [B, S]
    n = len(self.fwd) + len(self.self_attention) + 1
    keys = (None,) * n if dropout_key is None else tuple(jax.random.split(dropout_key, n))
    x = self.embed(src)                                               # [B, S, E]
    if shift is not None:
      x = x + shift.astype(x.dtype)
    x = dropout(x, self.dropout, keys[0])
    for layer, fwd in enumerate(self.fwd):
      if layer > 0:
        x = dropout(x, self.dropout, keys[layer])
      out_f, carry_f = cells.run(fwd, fwd.project(x), mask)           # [B, S, H]
      outs, finals = [out_f], [fwd.output(carry_f)]
      if self.bwd:
        bwd = self.bwd[layer]
        out_b, carry_b = cells.run(bwd, bwd.project(x), mask, reverse=True)
        outs.append(out_b)
        finals.append(bwd.output(carry_b))
      x = jnp.concatenate(outs, axis=-1)                              # [B, S, K]
      summary = jnp.concatenate(finals, axis=-1)                      # [B, K]
    for i, layer in enumerate(self.self_attention):
      x, _ = layer(x, mask, keys[len(self.fwd) + 1 + i])               # [B, S, K]
    return Encoded(annotations=x, mask=mask, summary=summary)
