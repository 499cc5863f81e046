"""Multi-head attention over any content score of the registry (Vaswani et al. 2017, §3.2.2),
the one implementation used by the RNN encoder's self-attention layers (self_attention.py)
and by every attention of the Transformer (transformer.py).

For queries x [B, T, D] and keys/values from m [B, S, Dm], H heads of size d = D / H:
  q_i = x W_q^i,  k_i = m W_k^i,  v_i = m W_v^i                       [B, T|S, d]
  a_i = normalise_s(score_i(q_i, k_i)) over the allowed positions      [B, T, S]
  y   = [a_1 v_1; ...; a_H v_H] W_o                                    [B, T, D]
`score_i` is any content score (scores.py) with its own parameters per head: scaled_dot
(the Transformer's), dot, general, scaled_general, additive, normed_additive, cosine. The
normaliser is softmax or sparsemax (attention.NORMALISERS).

The work is split like a score's: `memory(m)` projects the keys and values and runs each
head's `precompute` once (for a decoder, once per sentence); `read(x, mem, mask)` does the
rest. Every content score's precompute acts on each position alone, so a decoder's
self-attention caches precompute(k_t) position by position (`KVCache`): a decoding step
costs one new key, not a pass over the prefix.

`fused`: where no weights are asked for and no dropout applies to them, a scaled_dot /
softmax attention computed in one call (`__call__`: self-attention, the encoder's and the
teacher-forced decoder's) goes through `jax.nn.dot_product_attention`, XLA's fused attention
(cuDNN's flash attention on a GPU where it applies). On the CPU it is slower than the
per-head path (docs/performance.md, "The Transformer against OpenNMT-py's"), so
`fused_attention=None` (auto) uses it on GPUs and TPUs only.

Queries may come in groups: when x holds G = N / B rows per memory sentence (beam search's
K hypotheses of a sentence), `read` scores them as G queries of that sentence, without
copying the memory G times.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import scores as scores_lib
from attention_jax.models import layers
from attention_jax.models.attention import NORMALISERS
from attention_jax.models.layers import dropout


def content_scores() -> list[str]:
  return sorted(n for n, c in scores_lib.SCORES.items() if c.content_based)


def check(score: str, heads: int, dim: int, what: str = 'self-attention',
          size_name: str = 'model size') -> None:
  """Raises ValueError for a score or head count multi-head attention cannot use."""
  cls = registry.lookup(scores_lib.SCORES, 'score', score)
  if not cls.content_based:
    raise ValueError(f'{what} needs a content score (one that compares a query with each '
                     f'key), got {score!r}; valid: {", ".join(content_scores())}')
  if not isinstance(heads, int) or heads < 1 or dim % heads:
    raise ValueError(f'{what}: the number of heads must be a positive divisor of the '
                     f'{size_name} {dim}, got {heads!r}')


class HeadMemory(NamedTuple):
  """Keys and values read by a multi-head attention, per head: one contiguous array per
  head, so that a read takes a head's keys and values without copying them out of a wider
  array (beam search over a Transformer's cache spent a quarter of its time in such copies)."""
  pre: tuple     # H arrays [B, S, A_i]: score_i.precompute(k_i)
  values: tuple  # H arrays [B, S, d]


class KVCache(NamedTuple):
  """A decoder self-attention's memory of the first L positions (fixed size L)."""
  pre: tuple     # H arrays [N, L, A_i]
  values: tuple  # H arrays [N, L, d]


class MultiHeadAttention(nnx.Module):

  def __init__(self, dim: int, *, heads: int, score: str, memory_dim: int | None = None,
               attn_dim: int | None = None, normaliser: str = 'softmax',
               attention_dropout: float = 0.0, max_src_len: int = 128, dtype: Any = jnp.float32,
               rngs: nnx.Rngs, what: str = 'self-attention', fused_attention: bool | None = None):
    check(score, heads, dim, what)
    if fused_attention is None:   # auto: see the module docstring
      fused_attention = jax.default_backend() != 'cpu'
    self.fusable = bool(fused_attention) and score == 'scaled_dot' and normaliser == 'softmax'
    memory_dim = memory_dim or dim
    self.heads, self.d = heads, dim // heads
    self.attention_dropout = attention_dropout
    self.normalise = registry.lookup(NORMALISERS, 'normaliser', normaliser)
    lin = lambda i, o: layers.Linear(i, o, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                                  rngs=rngs)
    self.q = lin(dim, dim)
    self.kv = lin(memory_dim, 2 * dim)
    self.out = lin(dim, dim)
    self.scores = nnx.List([
        scores_lib.make_score(score, query_dim=self.d, key_dim=self.d,
                              attn_dim=attn_dim or self.d, max_src_len=max_src_len,
                              dtype=dtype, rngs=rngs)
        for _ in range(heads)])

  def memory(self, m: jax.Array) -> HeadMemory:
    """m [B, S, Dm] -> HeadMemory (keys through each head's precompute, values)."""
    b, s, _ = m.shape
    k, v = jnp.split(self.kv(m).reshape(b, s, 2, self.heads, self.d), 2, axis=2)
    return HeadMemory(tuple(sc.precompute(k[:, :, 0, i]) for i, sc in enumerate(self.scores)),
                  tuple(v[:, :, 0, i] for i in range(self.heads)))

  def read(self, x: jax.Array, mem: HeadMemory | KVCache, mask: jax.Array,
           dropout_key: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """x [N, T, D] queries, mask [B, T or 1, S] bool (True = may attend) ->
    (y [N, T, D], weights [N, H, T, S] float32); every head's score, normaliser and product.

    N = B·G: each memory sentence b is read by rows b·G .. b·G + G - 1 of x (G = 1 unless
    beam search groups a sentence's hypotheses; then T must be 1)."""
    n, t, dim = x.shape
    b = mem.values[0].shape[0]
    g = n // b
    q = self.q(x).reshape(n, t, self.heads, self.d)
    if g > 1:   # G hypotheses of one sentence read it as G queries
      q = q.reshape(b, g * t, self.heads, self.d)
    keys = (None,) * self.heads if dropout_key is None else jax.random.split(dropout_key,
                                                                             self.heads)
    outs, weights = [], []
    for i, sc in enumerate(self.scores):
      a = self.normalise(sc(q[:, :, i], mem.pre[i]), mask)                  # [B, G·T, S]
      weights.append(a)
      a = dropout(a, self.attention_dropout, keys[i])
      outs.append(jnp.einsum('bts,bsd->btd', a.astype(mem.values[i].dtype), mem.values[i]))
    y = self.out(jnp.concatenate(outs, axis=-1).reshape(n, t, dim))         # [N, T, D]
    w = jnp.stack(weights, axis=1)                                          # [B, H, G·T, S]
    if g > 1:
      w = jnp.swapaxes(w, 1, 2).reshape(n, t, self.heads, -1).swapaxes(1, 2)
    return y, w

  def __call__(self, x: jax.Array, m: jax.Array, mask: jax.Array,
               dropout_key: jax.Array | None = None,
               weights: bool = True) -> tuple[jax.Array, jax.Array | None]:
    """x [B, T, D] attends to m [B, S, Dm] (m = x: self-attention) -> (y, weights [B, H, T, S]
    float32, or None with weights=False)."""
    dropping = dropout_key is not None and self.attention_dropout > 0
    if not (self.fusable and not weights and not dropping):
      y, w = self.read(x, self.memory(m), mask, dropout_key)
      return y, (w if weights else None)
    b, t, dim = x.shape
    q = self.q(x).reshape(b, t, self.heads, self.d)
    kv = self.kv(m).reshape(b, m.shape[1], 2, self.heads, self.d)
    mask = jnp.broadcast_to(mask, (b, t, m.shape[1]))                      # [B, T, S]
    y = jax.nn.dot_product_attention(q, kv[:, :, 0], kv[:, :, 1], mask=mask[:, None],
                                     scale=self.scores[0].scale)           # [B, T, H, d]
    y = jnp.where(jnp.any(mask, -1)[:, :, None, None], y, 0)  # no position: 0, as read gives
    return self.out(y.reshape(b, t, dim)), None

  # ---- incremental decoding (decoder self-attention) -----------------------
  def empty_cache(self, n: int, length: int, dtype: Any) -> KVCache:
    """A cache for n rows of up to `length` positions (filled by `step`)."""
    probe = self.memory(jnp.zeros((1, 1, self.kv.in_features), dtype))
    return KVCache(tuple(jnp.zeros((n, length) + p.shape[2:], p.dtype) for p in probe.pre),
                   tuple(jnp.zeros((n, length, self.d), v.dtype) for v in probe.values))

  def step(self, x: jax.Array, cache: KVCache, t: jax.Array) -> tuple[jax.Array, jax.Array,
                                                                       KVCache]:
    """x [N, 1, D], the input at position t -> (y [N, 1, D], weights [N, H, 1, L], cache with
    position t written); attends to positions 0..t (causal)."""
    new = self.memory(x)
    put = lambda c, u: jax.lax.dynamic_update_slice_in_dim(c, u.astype(c.dtype), t, axis=1)
    cache = KVCache(tuple(put(c, u) for c, u in zip(cache.pre, new.pre)),
                    tuple(put(c, u) for c, u in zip(cache.values, new.values)))
    mask = (jnp.arange(cache.values[0].shape[1]) <= t)[None, None, :]       # [1, 1, L]
    y, w = self.read(x, cache, mask)
    return y, w, cache
