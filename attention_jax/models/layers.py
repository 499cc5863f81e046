"""Small layers shared by the encoder, the decoders and self-attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout; identity when key is None (evaluation) or rate == 0."""
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)
