"""Greedy decoding, jit-compiled with fixed shapes (`jax.lax.while_loop`), returning the
attention weights of every output step (for heatmaps and alignment accuracy). Beam search
is in beam.py; with beam size 1 it gives exactly these outputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from attention_jax.symbols import BOS, EOS, PAD


def max_output_len(src_len: int, factor: float) -> int:
  """The output length limit of a source of `src_len` tokens (EOS included): the shape
  of a batch padded to src_len, and, per sentence, its own limit (output_limits)."""
  return int(factor * src_len) + 10


def output_limits(mask: jax.Array, factor: float, max_len: int) -> jax.Array:
  """mask [B, S] (model.source_mask: a source's real positions) -> [B] int32: each sentence's
  own output limit, max_output_len of its length (at most max_len), so that an output never
  depends on the batch it is in."""
  n = jnp.sum(mask, axis=1).astype(jnp.float32)
  return jnp.minimum(jnp.floor(factor * n).astype(jnp.int32) + 10, max_len)


def emittable(logp: jax.Array) -> jax.Array:
  """log-probabilities [N, V] with PAD and BOS set to -inf: no decoder outputs them. (A model
  gives them some probability, e.g. the floor of label smoothing, where they tie with every
  other unlikely symbol; an output with PAD inside loses a symbol when detokenised.) The
  other entries are unchanged, so a hypothesis scores its log P under the model."""
  return logp.at[:, PAD].set(-jnp.inf).at[:, BOS].set(-jnp.inf)


def greedy(model, src: jax.Array, max_len: int, limit: jax.Array | None = None):
  """src [B, ...] -> (tokens [B, L] int32 (EOS then PAD after the end), weights [B, L, S]):
  the most probable emittable symbol at each step, L = max_len; S = the memory's length
  (model.source_mask: the source's tokens, or an image's grid cells).

  limit [B] int32 (<= max_len; default max_len): sentence b stops after limit[b] symbols
  without EOS. Stops early when every sentence has ended; shapes never depend on that.
  """
  mask = model.source_mask(src)               # [B, S]
  b, s = mask.shape
  carry, mem = model.start(src, max_len)
  tokens = jnp.full((b, max_len), PAD, jnp.int32)
  weights = jnp.zeros((b, max_len, s), jnp.float32)
  done = ~jnp.any(mask, axis=1)               # filler rows produce nothing
  limit = jnp.full((b,), max_len, jnp.int32) if limit is None else limit

  def cond(loop):
    t, _, _, _, _, done = loop
    return (t < max_len) & ~jnp.all(done)

  def body(loop):
    t, carry, y_prev, tokens, weights, done = loop
    carry, logp, w = model.step(carry, y_prev, mem)
    y = jnp.argmax(emittable(logp), axis=-1).astype(jnp.int32)
    y = jnp.where(done, PAD, y)
    tokens = tokens.at[:, t].set(y)
    weights = weights.at[:, t].set(jnp.where(done[:, None], 0.0, w))
    return t + 1, carry, y, tokens, weights, done | (y == EOS) | (t + 1 >= limit)

  y0 = jnp.full((b,), BOS, jnp.int32)
  _, _, _, tokens, weights, _ = jax.lax.while_loop(
      cond, body, (jnp.int32(0), carry, y0, tokens, weights, done))
  return tokens, weights
