"""cells.run has its own backward pass (weight gradient after the loop) and reads reversed
sentences by scanning backwards: both must equal plain autodiff through a plain scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_jax.models import cells

B, T, I, H = 5, 7, 6, 8
LENGTHS = np.array([7, 3, 1, 0, 5])     # full, padded, one token, empty (filler), padded


def reference_run(cell, xp, mask, carry=None, reverse=False):
  """The plain definition: reverse each sentence within its length by a gather, scan
  cell.step with the carry frozen on padding, autodiff through all of it."""
  b, t, _ = xp.shape
  if reverse:
    lengths = jnp.sum(mask, axis=1)
    pos = jnp.arange(t)[None, :]
    idx = jnp.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)
    xp = jnp.take_along_axis(xp, idx[:, :, None], axis=1)
  carry = cell.zero_carry(b) if carry is None else carry

  def body(carry, inp):
    xp_t, m_t = inp
    new, h = cell.step(carry, xp_t)
    new = jax.tree.map(lambda n, o: jnp.where(m_t[:, None], n, o), new, carry)
    return new, jnp.where(m_t[:, None], h, 0.0)

  carry, out = jax.lax.scan(body, carry, (jnp.swapaxes(xp, 0, 1), jnp.swapaxes(mask, 0, 1)))
  out = jnp.swapaxes(out, 0, 1)
  if reverse:
    out = jnp.take_along_axis(out, idx[:, :, None], axis=1)
  return out, carry


@pytest.mark.parametrize('name', sorted(cells.CELLS))
@pytest.mark.parametrize('reverse', [False, True])
@pytest.mark.parametrize('with_carry', [False, True])
def test_run_and_its_gradient_equal_plain_autodiff(name, reverse, with_carry):
  cell = cells.CELLS[name](I, H, dtype=jnp.float32, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(cell)
  params = jax.tree.map(   # random everywhere: no all-zero biases
      lambda p: jax.random.normal(jax.random.key(p.size), p.shape) * 0.5, params)
  x = jax.random.normal(jax.random.key(1), (B, T, I))
  h0 = jax.random.normal(jax.random.key(2), (B, H))
  mask = jnp.arange(T)[None, :] < jnp.asarray(LENGTHS)[:, None]
  w = jax.random.normal(jax.random.key(3), (B, T, H))

  def loss(run_fn, params, x, h0):
    cell = nnx.merge(graphdef, params)
    carry = cell.carry_from_h(h0) if with_carry else None
    out, final = run_fn(cell, cell.project(x), mask, carry=carry, reverse=reverse)
    return jnp.sum(out * w) + jnp.sum(jnp.sin(cell.output(final)))

  got = jax.jit(jax.value_and_grad(lambda *a: loss(cells.run, *a), argnums=(0, 1, 2)))(
      params, x, h0)
  want = jax.jit(jax.value_and_grad(lambda *a: loss(reference_run, *a), argnums=(0, 1, 2)))(
      params, x, h0)
  for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-5)
