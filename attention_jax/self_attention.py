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

from attention_jax import registry
from attention_jax import scores as scores_lib
from attention_jax.attention import masked_softmax
from attention_jax.layers import dropout


def check(score: str, heads: int, key_dim: int) -> None:
  """Raises ValueError for a score or head count the self-attention cannot use."""
  cls = registry.lookup(scores_lib.SCORES, 'score', score)
  if not cls.content_based:
    valid = sorted(n for n, c in scores_lib.SCORES.items() if c.content_based)
    raise ValueError(f'self-attention needs a content score, got {score!r}; valid: '
                     f'{", ".join(valid)}')
  if heads < 1 or key_dim % heads:
    raise ValueError(f'self_attention_heads must be a positive divisor of the annotation '
                     f'size {key_dim}, got {heads}')


class SelfAttentionLayer(nnx.Module):

  def __init__(self, dim: int, *, heads: int, score: str, attn_dim: int, max_src_len: int,
               dropout: float, dtype: Any, rngs: nnx.Rngs):
    check(score, heads, dim)
    self.heads, self.d, self.dropout = heads, dim // heads, dropout
    lin = lambda i, o: nnx.Linear(i, o, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                                  rngs=rngs)
    self.qkv = lin(dim, 3 * dim)
    self.out = lin(dim, dim)
    self.scores = nnx.List([
        scores_lib.make_score(score, query_dim=self.d, key_dim=self.d, attn_dim=attn_dim,
                              max_src_len=max_src_len, dtype=dtype, rngs=rngs)
        for _ in range(heads)])
    self.norm = nnx.LayerNorm(dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

  def __call__(self, x: jax.Array, mask: jax.Array, dropout_key=None):
    """x [B, S, K], mask [B, S] -> (y [B, S, K] zero on padding, weights [B, H, S, S])."""
    b, s, k = x.shape
    q, kk, v = jnp.split(self.qkv(x).reshape(b, s, 3, self.heads, self.d), 3, axis=2)
    outs, weights = [], []
    for i, score in enumerate(self.scores):
      e = score(q[:, :, 0, i], score.precompute(kk[:, :, 0, i]))           # [B, S, S]
      a = masked_softmax(e, mask[:, None, :])                               # [B, S, S]
      outs.append(jnp.einsum('bts,bsd->btd', a.astype(v.dtype), v[:, :, 0, i]))
      weights.append(a)
    y = self.out(jnp.concatenate(outs, axis=-1))                            # [B, S, K]
    y = self.norm(x + dropout(y, self.dropout, dropout_key))
    return y * mask[:, :, None].astype(y.dtype), jnp.stack(weights, axis=1)
