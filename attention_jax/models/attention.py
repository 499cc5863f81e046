"""Attention layers: scores -> weights (normaliser + mode) -> context.

  e[t, s] = score(q_t, h̄_s [, cov_t,s])          scores.py, any registered score
  a[t, s] = normalise_s(e[t, s]) over the positions the mode allows (padding gets exactly 0)
  c_t     = Σ_s a[t, s] h̄_s   (soft modes)  or  h̄_{s_t}, s_t ~ a_t (hard modes)

Normalisers (NORMALISERS): softmax, sparsemax (Martins & Astudillo 2016: exact zeros).
Modes (MODES), each from its paper:
  global    soft attention over every source position (Bahdanau et al. 2015).
  local_m   a window [p_t - D, p_t + D] around p_t = t (Luong et al. 2015, monotonic).
  local_p   p_t = S · sigmoid(v_pᵀ tanh(W_p q_t)) with S the sentence's true length; the
            normalised weights inside |s - p_t| <= D times exp(-(s - p_t)² / (2σ²)), σ = D/2
            (Luong et al. 2015, predictive). These weights sum to at most 1, as in the paper.
  hard      one sampled position s_t ~ Categorical(a_t) in training, argmax at evaluation
            (Xu et al. 2015); trained by REINFORCE (objective.py).
  hard_st   straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017): the
            forward pass uses a one-hot sample, the backward pass the relaxed sample.
Coverage (Tu et al. 2016; See et al. 2017): cov_t = Σ_{t'<t} a_{t'} enters the additive
score; the layer reports the coverage loss Σ_s min(a_{t,s}, cov_{t,s}).

Adding a mode: subclass `Mode`, override `restrict` (which positions, which factor) and/or
`read` (how the context is formed), and decorate it with `@register_mode('name')`.
An all-padding row (a batch filler) gets all-zero weights and a zero context, never NaN.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import layers
from attention_jax.models import scores as scores_lib

NEG = -1e30


def masked_softmax(e: jax.Array, mask: jax.Array) -> jax.Array:
  """e [..., S] scores, mask [..., S] bool (broadcastable) -> weights [..., S] in float32.

  Padded positions get exactly 0; a row with no real position gets all zeros.
  """
  e = e.astype(jnp.float32)
  mask = jnp.broadcast_to(mask, e.shape)
  e = jnp.where(mask, e, NEG)
  m = jax.lax.stop_gradient(jnp.max(e, axis=-1, keepdims=True))
  p = jnp.where(mask, jnp.exp(e - m), 0.0)
  z = jnp.sum(p, axis=-1, keepdims=True)
  return p / jnp.where(z > 0, z, 1.0)


def masked_sparsemax(e: jax.Array, mask: jax.Array) -> jax.Array:
  """Sparsemax (Martins & Astudillo 2016): the Euclidean projection of e onto the simplex,
  p = max(e - τ, 0) with τ chosen so that Σ p = 1; many weights are exactly 0.

  e [..., S], mask [..., S] bool -> weights [..., S] float32; padding and all-padding rows
  as in `masked_softmax`. Ties share the mass equally (sparsemax([1, 1]) = [.5, .5]).
  """
  e = e.astype(jnp.float32)
  mask = jnp.broadcast_to(mask, e.shape)
  z = jnp.where(mask, e, NEG)
  z_sorted = -jnp.sort(-z, axis=-1)                                      # descending
  k = jnp.arange(1, z.shape[-1] + 1, dtype=jnp.float32).reshape((1,) * (z.ndim - 1) + (-1,))
  cum = jnp.cumsum(jnp.where(z_sorted > NEG / 2, z_sorted, 0.0), axis=-1)
  support = (1.0 + k * z_sorted > cum) & (z_sorted > NEG / 2)           # [..., S]
  k_z = jnp.sum(support, axis=-1, keepdims=True)                         # support size
  cum_k = jnp.take_along_axis(cum, jnp.maximum(k_z - 1, 0), axis=-1)
  tau = (cum_k - 1.0) / jnp.maximum(k_z, 1).astype(jnp.float32)
  return jnp.where(mask & (k_z > 0), jnp.maximum(z - tau, 0.0), 0.0)


NORMALISERS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    'softmax': masked_softmax, 'sparsemax': masked_sparsemax}


class Memory(NamedTuple):
  """What the decoder attends to, computed once per sentence (outside the decoder loop)."""
  keys: jax.Array     # [B, S, K] encoder annotations, zero on padding
  mask: jax.Array     # [B, S] bool, True on real source tokens
  pre: Any            # the score's source-side cache (e.g. W_k h̄ for additive)
  summary: jax.Array  # [B, K] the encoder's final state (the context of score 'none')


class Read(NamedTuple):
  """One attention read for T query steps."""
  context: jax.Array        # [B, T, K]
  weights: jax.Array        # [B, T, S] float32 (hard modes: the distribution sampled from)
  logp: jax.Array           # [B, T] log a_{t, s_t} of the sampled position (hard), else 0
  entropy: jax.Array        # [B, T] entropy of a_t (hard modes), else 0
  coverage_loss: jax.Array  # [B, T] Σ_s min(a_{t,s}, cov_{t,s}) with coverage, else 0
  query: Any = None         # [B, T, D] φ(q) of a bilinear score, read with a Tap; else None


class Tap(NamedTuple):
  """Zeros added to one read's scores and context inside the decoder loop: their gradients
  are d_e_t and d_c_t, from which the decoder forms the memory's gradient after the loop
  (rnn_decoder.py). `scores` is None unless the score is bilinear."""
  scores: jax.Array | None  # [B, T, S]
  context: jax.Array        # [B, T, K]


class Sample(NamedTuple):
  """What a sampling mode draws with in training: a key, and which examples read the
  expected (soft) context instead of a sample (Xu et al. 2015 §4.1; update.train_step draws
  them with probability train.hard_expected_p). Passed where a plain sampling key may be."""
  key: jax.Array
  expected: jax.Array   # [B] bool


def split_sample(sample, n: int):
  """A key or a Sample -> n of them stacked on a leading axis (one per decoder step or
  ensemble member): fresh keys, the same examples on the expected context."""
  if isinstance(sample, Sample):
    return Sample(jax.random.split(sample.key, n),
                  jnp.broadcast_to(sample.expected, (n,) + sample.expected.shape))
  return jax.random.split(sample, n)


def _key(sample):
  return sample.key if isinstance(sample, Sample) else sample


MODES: dict[str, type['Mode']] = {}
register_mode = registry.registrar(MODES, 'attention mode')


class Mode(nnx.Module):
  """Global soft attention; subclasses restrict the positions or change how c_t is read."""

  windowed = False     # uses a window around p_t (not meaningful for the 'location' score)
  stochastic = False   # samples positions in training (needs a key, trained by REINFORCE)

  def __init__(self, *, query_dim: int, window: int, temperature: float, dtype: Any,
               rngs: nnx.Rngs):
    del query_dim, window, temperature, dtype, rngs

  def restrict(self, query, mem: Memory, pos):
    """-> (allowed [B, T, S] bool or None, factor [B, T, S] float32 or None)."""
    del query, mem, pos
    return None, None

  def read(self, weights, keys, key):
    """weights [B, T, S], keys [B, S, K] -> (context [B, T, K], logp [B, T], entropy [B, T])."""
    del key
    ctx = jnp.einsum('bts,bsk->btk', weights.astype(keys.dtype), keys)
    zero = jnp.zeros(weights.shape[:2], jnp.float32)
    return ctx, zero, zero


register_mode('global')(Mode)


def _lengths(mem: Memory) -> jax.Array:
  return jnp.sum(mem.mask, axis=-1).astype(jnp.float32)                   # [B]


@register_mode('local_m')
class LocalMonotonic(Mode):
  """Luong et al. 2015 local-m: p_t = t (clipped to the sentence's last position); the
  weights are normalised over the window [p_t - D, p_t + D] and are 0 outside it."""

  windowed = True

  def __init__(self, *, window, **kw):
    super().__init__(window=window, **kw)
    self.window = window

  def restrict(self, query, mem, pos):
    last = jnp.maximum(_lengths(mem) - 1.0, 0.0)                          # [B]
    p = jnp.minimum(pos.astype(jnp.float32)[None, :], last[:, None])      # [B, T]
    s = jnp.arange(mem.mask.shape[1], dtype=jnp.float32)
    return jnp.abs(s[None, None, :] - p[:, :, None]) <= self.window, None


@register_mode('local_p')
class LocalPredictive(Mode):
  """Luong et al. 2015 local-p: p_t = S · sigmoid(v_pᵀ tanh(W_p q_t)), S the true source
  length; a_{t,s} = align(q_t, h̄_s) · exp(-(s - p_t)² / (2σ²)), σ = D/2, for
  |s - p_t| <= D and exactly 0 outside. The Gaussian lets the gradient reach W_p, v_p."""

  windowed = True

  def __init__(self, *, query_dim, window, dtype, rngs, **kw):
    super().__init__(query_dim=query_dim, window=window, dtype=dtype, rngs=rngs, **kw)
    self.window = window
    self.w_p = layers.Linear(query_dim, query_dim, use_bias=False, dtype=dtype,
                          param_dtype=jnp.float32, rngs=rngs)
    self.v_p = layers.Linear(query_dim, 1, use_bias=False, dtype=dtype,
                          param_dtype=jnp.float32, rngs=rngs)

  def position(self, query, mem):
    """query [B, T, Q] -> p_t [B, T] float32 in [0, S]."""
    g = jax.nn.sigmoid(self.v_p(jnp.tanh(self.w_p(query)))[..., 0].astype(jnp.float32))
    return _lengths(mem)[:, None] * g

  def restrict(self, query, mem, pos):
    del pos
    p = self.position(query, mem)[:, :, None]                              # [B, T, 1]
    s = jnp.arange(mem.mask.shape[1], dtype=jnp.float32)[None, None, :]
    sigma = self.window / 2.0
    return jnp.abs(s - p) <= self.window, jnp.exp(-(s - p) ** 2 / (2.0 * sigma ** 2))


def _safe_log(p):
  return jnp.log(jnp.where(p > 0, p, 1.0))


def _entropy(weights):
  return -jnp.sum(jnp.where(weights > 0, weights * _safe_log(weights), 0.0), axis=-1)


@register_mode('hard')
class Hard(Mode):
  """Stochastic hard attention (Xu et al. 2015): c_t = h̄_{s_t}, s_t ~ Categorical(a_t) when
  a key is given (training), s_t = argmax_s a_t otherwise. Returns log a_{t,s_t} and the
  entropy of a_t for the REINFORCE objective (objective.py)."""

  stochastic = True

  def read(self, weights, keys, key):
    """key: None (argmax), a key, or a Sample whose `expected` examples [B] read the soft
    context with log-probability 0 (no REINFORCE term)."""
    logw = jnp.where(weights > 0, _safe_log(weights), -jnp.inf)
    if key is None:
      s = jnp.argmax(weights, axis=-1)                                     # [B, T]
    else:
      s = jax.random.categorical(_key(key), logw, axis=-1)                 # [B, T]
    picked = jnp.take_along_axis(weights, s[..., None], axis=-1)[..., 0]   # [B, T]
    ctx = jnp.take_along_axis(keys, s[..., None], axis=1)                  # [B, T, K]
    logp = _safe_log(picked)
    if isinstance(key, Sample):
      soft, _, _ = super().read(weights, keys, None)                       # [B, T, K]
      ctx = jnp.where(key.expected[:, None, None], soft, ctx)
      logp = jnp.where(key.expected[:, None], 0.0, logp)
    return ctx, logp, _entropy(weights)


@register_mode('hard_st')
class HardStraightThrough(Mode):
  """Straight-through Gumbel-softmax (Jang, Gu & Poole 2017): forward c_t = h̄_{s_t} with
  s_t = argmax_s (log a_{t,s} + g_s), g ~ Gumbel(0, 1) in training (argmax a_t at
  evaluation); backward through softmax((log a_t + g) / τ). τ is `temperature`."""

  def __init__(self, *, temperature, **kw):
    super().__init__(temperature=temperature, **kw)
    self.temperature = temperature

  def read(self, weights, keys, key):
    real = weights > 0
    logw = jnp.where(real, _safe_log(weights), NEG)
    if key is not None:
      logw = logw + jax.random.gumbel(_key(key), logw.shape)
    soft = masked_softmax(logw / self.temperature, real)
    hard = jax.nn.one_hot(jnp.argmax(logw, -1), weights.shape[-1]) * jnp.any(real, -1,
                                                                                 keepdims=True)
    onehot = hard + soft - jax.lax.stop_gradient(soft)
    ctx = jnp.einsum('bts,bsk->btk', onehot.astype(keys.dtype), keys)
    zero = jnp.zeros(weights.shape[:2], jnp.float32)
    return ctx, zero, zero


def check_normaliser(normaliser: str) -> None:
  registry.lookup(NORMALISERS, 'normaliser', normaliser)


def check_combination(score: str, mode: str, normaliser: str, coverage: bool) -> None:
  """Raises ValueError, naming the valid choices, for combinations that make no sense."""
  cls = registry.lookup(scores_lib.SCORES, 'score', score)
  mode_cls = registry.lookup(MODES, 'attention mode', mode)
  registry.lookup(NORMALISERS, 'normaliser', normaliser)
  if not cls.attends and (mode != 'global' or normaliser != 'softmax' or coverage):
    raise ValueError(f"score {score!r} computes no attention, so it takes attention mode "
                     f"'global', normaliser 'softmax' and no coverage; got mode {mode!r}, "
                     f'normaliser {normaliser!r}, coverage {coverage}')
  if mode_cls.windowed and not cls.content_based:
    raise ValueError(f'attention mode {mode!r} restricts the scores to a window around p_t, '
                     f'which is meaningless for score {score!r} (it scores positions, not '
                     f"content); use mode 'global' or 'hard' with it, or a content score")
  if coverage and not cls.supports_coverage:
    valid = sorted(n for n, c in scores_lib.SCORES.items() if c.supports_coverage)
    raise ValueError(f'coverage adds a term inside the additive score; score {score!r} has '
                     f'none. Scores with coverage: {", ".join(valid)}')


class Attention(nnx.Module):
  """Attention with any score, normaliser and mode (see the module docstring)."""

  def __init__(self, score: str, *, query_dim: int, key_dim: int, attn_dim: int,
               max_src_len: int, mode: str = 'global', normaliser: str = 'softmax',
               window: int = 5, coverage: bool = False, temperature: float = 1.0,
               gate: bool = False, dtype: Any = jnp.float32, rngs: nnx.Rngs):
    check_combination(score, mode, normaliser, coverage)
    self.score = scores_lib.make_score(score, query_dim=query_dim, key_dim=key_dim,
                                       attn_dim=attn_dim, max_src_len=max_src_len,
                                       dtype=dtype, rngs=rngs)
    self.mode = MODES[mode](query_dim=query_dim, window=window, temperature=temperature,
                            dtype=dtype, rngs=rngs)
    self.normalise = NORMALISERS[normaliser]
    self.coverage = coverage
    if coverage:
      self.score.enable_coverage(attn_dim, rngs=rngs)
    # Xu et al. 2015 §4.2.1: c_t <- beta_t c_t, beta_t = sigmoid(w · q_t + b), a scalar per
    # step that lets the decoder weigh the image (context) against its language model
    self.gate = layers.Linear(query_dim, 1, dtype=dtype, param_dtype=jnp.float32,
                           rngs=rngs) if gate and self.score.attends else None

  @property
  def deferrable(self) -> bool:
    """Whether the decoder loop may defer the memory's gradient: a score that attends and
    a soft mode (c_t = Σ_s a_{t,s} h̄_s, linear in the keys)."""
    return self.score.attends and type(self.mode).read is Mode.read

  def memory(self, keys: jax.Array, mask: jax.Array, summary: jax.Array) -> Memory:
    """keys [B, S, K], mask [B, S], summary [B, K] -> Memory (source side, once)."""
    pre = self.score.precompute(keys) if self.score.attends else None
    return Memory(keys=keys, mask=mask, pre=pre, summary=summary)

  def read(self, query: jax.Array, mem: Memory, *, pos: jax.Array | None = None,
           cov: jax.Array | None = None, key: jax.Array | None = None,
           tap: Tap | None = None) -> Read:
    """query [B, T, Q] (or [B*G, 1, Q]: see `_grouped_read`); pos [T] int32 target step
    indices (default 0..T-1); cov [B, T, S] coverage (only with coverage); key: sampling
    key of the hard modes (None = argmax);
    tap: added to the scores (bilinear scores, which then return φ(q)) and the context."""
    if query.shape[0] != mem.keys.shape[0]:
      return self._grouped_read(query, mem, pos=pos, cov=cov, key=key, tap=tap)
    b, t, _ = query.shape
    s = mem.keys.shape[1]
    zero = jnp.zeros((b, t), jnp.float32)
    if not self.score.attends:
      context = jnp.broadcast_to(mem.summary[:, None, :], (b, t, mem.summary.shape[-1]))
      return Read(context, jnp.zeros((b, t, s), jnp.float32), zero, zero, zero)
    q_map = None
    if self.coverage:
      e = self.score(query, mem.pre, cov=cov)                               # [B, T, S]
    elif tap is not None and tap.scores is not None:
      q_map = self.score.query_map(query)                                   # [B, T, D]
      e = scores_lib.match(q_map, mem.pre) + tap.scores
    else:
      e = self.score(query, mem.pre)                                        # [B, T, S]
    pos = jnp.arange(t, dtype=jnp.int32) if pos is None else pos
    allowed, factor = self.mode.restrict(query, mem, pos)
    mask = mem.mask[:, None, :] if allowed is None else mem.mask[:, None, :] & allowed
    weights = self.normalise(e, mask)                                       # [B, T, S]
    if factor is not None:
      weights = weights * factor
    context, logp, entropy = self.mode.read(weights, mem.keys, key)
    if tap is not None:   # before the gate: the tap's gradient is the ungated context's
      context = context + tap.context
    if self.gate is not None:
      context = context * jax.nn.sigmoid(self.gate(query)).astype(context.dtype)   # [B, T, 1]
    cov_loss = jnp.sum(jnp.minimum(weights, cov), -1) if self.coverage else zero
    return Read(context, weights, logp, entropy, cov_loss, q_map)

  def _grouped_read(self, query, mem, *, pos, cov, key, tap) -> Read:
    """Beam search: query [B*G, 1, Q] against a memory of batch B, the G hypotheses of a
    sentence in adjacent rows -> Read [B*G, 1, ...], read as G queries [B, G, Q] of each
    sentence, so that the memory is not copied G times (nor read G times per step)."""
    n, t, q = query.shape
    b = mem.keys.shape[0]
    if t != 1 or n % b or tap is not None:
      raise ValueError(f'query batch {n} must equal the memory batch {b}, or (beam search, '
                       f'one step) be a multiple of it; got query [{n}, {t}, {q}]')
    g = n // b
    pos = jnp.zeros((1,), jnp.int32) if pos is None else pos
    r = self.read(query.reshape(b, g, q), mem, pos=jnp.broadcast_to(pos, (g,)),
                  cov=None if cov is None else cov.reshape(b, g, -1), key=key)
    return jax.tree.map(lambda x: x.reshape((n, 1) + x.shape[2:]), r)

  def __call__(self, query: jax.Array, mem: Memory, **kw) -> tuple[jax.Array, jax.Array]:
    """query [B, T, Q] -> (context [B, T, K], weights [B, T, S] float32)."""
    r = self.read(query, mem, **kw)
    return r.context, r.weights
