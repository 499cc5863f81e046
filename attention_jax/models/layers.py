"""Small layers shared by the encoder, the decoders and self-attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class Linear(nnx.Linear):
  """nnx.Linear, computed as one 2-D matrix product: x [..., in] -> [N, in] @ [in, out] ->
  [..., out]. The same parameters and outputs; what changes is the weight gradient. From a
  [B, T, in] input JAX's transpose rule contracts two axes, which XLA's CPU backend lowers
  to A^T B^T (the output gradient laid out transposed), a layout its matmul runs at a
  quarter of the row-major X^T dY's speed on an AVX2 CPU (docs/performance.md, "Per CPU
  kind"); from [N, in] the weight gradient is X^T dY."""

  def __call__(self, inputs: jax.Array, out_sharding=None) -> jax.Array:
    if out_sharding is not None or inputs.ndim == 2:
      return super().__call__(inputs, out_sharding=out_sharding)
    y = super().__call__(inputs.reshape(-1, inputs.shape[-1]))    # [N, out]
    return y.reshape(*inputs.shape[:-1], y.shape[-1])


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout; identity when key is None (evaluation) or rate == 0."""
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)
