"""Recurrent cells (GRU, LSTM) split for speed: the input projection x W_x is applied to a
whole sequence at once, outside the time loop; only h W_h runs per step.

  xp = cell.project(x)            # [..., G]   outside the loop (G = 3H for GRU, 4H for LSTM)
  carry, h = cell.step(carry, xp_t)  # per step
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry

CELLS: dict[str, type['Cell']] = {}


register = registry.registrar(CELLS, 'cell')


def make_cell(name: str, in_dim: int, hidden: int, *, dtype: Any, rngs: nnx.Rngs) -> 'Cell':
  return registry.lookup(CELLS, 'cell', name)(in_dim, hidden, dtype=dtype, rngs=rngs)


class Cell(nnx.Module):
  gates = 1

  def __init__(self, in_dim: int, hidden: int, *, dtype: Any, rngs: nnx.Rngs):
    self.hidden = hidden
    self.dtype = dtype
    g = self.gates * hidden
    self.w_x = nnx.Linear(in_dim, g, use_bias=True, dtype=dtype, param_dtype=jnp.float32,
                          rngs=rngs)
    self.w_h = nnx.Linear(hidden, g, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                          kernel_init=nnx.initializers.orthogonal(), rngs=rngs)

  def project(self, x: jax.Array) -> jax.Array:
    """x [..., in_dim] -> xp [..., G], the input part of every gate."""
    return self.w_x(x)

  def zero_carry(self, batch: int) -> Any:
    raise NotImplementedError

  def carry_from_h(self, h: jax.Array) -> Any:
    """A carry whose output state is h [B, H] (memory cells, if any, zero)."""
    raise NotImplementedError

  @staticmethod
  def output(carry) -> jax.Array:
    """The hidden state h [B, H] of a carry."""
    raise NotImplementedError

  def step(self, carry, xp: jax.Array):
    """carry, xp [B, G] -> (carry, h [B, H])."""
    raise NotImplementedError


@register('gru')
class GRU(Cell):
  """Gated recurrent unit (Cho et al. 2014), carry = h [B, H]."""

  gates = 3

  def __init__(self, in_dim, hidden, *, dtype, rngs):
    super().__init__(in_dim, hidden, dtype=dtype, rngs=rngs)
    # the reset gate multiplies (W_hn h + b_hn), as in cuDNN / PyTorch / Flax
    self.b_hn = nnx.Param(jnp.zeros((hidden,), jnp.float32))

  def zero_carry(self, batch):
    return jnp.zeros((batch, self.hidden), self.dtype)

  def carry_from_h(self, h):
    return h.astype(self.dtype)

  @staticmethod
  def output(carry):
    return carry

  def step(self, carry, xp):
    h = carry
    hp = self.w_h(h)
    xr, xz, xn = jnp.split(xp, 3, axis=-1)
    hr, hz, hn = jnp.split(hp, 3, axis=-1)
    r = jax.nn.sigmoid(xr + hr)
    z = jax.nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * (hn + self.b_hn[...].astype(hn.dtype)))
    h = ((1.0 - z) * n + z * h).astype(self.dtype)
    return h, h


@register('lstm')
class LSTM(Cell):
  """Long short-term memory (Hochreiter & Schmidhuber 1997), carry = (c, h)."""

  gates = 4

  def zero_carry(self, batch):
    z = jnp.zeros((batch, self.hidden), self.dtype)
    return (z, z)

  def carry_from_h(self, h):
    return (jnp.zeros_like(h, self.dtype), h.astype(self.dtype))

  @staticmethod
  def output(carry):
    return carry[1]

  def step(self, carry, xp):
    c, h = carry
    gates = xp + self.w_h(h)
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = (jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)).astype(self.dtype)
    h = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(self.dtype)
    return (c, h), h


def run(cell: Cell, xp: jax.Array, mask: jax.Array, carry=None, reverse: bool = False):
  """Runs `cell` over time with `jax.lax.scan`.

  xp [B, T, G] projected inputs, mask [B, T] bool (True on real tokens; real tokens first).
  The carry is frozen on padded steps, so the final carry is the state after each
  sentence's last real token. With reverse=True each sentence is read backwards within its
  own length (padding stays at the end), so padding never reaches a real position.
  Returns (outputs [B, T, H], zero on padding; final carry).
  """
  b, t, _ = xp.shape
  if reverse:
    lengths = jnp.sum(mask, axis=1).astype(jnp.int32)            # [B]
    pos = jnp.arange(t)[None, :]
    idx = jnp.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)  # [B, T]
    xp = jnp.take_along_axis(xp, idx[:, :, None], axis=1)
  if carry is None:
    carry = cell.zero_carry(b)

  def body(carry, inp):
    xp_t, m_t = inp                                              # [B, G], [B]
    new, h = cell.step(carry, xp_t)
    new = jax.tree.map(lambda n, o: jnp.where(m_t[:, None], n, o), new, carry)
    return new, jnp.where(m_t[:, None], h, jnp.zeros_like(h))

  carry, out = jax.lax.scan(body, carry, (jnp.swapaxes(xp, 0, 1), jnp.swapaxes(mask, 0, 1)))
  out = jnp.swapaxes(out, 0, 1)                                  # [B, T, H]
  if reverse:
    out = jnp.take_along_axis(out, idx[:, :, None], axis=1)
  return out, carry
