"""Alignment score functions e[t, s] = score(q_t, h̄_s), one small module each, found by name.

Every score splits its work in two, so that nothing that depends only on the source is
recomputed inside the decoder loop:

  pre = score.precompute(keys)   # keys [B, S, K] -> source-side cache, once per sentence
  e   = score(query, pre)        # query [B, T, Q] -> scores [B, T, S], per step (T = 1) or batched

Adding a score: subclass `Score`, implement those two methods, decorate with
`@register('name')`. A score of the form e = φ(q)ᵀ pre_s subclasses `Bilinear` and implements
`query_map` (φ) instead of `__call__`: the decoder loop then defers pre's gradient. The
tests are parametrized over `SCORES`, so a new entry is tested (it needs a NumPy reference
in tests/test_scores.py).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import layers

SCORES: dict[str, type['Score']] = {}


register = registry.registrar(SCORES, 'score')


def make_score(name: str, *, query_dim: int, key_dim: int, attn_dim: int,
               max_src_len: int, dtype: Any = jnp.float32, rngs: nnx.Rngs) -> 'Score':
  """Builds the score called `name`; unknown names fail with the list of valid ones."""
  cls = registry.lookup(SCORES, 'score', name)
  cls.check_sizes(query_dim, key_dim)
  return cls(query_dim=query_dim, key_dim=key_dim, attn_dim=attn_dim,
                      max_src_len=max_src_len, dtype=dtype, rngs=rngs)


class Score(nnx.Module):
  """Base class. `attends` is False only for `none` (no attention at all);
  `content_based` is False for scores that ignore the keys (`location`, `none`);
  `supports_coverage` is True for the additive scores, which take a coverage term."""

  name = 'base'
  attends = True
  bilinear = False
  content_based = True
  supports_coverage = False

  @classmethod
  def check_sizes(cls, query_dim: int, key_dim: int) -> None:
    """Raises ValueError if this score cannot compare queries and keys of these sizes."""

  @classmethod
  def check_source_length(cls, length: int, max_src_len: int) -> None:
    """Raises ValueError if this score cannot score `length` source positions (EOS and
    padding included) when built with max_src_len; every content score can."""

  def precompute(self, keys: jax.Array) -> Any:
    """keys [B, S, K] -> whatever __call__ needs from the source side."""
    return keys

  def __call__(self, query: jax.Array, pre: Any) -> jax.Array:
    """query [B, T, Q], pre from precompute -> scores [B, T, S]."""
    raise NotImplementedError


GROUP_MAX = 16  # at most this many queries per sentence count as a beam's group (match)


def match(query: jax.Array, keys: jax.Array) -> jax.Array:
  """query [B, T, D], keys [B, S, D] -> q_tᵀ k_s [B, T, S].

  A few queries per sentence (1 < T <= GROUP_MAX: beam search reads a sentence's K
  hypotheses at once) read the keys laid out [B, D, S], which XLA's CPU dot multiplies
  faster (docs/performance.md, "What was tried"). The barrier keeps XLA from folding the transpose back into the dot; loop-invariant
  code motion hoists it (the keys do not change) out of the decoding loop."""
  if 1 < query.shape[1] <= GROUP_MAX:
    keys_t = jax.lax.optimization_barrier(jnp.swapaxes(keys, 1, 2))       # [B, D, S]
    return jnp.einsum('btd,bds->bts', query, keys_t)
  return jnp.einsum('btd,bsd->bts', query, keys)


class Bilinear(Score):
  """A score e = φ(q)ᵀ pre_s, linear in the source-side cache `pre`. The decoder's time loop
  then leaves pre's gradient Σ_t d_e_t φ(q_t)ᵀ to one batched matmul after the loop
  (rnn_decoder.py), instead of accumulating an outer product into [B, S, D] at every step."""

  bilinear = True

  def query_map(self, query: jax.Array) -> jax.Array:
    """query [B, T, Q] -> φ(q) [B, T, D]."""
    return query

  def __call__(self, query, pre):
    return match(self.query_map(query), pre)


def _linear(i, o, *, bias, dtype, rngs):
  return layers.Linear(i, o, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class _SameSize(Bilinear):

  @classmethod
  def check_sizes(cls, query_dim, key_dim):
    if query_dim != key_dim:
      raise ValueError(
          f'score {cls.name!r} needs equal query and key sizes, got query (decoder state) '
          f'size {query_dim} and key (encoder annotation) size {key_dim}; use '
          f"'general' or 'additive', or make dec_hidden equal the annotation size")


@register('dot')
class Dot(_SameSize):
  """e = qᵀ h̄ (Luong, Pham & Manning 2015, "Effective Approaches to Attention-based NMT")."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del attn_dim, max_src_len, dtype, rngs


