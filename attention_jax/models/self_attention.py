"""Self-attention (intra-attention) over the encoder annotations (Cheng, Dong & Lapata 2016,
"Long Short-Term Memory-Networks for Machine Reading"; multi-head as in Vaswani et al. 2017).

Each layer, for annotations x [B, S, K] with H heads of size d = K / H:
  q_i, k_i, v_i = x W_q^i, x W_k^i, x W_v^i                        [B, S, d] per head
  a_i = masked_softmax(score_i(q_i, k_i)) over real source positions  [B, S, S]
  y   = LayerNorm(x + dropout([a_1 v_1; ...; a_H v_H] W_o))          [B, S, K]
`score_i` is any content score of the registry (scaled_dot by default). Padding positions
are neither attended to nor changed (their output is zero), so padding does not change the
outputs of real positions.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax.models import multihead
from attention_jax.models.layers import dropout


def check(score: str, heads: int, key_dim: int) -> None:
  """Raises ValueError for a score or head count the self-attention cannot use."""
  multihead.check(score, heads, key_dim, 'self-attention (model.self_attention_score, '
                  'model.self_attention_heads)', 'annotation size')


class SelfAttentionLayer(nnx.Module):

  def __init__(self, dim: int, *, heads: int, score: str, attn_dim: int, max_src_len: int,
               dropout: float, dtype: Any, rngs: nnx.Rngs):
    check(score, heads, dim)
    self.dropout = dropout
    self.attn = multihead.MultiHeadAttention(dim, heads=heads, score=score, attn_dim=attn_dim,
                                             max_src_len=max_src_len, dtype=dtype, rngs=rngs)
    self.norm = nnx.LayerNorm(dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

  def __call__(self, x: jax.Array, mask: jax.Array, dropout_key=None):
    """x [B, S, K], mask [B, S] -> (y [B, S, K] zero on padding, weights [B, H, S, S])."""
    y, weights = self.attn(x, x, mask[:, None, :])                          # [B, S, K]
    y = self.norm(x + dropout(y, self.dropout, dropout_key))
    return y * mask[:, :, None].astype(y.dtype), weights
