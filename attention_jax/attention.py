"""Attention layers: masked normalisation of scores and the context vector.

  a[t, s] = normalise_s(e[t, s]) over real source positions (padding gets exactly 0)
  c_t     = Σ_s a[t, s] h̄_s

An all-padding row (a batch filler) gets all-zero weights and a zero context, never NaN.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import scores as scores_lib


def masked_softmax(e: jax.Array, mask: jax.Array) -> jax.Array:
  """e [..., S] scores, mask [..., S] bool (broadcastable) -> weights [..., S] in float32.

  Padded positions get exactly 0; a row with no real position gets all zeros.
  """
  e = e.astype(jnp.float32)
  mask = jnp.broadcast_to(mask, e.shape)
  e = jnp.where(mask, e, -1e30)
  m = jax.lax.stop_gradient(jnp.max(e, axis=-1, keepdims=True))
  p = jnp.where(mask, jnp.exp(e - m), 0.0)
  z = jnp.sum(p, axis=-1, keepdims=True)
  return p / jnp.where(z > 0, z, 1.0)


class Memory(NamedTuple):
  """What the decoder attends to, computed once per sentence (outside the decoder loop)."""
  keys: jax.Array     # [B, S, K] encoder annotations, zero on padding
  mask: jax.Array     # [B, S] bool, True on real source tokens
  pre: Any            # the score's source-side cache (e.g. W_k h̄ for additive)
  summary: jax.Array  # [B, K] the encoder's final state (the context of score 'none')


class Attention(nnx.Module):
  """Global soft attention (Bahdanau et al. 2015; Luong et al. 2015) with any score."""

  def __init__(self, score: str, *, query_dim: int, key_dim: int, attn_dim: int,
               max_src_len: int, dtype: Any = jnp.float32, rngs: nnx.Rngs):
    self.score = scores_lib.make_score(score, query_dim=query_dim, key_dim=key_dim,
                                       attn_dim=attn_dim, max_src_len=max_src_len,
                                       dtype=dtype, rngs=rngs)

  def memory(self, keys: jax.Array, mask: jax.Array, summary: jax.Array) -> Memory:
    """keys [B, S, K], mask [B, S], summary [B, K] -> Memory (source side, once)."""
    pre = self.score.precompute(keys) if self.score.attends else None
    return Memory(keys=keys, mask=mask, pre=pre, summary=summary)

  def __call__(self, query: jax.Array, mem: Memory) -> tuple[jax.Array, jax.Array]:
    """query [B, T, Q] -> (context [B, T, K], weights [B, T, S] float32)."""
    b, t, _ = query.shape
    s = mem.keys.shape[1]
    if not self.score.attends:
      context = jnp.broadcast_to(mem.summary[:, None, :], (b, t, mem.summary.shape[-1]))
      return context, jnp.zeros((b, t, s), jnp.float32)
    e = self.score(query, mem.pre)                                   # [B, T, S]
    weights = masked_softmax(e, mem.mask[:, None, :])                # [B, T, S]
    context = jnp.einsum('bts,bsk->btk', weights.astype(mem.keys.dtype), mem.keys)
    return context, weights