@register('scaled_dot')
class ScaledDot(_SameSize):
  """e = qᵀ h̄ / √d (Vaswani et al. 2017, "Attention Is All You Need")."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del attn_dim, max_src_len, dtype, rngs
    self.scale = 1.0 / math.sqrt(key_dim)

  def precompute(self, keys):
    return keys * jnp.asarray(self.scale, keys.dtype)


@register('general')
class General(Bilinear):
  """e = qᵀ W_a h̄, bilinear / "multiplicative" (Luong et al. 2015). W_a h̄ is precomputed."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del attn_dim, max_src_len
    self.w_a = _linear(key_dim, query_dim, bias=False, dtype=dtype, rngs=rngs)

  def precompute(self, keys):
    return self.w_a(keys)  # [B, S, Q]


@register('scaled_general')
class ScaledGeneral(General):
  """e = g · qᵀ W_a h̄ with a learned scalar g, init 1 ("scaled_luong", TF NMT tutorial,
  Luong et al. 2017, https://github.com/tensorflow/nmt)."""

  def __init__(self, **kw):
    super().__init__(**kw)
    self.g = nnx.Param(jnp.ones((), jnp.float32))

  def query_map(self, query):
    return self.g[...].astype(query.dtype) * query


@register('additive')
class Additive(Score):
  """e = v_aᵀ tanh(W_q q + W_k h̄ + b), "concat" in Luong's naming (Bahdanau, Cho & Bengio
  2015, "Neural Machine Translation by Jointly Learning to Align and Translate").
  W_k h̄ + b is precomputed."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del max_src_len
    self.w_q = _linear(query_dim, attn_dim, bias=False, dtype=dtype, rngs=rngs)
    self.w_k = _linear(key_dim, attn_dim, bias=True, dtype=dtype, rngs=rngs)
    self.v = nnx.Param(jax.random.normal(rngs.params(), (attn_dim,)) / math.sqrt(attn_dim))

  supports_coverage = True
  w_c = None

  def enable_coverage(self, attn_dim: int, *, rngs: nnx.Rngs) -> None:
    """Adds the coverage term w_c · cov_{t,s} inside the tanh (Tu et al. 2016, "Modeling
    Coverage for Neural Machine Translation"; See et al. 2017, "Get To The Point")."""
    self.w_c = nnx.Param(jax.random.normal(rngs.params(), (attn_dim,)) * 0.1)

  def precompute(self, keys):
    return self.w_k(keys)  # [B, S, A]

  def v_vector(self) -> jax.Array:
    return self.v[...]

  # batched over many t (Luong without input feeding) the [B, T, S, A] intermediate is
  # computed in chunks of t so that it stays under this many elements
  chunk_elements = 1 << 22

  def __call__(self, query, pre, cov=None):
    """query [B, T, Q], pre [B, S, A], cov [B, T, S] (only with coverage) -> [B, T, S]."""
    q = self.w_q(query)                                                    # [B, T, A]
    b, t, a = q.shape
    chunk = max(1, self.chunk_elements // (b * pre.shape[1] * a))
    if t <= chunk:
      return self._scores(q, pre, cov)
    n = -(-t // chunk)
    pad = lambda x: jnp.swapaxes(jnp.pad(x, ((0, 0), (0, n * chunk - t), (0, 0))).reshape(
        b, n, chunk, x.shape[-1]), 0, 1)                                    # [n, B, chunk, .]
    xs = (pad(q), None if cov is None else pad(cov))
    e = jax.lax.map(lambda x: self._scores(x[0], pre, x[1]), xs)           # [n, B, chunk, S]
    return jnp.swapaxes(e, 0, 1).reshape(b, n * chunk, -1)[:, :t]

  def _scores(self, q, pre, cov):
    w_c = None if self.w_c is None else self.w_c[...]
    return _additive_energies(q, pre, cov, w_c, self.v_vector())


@jax.checkpoint
def _additive_energies(q, pre, cov, w_c, v):
  """v · tanh(q + pre [+ cov w_c]): q [B, T, A], pre [B, S, A], cov [B, T, S] -> [B, T, S].
  jax.checkpoint: the backward pass recomputes the [B, T, S, A] tanh instead of storing it
  (inside the decoder loop that is [T, B, S, A] in all, hundreds of MB for the char
  benchmark); recomputing is cheaper than the memory traffic (docs/performance.md)."""
  x = q[:, :, None, :] + pre[:, None, :, :]                                 # [B, T, S, A]
  if w_c is not None:
    x = x + cov[..., None].astype(x.dtype) * w_c.astype(x.dtype)[None, None, None]
  hidden = jnp.tanh(x)
  return hidden @ v.astype(hidden.dtype)


@register('normed_additive')
class NormedAdditive(Additive):
  """Additive with weight normalisation v = g · v_a / ‖v_a‖ (Salimans & Kingma 2016;
  "normed_bahdanau" of the TF NMT tutorial). g is a learned scalar, init √(1/A)."""

  def __init__(self, *, attn_dim, **kw):
    super().__init__(attn_dim=attn_dim, **kw)
    self.g = nnx.Param(jnp.full((), math.sqrt(1.0 / attn_dim), jnp.float32))

  def v_vector(self):
    v = self.v[...]
    return self.g[...] * v / jnp.linalg.norm(v)


@register('location')
class Location(Score):
  """e_t = W_a q_t ∈ R^{S_max}: location-based, depends on the target state only
  (Luong et al. 2015). Sentences longer than `max_src_len` cannot be scored."""

  content_based = False

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del key_dim, attn_dim
    self.max_src_len = max_src_len
    self.w_a = _linear(query_dim, max_src_len, bias=True, dtype=dtype, rngs=rngs)

  @classmethod
  def check_source_length(cls, length: int, max_src_len: int) -> None:
    if length > max_src_len:
      raise ValueError(f"score 'location' scores at most model.max_src_len={max_src_len} "
                       f'source positions (its output layer), got {length}')

  def precompute(self, keys):
    self.check_source_length(keys.shape[1], self.max_src_len)   # (at trace time)
    return keys[:, :, :0]  # [B, S, 0]: carries S as a static shape, also through jit

  def __call__(self, query, pre):
    return self.w_a(query)[..., :pre.shape[1]]  # [B, T, S]


@register('cosine')
class Cosine(Bilinear):
  """e = β · cos(W_k q, h̄): content-based addressing of Neural Turing Machines (Graves,
  Wayne & Danihelka 2014). The query emits a key W_k q of the annotation size; the
  sharpness β = softplus(b) > 0 is learned (init 10, so the softmax is not flat)."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del attn_dim, max_src_len
    self.w_k = _linear(query_dim, key_dim, bias=False, dtype=dtype, rngs=rngs)
    self.beta_raw = nnx.Param(jnp.full((), 10.0, jnp.float32))  # softplus(10) ≈ 10

  @staticmethod
  def _unit(x):
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-12)

  def precompute(self, keys):
    return self._unit(keys)  # [B, S, K], unit norm

  def beta(self):
    return jax.nn.softplus(self.beta_raw[...])

  def query_map(self, query):
    return self.beta() * self._unit(self.w_k(query))  # [B, T, K]: β · unit(W_k q)


@register('none')
class NoAttention(Score):
  """No attention: the classic encoder-decoder, whose only context is the encoder's final
  state (Cho et al. 2014; Sutskever, Vinyals & Le 2014). Weights come out as zeros."""

  attends = False
  content_based = False

  def __init__(self, **kw):
    del kw

  def __call__(self, query, pre):
    raise TypeError("score 'none' computes no scores; the attention layer handles it")
