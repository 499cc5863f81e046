"""Attention modes (local_m, local_p, hard, hard_st), the sparsemax normaliser, coverage and
encoder self-attention, against NumPy references and as invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_jax.models.attention import MODES, Attention, masked_sparsemax
from attention_jax.models.model import ModelConfig, Seq2Seq
from attention_jax.models.self_attention import SelfAttentionLayer
from attention_jax.training import objective

B, T, Q, K, A = 3, 4, 6, 6, 4
LENGTHS = np.array([7, 3, 0])          # the last row is all padding (a batch filler)
MODE_NAMES = sorted(MODES)


def sparsemax_ref(z):
  """Martins & Astudillo 2016, Algorithm 1."""
  zs = np.sort(z)[::-1]
  k = np.arange(1, len(z) + 1)
  cum = np.cumsum(zs)
  kz = k[1 + k * zs > cum].max()
  tau = (cum[kz - 1] - 1) / kz
  return np.maximum(z - tau, 0)


def setup(mode, s=8, seed=0, score='dot', **kw):
  attn = Attention(score, query_dim=Q, key_dim=K, attn_dim=A, max_src_len=16, mode=mode,
                   window=2, rngs=nnx.Rngs(seed), **kw)
  rq, rk = jax.random.split(jax.random.key(seed))
  q = jax.random.normal(rq, (B, T, Q))
  mask = jnp.arange(s)[None, :] < LENGTHS[:, None]
  keys = jax.random.normal(rk, (B, s, K)) * mask[:, :, None]
  return attn, q, keys, mask


def read(attn, q, keys, mask, **kw):
  return attn.read(q, attn.memory(keys, mask, jnp.zeros((B, K))), **kw)


# ---- sparsemax ------------------------------------------------------------------------------
@pytest.mark.parametrize('z, expected', [
    ([1.0, 1.0], [0.5, 0.5]),                  # a tie shares the mass
    ([2.0, 2.0, 0.0], [0.5, 0.5, 0.0]),        # tie at the top, the rest exactly 0
    ([3.0, 1.0, 0.5], [1.0, 0.0, 0.0]),        # a clear winner takes all
    ([0.5, 0.3, 0.1], [0.5 + 0.1 / 3, 0.3 + 0.1 / 3, 0.1 + 0.1 / 3]),  # τ = -1/30
])
def test_sparsemax_known_vectors(z, expected):
  z = np.asarray(z, np.float32)
  got = np.asarray(masked_sparsemax(jnp.asarray(z), jnp.ones(len(z), bool)))
  np.testing.assert_allclose(got, expected, atol=1e-6)
  np.testing.assert_allclose(got, sparsemax_ref(z), atol=1e-6)
  np.testing.assert_allclose(got.sum(), 1.0, rtol=1e-6)


def test_sparsemax_matches_reference_with_masks_and_has_exact_zeros():
  rng = np.random.default_rng(0)
  z = rng.normal(size=(50, 9)).astype(np.float32) * 2
  lengths = rng.integers(0, 10, 50)
  mask = np.arange(9)[None] < lengths[:, None]
  got = np.asarray(masked_sparsemax(jnp.asarray(z), jnp.asarray(mask)))
  for i in range(50):
    if lengths[i] == 0:
      assert (got[i] == 0).all()
      continue
    np.testing.assert_allclose(got[i, :lengths[i]], sparsemax_ref(z[i, :lengths[i]]), atol=1e-5)
    assert (got[i, lengths[i]:] == 0).all()
  assert (got == 0).sum() > mask.size - mask.sum()          # zeros inside the support too
  g = jax.grad(lambda z: jnp.sum(masked_sparsemax(z, jnp.asarray(mask)) ** 2))(jnp.asarray(z))
  assert np.isfinite(np.asarray(g)).all()


# ---- local windows ----------------------------------------------------------------------------
def softmax_ref(e):
  e = e - e.max()
  p = np.exp(e)
  return p / p.sum()


def test_local_m_window_against_numpy():
  attn, q, keys, mask = setup('local_m')
  r = read(attn, q, keys, mask)
  w, qn, kn = np.asarray(r.weights), np.asarray(q), np.asarray(keys)
  for b in range(2):
    n = LENGTHS[b]
    for t in range(T):
      p = min(t, n - 1)                                      # p_t = t, clipped to the sentence
      win = [s for s in range(n) if abs(s - p) <= 2]
      ref = np.zeros(8)
      ref[win] = softmax_ref(kn[b, win] @ qn[b, t])
      np.testing.assert_allclose(w[b, t], ref, atol=1e-6)
      np.testing.assert_allclose(np.asarray(r.context[b, t]), ref @ kn[b], atol=1e-5)
  assert (w[2] == 0).all()


def test_local_p_window_and_gaussian_against_numpy():
  attn, q, keys, mask = setup('local_p')
  r = read(attn, q, keys, mask)
  w_p = np.asarray(attn.mode.w_p.kernel[...])
  v_p = np.asarray(attn.mode.v_p.kernel[...])
  w, qn, kn = np.asarray(r.weights), np.asarray(q), np.asarray(keys)
  sigma = 2 / 2
  for b in range(2):
    n = LENGTHS[b]
    for t in range(T):
      p = n / (1 + np.exp(-(np.tanh(qn[b, t] @ w_p) @ v_p)[0]))   # S · sigmoid(v_pᵀ tanh(W_p q))
      win = [s for s in range(n) if abs(s - p) <= 2]
      ref = np.zeros(8)
      if win:
        ref[win] = softmax_ref(kn[b, win] @ qn[b, t])
        ref[win] *= np.exp(-(np.array(win) - p) ** 2 / (2 * sigma ** 2))
      np.testing.assert_allclose(w[b, t], ref, atol=1e-5)
      assert (w[b, t, [s for s in range(8) if s not in win]] == 0).all()
  assert (w.sum(-1) <= 1 + 1e-6).all()
  # the Gaussian carries a gradient to the position predictor
  g = nnx.grad(lambda attn: jnp.sum(read(attn, q, keys, mask).context ** 2))(attn)
  assert np.abs(np.asarray(g.mode.v_p.kernel[...])).sum() > 0


def test_windowed_modes_reject_the_location_score():
  for mode in ('local_m', 'local_p'):
    with pytest.raises(ValueError, match="mode 'local_.' restricts.*'location'"):
      setup(mode, score='location')


def test_bad_combinations_name_the_valid_choices():
  with pytest.raises(ValueError, match='unknown attention mode .soft.*global, hard, hard_st'):
    setup('soft')
  with pytest.raises(ValueError, match="unknown normaliser 'entmax'.*softmax, sparsemax"):
    setup('global', normaliser='entmax')
  with pytest.raises(ValueError, match="score 'none' computes no attention"):
    setup('hard', score='none')
  with pytest.raises(ValueError, match="Scores with coverage: additive, normed_additive"):
    setup('global', score='dot', coverage=True)
  with pytest.raises(ValueError, match='model.window must be a positive integer, got 0'):
    ModelConfig(src_vocab=5, tgt_vocab=5, window=0)
  with pytest.raises(ValueError, match='positive divisor of the annotation size 128, got 3'):
    ModelConfig(src_vocab=5, tgt_vocab=5, self_attention_layers=1, self_attention_heads=3)


# ---- invariants for every mode ----------------------------------------------------------------
@pytest.mark.parametrize('normaliser', ['softmax', 'sparsemax'])
@pytest.mark.parametrize('mode', MODE_NAMES)
def test_masks_padding_invariance_and_jit(mode, normaliser):
  attn, q, keys, mask = setup(mode, normaliser=normaliser)
  r = read(attn, q, keys, mask)
  w = np.asarray(r.weights)
  assert (w[0, :, LENGTHS[0]:] == 0).all() and (w[1, :, LENGTHS[1]:] == 0).all()
  assert (w[2] == 0).all() and (np.asarray(r.context[2]) == 0).all()
  if mode != 'local_p':
    np.testing.assert_allclose(w[:2].sum(-1), 1.0, rtol=1e-5)
  # more padding changes nothing (hard modes at evaluation: no key)
  wide = jnp.pad(keys, ((0, 0), (0, 4), (0, 0))), jnp.pad(mask, ((0, 0), (0, 4)))
  r2 = read(attn, q, *wide)
  np.testing.assert_allclose(np.asarray(r2.weights[:, :, :8]), w, atol=1e-6)
  assert (np.asarray(r2.weights[:, :, 8:]) == 0).all()
  np.testing.assert_allclose(np.asarray(r2.context), np.asarray(r.context), atol=1e-5)
  # jit equals no-jit, also when sampling
  key = jax.random.key(3)
  eager = read(attn, q, keys, mask, key=key)
  jitted = nnx.jit(lambda attn, q, keys, mask, key: read(attn, q, keys, mask, key=key))(
      attn, q, keys, mask, key)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_hard_reads_the_argmax_at_evaluation_and_samples_in_training():
  attn, q, keys, mask = setup('hard')
  r = read(attn, q, keys, mask)
  best = np.argmax(np.asarray(r.weights), -1)
  np.testing.assert_array_equal(np.asarray(r.context[:2]),
                                np.take_along_axis(np.asarray(keys), best[..., None], 1)[:2])
  # sample frequencies follow the weights
  n = 4000
  reads = jax.vmap(lambda k: read(attn, q, keys, mask, key=k).context)(
      jax.random.split(jax.random.key(0), n))                               # [n, B, T, K]
  kn = np.asarray(keys[0])
  picked = np.argmin(((np.asarray(reads[:, 0, 0])[:, None] - kn[None]) ** 2).sum(-1), 1)
  freq = np.bincount(picked, minlength=8) / n
  np.testing.assert_allclose(freq, np.asarray(r.weights[0, 0]), atol=0.03)


def test_reinforce_gradient_is_unbiased():
  """E_s[f(h̄_s)] with s ~ a(q) has the exact gradient Σ_s ∇a_s(q) f(h̄_s); the mean of the
  score-function estimates over many samples must match it within Monte-Carlo error."""
  attn, q, keys, mask = setup('hard', seed=1)
  q, keys, mask = q[:1, :1] * 0.5, keys[:1], mask[:1]
  f_w = jax.random.normal(jax.random.key(9), (K,))
  f = lambda c: jnp.sin(c @ f_w) * 3.0                                      # any reward
  mem = attn.memory(keys, mask, jnp.zeros((1, K)))

  def exact(q):
    w = attn.read(q, mem).weights[0, 0]
    return jnp.sum(w * f(keys[0]))

  def estimate(q, key):
    r = attn.read(q, mem, key=key)
    reward = f(r.context[0, 0])
    return objective.reinforce_surrogate(r.logp[0, 0], reward, 0.7)        # any fixed baseline

  g_exact = np.asarray(jax.grad(exact)(q)).ravel()
  n = 20000
  g = np.asarray(jax.vmap(jax.grad(estimate), (None, 0))(
      q, jax.random.split(jax.random.key(0), n))).reshape(n, -1)
  mean, err = g.mean(0), g.std(0) / np.sqrt(n)
  assert np.abs(g_exact).max() > 0.05                                       # not trivial
  assert (np.abs(mean - g_exact) < 4 * err + 1e-4).all(), (mean, g_exact, err)


def test_hard_st_forward_is_one_hot_and_backward_is_soft():
  attn, q, keys, mask = setup('hard_st')
  r = read(attn, q, keys, mask, key=jax.random.key(1))
  kn = np.asarray(keys)
  dist = ((np.asarray(r.context[:2])[:, :, None] - kn[:2, None]) ** 2).sum(-1)  # [2, T, S]
  assert (dist.min(-1) < 1e-8).all()                   # each context is one annotation
  # backward: the gradient of any loss of the context with respect to the weights a_t is the
  # gradient through the relaxation c~_t = softmax((log a_t + g) / tau) . h, with the same
  # Gumbel noise g, evaluated at the sampled (hard) context
  mode, tau, key = attn.mode, attn.mode.temperature, jax.random.key(1)
  rw, rc = jax.random.split(jax.random.key(2))
  logits = jax.random.normal(rw, (B, T, keys.shape[1])) + jnp.where(mask[:, None], 0., -jnp.inf)
  weights = jnp.nan_to_num(jax.nn.softmax(logits, axis=-1))  # [B, T, S]; padding, empty row: 0
  cot = jax.random.normal(rc, (B, T, K))                                    # d loss / d c_t
  ctx_hard, vjp_hard = jax.vjp(lambda w: mode.read(w, keys, key)[0], weights)

  def relaxed(w):            # NumPy-style reference: the soft sample itself, no straight-through
    real = w > 0
    logw = jnp.where(real, jnp.log(jnp.where(real, w, 1.0)), -1e9)
    y = jax.nn.softmax((logw + jax.random.gumbel(key, logw.shape)) / tau, axis=-1) * real
    return jnp.einsum('bts,bsk->btk', y, keys)

  _, vjp_soft = jax.vjp(relaxed, weights)
  g_hard, g_soft = vjp_hard(cot)[0], vjp_soft(cot)[0]
  assert np.abs(np.asarray(g_soft[:2])).max() > 1e-3                        # not trivial
  np.testing.assert_allclose(np.asarray(g_hard[:2]), np.asarray(g_soft[:2]), rtol=1e-4,
                             atol=1e-6)
  # and the forward is not the relaxation: the context is one annotation, the soft one is not
  assert not np.allclose(np.asarray(ctx_hard[:2]), np.asarray(relaxed(weights)[:2]), atol=1e-3)


# ---- coverage ---------------------------------------------------------------------------------
@pytest.mark.parametrize('decoder', ['bahdanau', 'luong'])
def test_coverage_accumulates_and_enters_the_additive_score(decoder):
  cfg = ModelConfig(src_vocab=11, tgt_vocab=9, emb_dim=8, enc_hidden=4, dec_hidden=8,
                    attn_dim=5, decoder=decoder, coverage=True, input_feeding=False)
  model = Seq2Seq(cfg, rngs=nnx.Rngs(0))
  src = jnp.array([[4, 5, 6, 7, 2], [7, 8, 2, 0, 0]])
  tgt = jnp.array([[1, 4, 5, 6, 3], [1, 7, 8, 0, 0]])
  _, r = model.forward(src, tgt)
  w = np.asarray(r.weights)
  cov = np.concatenate([np.zeros_like(w[:, :1]), np.cumsum(w, 1)[:, :-1]], 1)  # Σ_{t'<t} a
  np.testing.assert_allclose(np.asarray(r.coverage_loss), np.minimum(w, cov).sum(-1), atol=1e-6)
  # the score's coverage term: additive with cov equals the NumPy formula
  score = model.decoder.attention.score
  rq, rk, rc = jax.random.split(jax.random.key(2), 3)
  qq, kk = jax.random.normal(rq, (2, 3, 8)), jax.random.normal(rk, (2, 5, 8))
  cc = jax.random.uniform(rc, (2, 3, 5))
  got = np.asarray(score(qq, score.precompute(kk), cov=cc))
  wq, wk = np.asarray(score.w_q.kernel[...]), np.asarray(score.w_k.kernel[...])
  bk, v, wc = np.asarray(score.w_k.bias[...]), np.asarray(score.v[...]), np.asarray(score.w_c[...])
  ref = np.tanh((np.asarray(qq) @ wq)[:, :, None] + (np.asarray(kk) @ wk + bk)[:, None]
                + np.asarray(cc)[..., None] * wc) @ v
  np.testing.assert_allclose(got, ref, atol=1e-5)


# ---- self-attention ------------------------------------------------------------------------------
def test_self_attention_against_numpy_and_padding():
  layer = SelfAttentionLayer(8, heads=2, score='scaled_dot', attn_dim=4, max_src_len=16,
                             dropout=0.0, dtype=jnp.float32, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 5, 8))
  mask = jnp.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
  x = x * mask[:, :, None]
  y, w = layer(x, mask)
  xn, m = np.asarray(x), np.asarray(mask)
  wqkv = np.concatenate([np.asarray(layer.attn.q.kernel[...]),
                         np.asarray(layer.attn.kv.kernel[...])], 1)   # [q | k_1 v_1 k_2 v_2]
  wo = np.asarray(layer.attn.out.kernel[...])
  scale, bias = np.asarray(layer.norm.scale[...]), np.asarray(layer.norm.bias[...])
  for b in range(2):
    n = m[b].sum()
    proj = xn[b, :n] @ wqkv
    q, kv = proj[:, :8].reshape(n, 2, 4), proj[:, 8:].reshape(n, 2, 2, 4)  # [n, k|v, H, d]
    heads = []
    for h in range(2):
      e = q[:, h] @ kv[:, 0, h].T / 2.0                       # scaled dot, d = 4
      a = np.exp(e - e.max(1, keepdims=True))
      a /= a.sum(1, keepdims=True)
      heads.append(a @ kv[:, 1, h])
    z = xn[b, :n] + np.concatenate(heads, 1) @ wo
    z = (z - z.mean(1, keepdims=True)) / np.sqrt(z.var(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(y[b, :n]), z * scale + bias, atol=1e-4)
    assert (np.asarray(y[b, n:]) == 0).all() and (np.asarray(w[b, :, :, n:]) == 0).all()


@pytest.mark.parametrize('score', ['scaled_dot', 'additive'])
def test_model_with_self_attention_is_padding_invariant(score):
  cfg = ModelConfig(src_vocab=11, tgt_vocab=9, emb_dim=8, enc_hidden=4, dec_hidden=8,
                    attn_dim=5, self_attention_layers=2, self_attention_heads=2,
                    self_attention_score=score)
  model = Seq2Seq(cfg, rngs=nnx.Rngs(0))
  src = jnp.array([[4, 5, 6, 2]])
  tgt = jnp.array([[1, 4, 5]])
  call = nnx.jit(lambda m, s, t: m(s, t))   # (eagerly, each operation compiles alone)
  a, wa = call(model, src, tgt)
  b, wb = call(model, jnp.pad(src, ((0, 0), (0, 3))), tgt)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  np.testing.assert_allclose(np.asarray(wb[..., :4]), np.asarray(wa), atol=1e-6)


# ---- training -----------------------------------------------------------------------------------
@pytest.mark.parametrize('mode, extra', [
    ('local_m', {}), ('local_p', {}), ('hard', {}), ('hard_st', {}),
    ('global', {'normaliser': 'sparsemax'}), ('global', {'coverage': True}),
    ('global', {'self_attention_layers': 1})])
def test_each_mode_learns_to_copy(mode, extra):
  """A few steps of Adam on a tiny copy task lower the loss clearly, for every mode."""
  import optax
  from attention_jax.training import train
  mcfg = ModelConfig(src_vocab=12, tgt_vocab=12, emb_dim=16, enc_hidden=16, dec_hidden=32,
                     attn_dim=16, attention_mode=mode, window=2, **extra)
  tx = optax.adam(1e-2)
  graphdef, state = train.init_state(mcfg, tx, 0)
  obj = objective.Objective(coverage_weight=1.0 if extra.get('coverage') else 0.0,
                            entropy_weight=0.01)
  step = jax.jit(lambda s, b: train.train_step(graphdef, tx, obj, 0, s, b))
  rng = np.random.default_rng(0)
  src = rng.integers(3, 12, (16, 6)).astype(np.int32)
  batch = {'src': np.concatenate([src, np.full((16, 1), 2, np.int32)], 1),
           'tgt_in': np.concatenate([np.ones((16, 1), np.int32), src], 1),
           'tgt_out': np.concatenate([src, np.full((16, 1), 2, np.int32)], 1),
           'weight': np.ones(16, np.float32), 'index': np.arange(16)}
  losses = []
  for _ in range(60):
    state, m = step(state, batch)
    assert bool(m['finite'])
    losses.append(float(m['train_loss_sum'] / m['tokens']))
  assert losses[-1] < 0.5 * losses[0], losses[::10]
  if mode == 'hard':
    assert float(state['baseline']) < 0                     # tracks the mean log-likelihood
