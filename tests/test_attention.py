"""Invariants of masked global attention, for every score in the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_jax.models import scores as scores_lib
from attention_jax.models.attention import Attention, masked_softmax

B, T, Q, K, A = 3, 2, 6, 6, 4
ATTENDING = sorted(n for n, cls in scores_lib.SCORES.items() if cls.attends)
LENGTHS = np.array([5, 2, 0])  # the last row is all padding (a batch filler)


def setup(name, s=5, seed=0):
  attn = Attention(name, query_dim=Q, key_dim=K, attn_dim=A, max_src_len=16,
                   rngs=nnx.Rngs(seed))
  rq, rk = jax.random.split(jax.random.key(seed))
  q = jax.random.normal(rq, (B, T, Q))
  mask = jnp.arange(s)[None, :] < LENGTHS[:, None]                      # [B, S]
  keys = jax.random.normal(rk, (B, s, K)) * mask[:, :, None]
  return attn, q, keys, mask


def run(attn, q, keys, mask):
  return attn(q, attn.memory(keys, mask, jnp.zeros((B, K))))


@pytest.mark.parametrize('name', ATTENDING)
def test_weights_sum_to_one_and_padding_gets_exactly_zero(name):
  attn, q, keys, mask = setup(name)
  _, w = run(attn, q, keys, mask)
  w = np.asarray(w)
  np.testing.assert_allclose(w[:2].sum(-1), 1.0, rtol=1e-6)
  assert (w[0] > 0).all()
  assert (w[1, :, 2:] == 0.0).all()          # padding: exactly zero
  assert (w[2] == 0.0).all()                 # all-padding row: all zero


@pytest.mark.parametrize('name', ATTENDING)
def test_all_padding_row_gives_zero_context_and_finite_gradients(name):
  attn, q, keys, mask = setup(name)
  ctx, _ = run(attn, q, keys, mask)
  assert np.isfinite(np.asarray(ctx)).all()
  np.testing.assert_array_equal(np.asarray(ctx[2]), 0.0)

  def loss(attn, q):
    return jnp.sum(run(attn, q, keys, mask)[0] ** 2)

  g_attn, g_q = nnx.grad(loss, argnums=(0, 1))(attn, q)
  for leaf in jax.tree.leaves((g_attn, g_q)):
    assert np.isfinite(np.asarray(leaf)).all()


@pytest.mark.parametrize('name', ATTENDING)
def test_more_padding_does_not_change_the_result(name):
  attn, q, keys, mask = setup(name, s=5)
  ctx, w = run(attn, q, keys, mask)
  pad = 4
  keys2 = jnp.concatenate([keys, jnp.zeros((B, pad, K))], axis=1)
  mask2 = jnp.concatenate([mask, jnp.zeros((B, pad), bool)], axis=1)
  ctx2, w2 = run(attn, q, keys2, mask2)
  np.testing.assert_allclose(np.asarray(ctx2), np.asarray(ctx), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(w2[:, :, :5]), np.asarray(w), rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(np.asarray(w2[:, :, 5:]), 0.0)


@pytest.mark.parametrize('name', ATTENDING)
def test_jit_equals_no_jit(name):
  attn, q, keys, mask = setup(name, seed=3)
  eager = run(attn, q, keys, mask)
  jitted = nnx.jit(run)(attn, q, keys, mask)
  for a, b in zip(eager, jitted):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_masked_softmax_matches_numpy():
  e = np.array([[1.0, 2.0, 3.0, 50.0], [-1.0, 0.5, 7.0, 7.0]], np.float32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
  want = np.exp(e - e.max(-1, keepdims=True)) * mask
  want[0] = np.exp(e[0] - 3.0) * mask[0]
  want /= want.sum(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(masked_softmax(e, mask)), want, rtol=1e-6)


@pytest.mark.parametrize('name,mode,coverage', [(n, 'global', False) for n in ATTENDING]
                         + [('general', 'local_p', False), ('dot', 'local_m', False),
                            ('additive', 'global', True), ('general', 'hard', False)])
def test_grouped_read_equals_reading_a_copied_memory(name, mode, coverage):
  """Beam search reads a sentence's G hypotheses (query rows [B*G, 1, Q]) against the
  memory [B, ...] once: the same as every row reading its own copy of the memory."""
  g = 3
  attn = Attention(name, query_dim=Q, key_dim=K, attn_dim=A, max_src_len=16, mode=mode,
                   coverage=coverage, rngs=nnx.Rngs(0))
  _, _, keys, mask = setup(name)
  q = jax.random.normal(jax.random.key(1), (B * g, 1, Q))
  cov = jax.random.uniform(jax.random.key(2), (B * g, 1, 5)) if coverage else None
  mem = attn.memory(keys, mask, jnp.ones((B, K)))
  copied = jax.tree.map(lambda x: jnp.repeat(x, g, axis=0), mem)
  pos = jnp.array([2], jnp.int32)
  grouped = attn.read(q, mem, pos=pos, cov=cov)
  per_row = attn.read(q, copied, pos=pos, cov=cov)
  for a, b in zip(jax.tree.leaves(grouped), jax.tree.leaves(per_row)):
    assert a.shape == b.shape
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_grouped_read_refuses_sizes_that_do_not_group():
  attn, _, keys, mask = setup('general')
  mem = attn.memory(keys, mask, jnp.zeros((B, K)))
  with pytest.raises(ValueError, match=r'query batch 4 must equal the memory batch 3'):
    attn.read(jnp.ones((4, 1, Q)), mem)
  with pytest.raises(ValueError, match=r'query \[6, 2, 6\]'):
    attn.read(jnp.ones((6, 2, Q)), mem)
