"""A pytest plugin that adds a score at test time, the way a researcher adds one: one class
and one registry line (plus the NumPy reference the tests ask of every score).

  PYTHONPATH=tests pytest -p throwaway_score tests/test_scores.py -k negdot

tests/test_registries.py runs the registry-parametrized tests with it, to show that they pick
a new score up with no list edited.
"""

import jax.numpy as jnp
import numpy as np

import helpers
from attention_jax.models import scores


@scores.register('negdot')
class NegDot(scores.Score):
  """e = −qᵀ h̄: a throwaway score (it attends to the least similar position)."""

  def __init__(self, *, query_dim, key_dim, attn_dim, max_src_len, dtype, rngs):
    del query_dim, key_dim, attn_dim, max_src_len, dtype, rngs

  def __call__(self, query, pre):
    return -jnp.einsum('btd,bsd->bts', query, pre)


helpers.EXTRA_NUMPY_REFERENCES['negdot'] = lambda q, k, m: -np.einsum('btd,bsd->bts', q, k)
