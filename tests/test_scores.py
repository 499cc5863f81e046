"""Every registered score against a NumPy reference computed by hand from its parameters.

A new score registered in attention_jax.models.scores is picked up here automatically; it then
needs a reference in NUMPY_REFERENCES (the test says so if it is missing).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import helpers
from attention_jax.models import scores as scores_lib
from attention_jax.models.attention import Attention

B, T, S, Q, K, A, S_MAX = 2, 3, 5, 6, 6, 4, 7


def _softplus(x):
  return np.log1p(np.exp(x))


def _unit(x):
  return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-12)


def _p(score, *path):
  obj = score
  for name in path:
    obj = getattr(obj, name)
  return np.asarray(obj[...], np.float64)


# score(q [B,T,Q], k [B,S,K], module) -> e [B,T,S], written from the formulas in
# papers cited in attention_jax/models/scores.py, reading the module's parameters.
NUMPY_REFERENCES = {
    'dot': lambda q, k, m: np.einsum('btd,bsd->bts', q, k),
    'scaled_dot': lambda q, k, m: np.einsum('btd,bsd->bts', q, k) / np.sqrt(k.shape[-1]),
    'general': lambda q, k, m: np.einsum('btq,bsq->bts', q, k @ _p(m, 'w_a', 'kernel')),
    'scaled_general': lambda q, k, m: _p(m, 'g') * np.einsum(
        'btq,bsq->bts', q, k @ _p(m, 'w_a', 'kernel')),
    'additive': lambda q, k, m: np.tanh(
        (q @ _p(m, 'w_q', 'kernel'))[:, :, None] + (k @ _p(m, 'w_k', 'kernel') + _p(
            m, 'w_k', 'bias'))[:, None]) @ _p(m, 'v'),
    'normed_additive': lambda q, k, m: np.tanh(
        (q @ _p(m, 'w_q', 'kernel'))[:, :, None] + (k @ _p(m, 'w_k', 'kernel') + _p(
            m, 'w_k', 'bias'))[:, None]) @ (_p(m, 'g') * _p(m, 'v') / np.linalg.norm(_p(m, 'v'))),
    'location': lambda q, k, m: (q @ _p(m, 'w_a', 'kernel') + _p(m, 'w_a', 'bias'))[
        ..., :k.shape[1]],
    'cosine': lambda q, k, m: _softplus(_p(m, 'beta_raw')) * np.einsum(
        'btk,bsk->bts', _unit(q @ _p(m, 'w_k', 'kernel')), _unit(k)),
    **helpers.EXTRA_NUMPY_REFERENCES,   # scores registered at test time
}

ATTENDING = sorted(n for n, cls in scores_lib.SCORES.items() if cls.attends)


def randomise(module, seed):
  """Replaces every parameter by random numbers (so g != 1, b != 0, ... are exercised)."""
  state = nnx.state(module, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  new = [0.5 * jax.random.normal(k, l.shape, l.dtype) for k, l in zip(keys, leaves)]
  nnx.update(module, jax.tree.unflatten(treedef, new))


def make(name, seed=0):
  score = scores_lib.make_score(name, query_dim=Q, key_dim=K, attn_dim=A, max_src_len=S_MAX,
                                rngs=nnx.Rngs(seed))
  randomise(score, seed + 1)
  return score


def inputs(seed=0):
  rq, rk = jax.random.split(jax.random.key(seed))
  return jax.random.normal(rq, (B, T, Q)), jax.random.normal(rk, (B, S, K))


def test_registry_has_the_nine_classic_scores():
  """The nine of the literature are there; a score registered later joins them (its tests
  come from the registry: no list here to edit)."""
  assert {'dot', 'scaled_dot', 'general', 'scaled_general', 'additive', 'normed_additive',
          'location', 'cosine', 'none'} <= set(scores_lib.SCORES)


@pytest.mark.parametrize('name', ATTENDING)
def test_score_matches_numpy_reference(name):
  assert name in NUMPY_REFERENCES, (
      f'score {name!r} is registered but has no NumPy reference: add one to '
      f'NUMPY_REFERENCES in {__file__}')
  score = make(name)
  q, k = inputs()
  got = np.asarray(score(q, score.precompute(k)))
  want = NUMPY_REFERENCES[name](np.asarray(q, np.float64), np.asarray(k, np.float64), score)
  assert got.shape == (B, T, S)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name', ATTENDING)
def test_score_jit_equals_no_jit(name):
  score = make(name)
  q, k = inputs(1)
  eager = score(q, score.precompute(k))
  jitted = nnx.jit(lambda m, q, k: m(q, m.precompute(k)))(score, q, k)
  np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('t', [1, 5, scores_lib.GROUP_MAX + 1])
def test_match_equals_numpy_for_every_layout(t):
  """match reads a few queries per sentence (beam groups) through transposed keys, one or
  many through the keys as they are: the same numbers, values and gradients."""
  rq, rk = jax.random.split(jax.random.key(3))
  q, keys = jax.random.normal(rq, (B, t, K)), jax.random.normal(rk, (B, S, K))
  e = np.einsum('btd,bsd->bts', np.asarray(q), np.asarray(keys))
  np.testing.assert_allclose(scores_lib.match(q, keys), e, rtol=1e-5, atol=1e-5)
  d_keys = jax.grad(lambda k: jnp.sum(jnp.sin(scores_lib.match(q, k))))(keys)
  np.testing.assert_allclose(d_keys, np.einsum('bts,btd->bsd', np.cos(e), np.asarray(q)),
                             rtol=1e-4, atol=1e-5)


def test_none_gives_the_summary_and_zero_weights():
  attn = Attention('none', query_dim=Q, key_dim=K, attn_dim=A, max_src_len=S_MAX,
                   rngs=nnx.Rngs(0))
  q, k = inputs()
  summary = jnp.arange(B * K, dtype=jnp.float32).reshape(B, K)
  ctx, w = attn(q, attn.memory(k, jnp.ones((B, S), bool), summary))
  np.testing.assert_array_equal(np.asarray(ctx), np.broadcast_to(summary[:, None], (B, T, K)))
  np.testing.assert_array_equal(np.asarray(w), 0.0)


def test_unknown_score_lists_the_valid_names():
  with pytest.raises(ValueError) as err:
    scores_lib.make_score('bilinear', query_dim=Q, key_dim=K, attn_dim=A, max_src_len=S_MAX,
                          rngs=nnx.Rngs(0))
  msg = str(err.value)
  assert "'bilinear'" in msg
  for name in scores_lib.SCORES:
    assert name in msg


@pytest.mark.parametrize('name', ['dot', 'scaled_dot'])
def test_dot_with_unequal_sizes_names_both(name):
  with pytest.raises(ValueError) as err:
    scores_lib.make_score(name, query_dim=7, key_dim=12, attn_dim=A, max_src_len=S_MAX,
                          rngs=nnx.Rngs(0))
  assert '7' in str(err.value) and '12' in str(err.value)


def test_location_refuses_sources_longer_than_its_layer():
  """One check, asked by the score at trace time and by Translator before any decoding."""
  score = make('location')
  with pytest.raises(ValueError, match=f'max_src_len={S_MAX} source positions .*got {S_MAX + 1}'):
    score.precompute(jnp.zeros((1, S_MAX + 1, K)))
  score.precompute(jnp.zeros((1, S_MAX, K)))
  for name, cls in scores_lib.SCORES.items():     # content scores take any length
    if name != 'location':
      cls.check_source_length(10 ** 6, S_MAX)


def test_register_a_new_score_in_ten_lines():
  """The extension point: a subclass + one decorator makes a score usable by name."""

  @scores_lib.register('test_negdot')
  class NegDot(scores_lib.Score):
    def __init__(self, **kw):
      del kw

    def __call__(self, query, pre):
      return -jnp.einsum('btd,bsd->bts', query, pre)

  try:
    q, k = inputs()
    score = scores_lib.make_score('test_negdot', query_dim=Q, key_dim=K, attn_dim=A,
                                  max_src_len=S_MAX, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(np.asarray(score(q, score.precompute(k))),
                               -np.einsum('btd,bsd->bts', q, k), rtol=1e-5, atol=1e-5)
  finally:
    del scores_lib.SCORES['test_negdot']


@pytest.mark.parametrize('coverage', [False, True])
def test_additive_scores_in_chunks_of_t_equal_the_whole(coverage):
  """Batched over many t, additive bounds its [B, T, S, A] intermediate by chunking t."""
  score = scores_lib.make_score('additive', query_dim=8, key_dim=6, attn_dim=5, max_src_len=9,
                                rngs=nnx.Rngs(0))
  if coverage:
    score.enable_coverage(5, rngs=nnx.Rngs(1))
  q = jax.random.normal(jax.random.key(1), (3, 11, 8))
  k = jax.random.normal(jax.random.key(2), (3, 7, 6))
  cov = jax.random.uniform(jax.random.key(3), (3, 11, 7)) if coverage else None
  whole = score(q, score.precompute(k), cov=cov)
  score.chunk_elements = 3 * 7 * 5 * 4          # chunks of 4 steps: 11 = 4 + 4 + 3
  chunked = score(q, score.precompute(k), cov=cov)
  np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), atol=1e-6)
