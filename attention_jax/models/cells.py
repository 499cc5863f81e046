"""Recurrent cells (GRU, LSTM) split for speed: the input projection x W_x is applied to a
whole sequence at once, outside the time loop; only h W_h runs per step.

  xp = cell.project(x)            # [..., G]   outside the loop (G = 3H for GRU, 4H for LSTM)
  carry, h = cell.step(carry, xp_t)  # per step: cell.update(extras, carry, xp_t, h W_h)

`run` (a whole sequence) has its own backward pass, as cuDNN's RNNs do: the reverse-time
loop computes only what is sequential (the carry's cotangent and the gates' cotangent
d(h W_h) of each step); the weight gradient dW_h = Σ_t h_{t-1}ᵀ d(h_{t-1} W_h) is one large
matmul after the loop, instead of a small matmul accumulated at every step (about twice as
fast on a CPU: docs/performance.md, "What was tried").
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import layers

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
    self.w_x = layers.Linear(in_dim, g, use_bias=True, dtype=dtype, param_dtype=jnp.float32,
                          rngs=rngs)
    self.w_h = layers.Linear(hidden, g, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                          kernel_init=nnx.initializers.orthogonal(), rngs=rngs)

  def project(self, x: jax.Array) -> jax.Array:
    """x [..., in_dim] -> xp [..., G], the input part of every gate. One 2-D matmul: its
    weight gradient then contracts a single axis, which XLA's CPU backend does faster than
    contracting batch and time separately (docs/performance.md, "What was tried")."""
    return self.w_x(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1)

  def zero_carry(self, batch: int) -> Any:
    raise NotImplementedError

  def carry_from_h(self, h: jax.Array) -> Any:
    """A carry whose output state is h [B, H] (memory cells, if any, zero)."""
    raise NotImplementedError

  @staticmethod
  def output(carry) -> jax.Array:
    """The hidden state h [B, H] of a carry."""
    raise NotImplementedError

  def extras(self) -> dict[str, jax.Array]:
    """The parameters `update` uses besides W_h (W_x is applied by `project`)."""
    return {}

  @staticmethod
  def update(extras: dict[str, jax.Array], carry, xp: jax.Array, hp: jax.Array):
    """The elementwise part of a step: carry, xp [B, G], hp = h W_h [B, G] -> (carry, h)."""
    raise NotImplementedError

  def step(self, carry, xp: jax.Array):
    """carry, xp [B, G] -> (carry, h [B, H])."""
    return self.update(self.extras(), carry, xp, self.w_h(self.output(carry)))


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

  def extras(self):
    return {'b_hn': self.b_hn[...]}

  @staticmethod
  def update(extras, carry, xp, hp):
    h = carry
    xr, xz, xn = jnp.split(xp, 3, axis=-1)
    hr, hz, hn = jnp.split(hp, 3, axis=-1)
    r = jax.nn.sigmoid(xr + hr)
    z = jax.nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * (hn + extras['b_hn'].astype(hn.dtype)[None]))
    h = ((1.0 - z) * n + z * h).astype(h.dtype)
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

  @staticmethod
  def update(extras, carry, xp, hp):
    del extras
    c, h = carry
    i, f, g, o = jnp.split(xp + hp, 4, axis=-1)
    c = (jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)).astype(h.dtype)
    h = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(h.dtype)
    return (c, h), h


def run(cell: Cell, xp: jax.Array, mask: jax.Array, carry=None, reverse: bool = False):
  """Runs `cell` over time with `jax.lax.scan`.

  xp [B, T, G] projected inputs, mask [B, T] bool (True on real tokens; real tokens first).
  The carry is frozen on padded steps, so the final carry is the state after each
  sentence's last real token. With reverse=True each sentence is read backwards within its
  own length (padding stays at the end), so padding never reaches a real position.
  Returns (outputs [B, T, H], zero on padding; final carry).
  """
  if carry is None:
    carry = cell.zero_carry(xp.shape[0])
  # reverse: scanning from t = T-1 down to 0 meets each sentence's padding first, where the
  # carry stays frozen at its initial value, then its tokens last to first: every sentence is
  # read backwards within its own length, with no gather (nor, backwards, a scatter).
  out, carry = _scan(type(cell).update, type(cell).output, cell.dtype, reverse,
                     cell.w_h.kernel[...], cell.extras(), carry, jnp.swapaxes(xp, 0, 1),
                     jnp.swapaxes(mask, 0, 1))
  return jnp.swapaxes(out, 0, 1), carry                          # [B, T, H]


def _masked(update, extras, carry, xp_t, hp_t, m_t):
  """One step of `run`: the carry is frozen and the output zero where m_t [B] is False."""
  new, h = update(extras, carry, xp_t, hp_t)
  new = jax.tree.map(lambda n, o: jnp.where(m_t[:, None], n, o), new, carry)
  return new, jnp.where(m_t[:, None], h, jnp.zeros_like(h))


def _matmul(h, kernel, dtype):
  """h W_h as layers.Linear(dtype=dtype) computes it."""
  return jnp.dot(h.astype(dtype), kernel.astype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _scan(update, output, dtype, reverse, kernel, extras, carry, xp, mask):
  """xp [T, B, G], mask [T, B] -> (outputs [T, B, H], final carry)."""
  def body(carry, inp):
    xp_t, m_t = inp
    return _masked(update, extras, carry, xp_t, _matmul(output(carry), kernel, dtype), m_t)

  carry, out = jax.lax.scan(body, carry, (xp, mask), reverse=reverse)
  return out, carry


def _scan_fwd(update, output, dtype, reverse, kernel, extras, carry, xp, mask):
  def body(carry, inp):
    xp_t, m_t = inp
    hp_t = _matmul(output(carry), kernel, dtype)
    new, h = _masked(update, extras, carry, xp_t, hp_t, m_t)
    return new, (h, carry, hp_t)

  final, (out, prev, hp) = jax.lax.scan(body, carry, (xp, mask), reverse=reverse)
  return (out, final), (kernel, extras, prev, hp, xp, mask)


def _scan_bwd(update, output, dtype, reverse, res, cotangents):
  kernel, extras, prev, hp, xp, mask = res
  d_out, d_final = cotangents

  def body(acc, inp):
    d_carry, d_extras = acc
    carry_t, xp_t, hp_t, m_t, d_out_t = inp       # carry_t: the carry before step t
    _, vjp = jax.vjp(lambda e, c, x, p: _masked(update, e, c, x, p, m_t),
                     extras, carry_t, xp_t, hp_t)
    d_e, d_c, d_x, d_hp = vjp((d_carry, d_out_t))
    d_h = _matmul(d_hp, kernel.T, dtype)            # hp_t = output(carry_t) W_h
    _, output_vjp = jax.vjp(output, carry_t)
    d_c = jax.tree.map(jnp.add, d_c, output_vjp(d_h.astype(output(carry_t).dtype))[0])
    return (d_c, jax.tree.map(jnp.add, d_extras, d_e)), (d_x, d_hp)

  zeros = jax.tree.map(jnp.zeros_like, extras)
  (d_carry, d_extras), (d_xp, d_hp) = jax.lax.scan(
      body, (d_final, zeros), (prev, xp, hp, mask, d_out), reverse=not reverse)
  h_prev = jax.vmap(output)(prev)                                # [T, B, H]
  d_kernel = jnp.einsum('tbh,tbg->hg', h_prev.astype(dtype), d_hp.astype(dtype),
                        preferred_element_type=jnp.float32).astype(kernel.dtype)
  return d_kernel, d_extras, d_carry, d_xp, None


_scan.defvjp(_scan_fwd, _scan_bwd)
