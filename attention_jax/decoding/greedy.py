"""Greedy decoding, jit-compiled with fixed shapes (`jax.lax.while_loop`), returning the
attention weights of every output step (for heatmaps and alignment accuracy). Beam search
is in beam.py; with beam size 1 it gives exactly these outputs."""

from __future__ import annotations

from typing import Any, NamedTuple

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


def length_penalty(length, alpha: float):
  """lp = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016); `length` counts the EOS token."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def emittable(logp: jax.Array) -> jax.Array:
  """log-probabilities [N, V] with PAD and BOS set to -inf: no decoder outputs them. (A model
  gives them some probability, e.g. the floor of label smoothing, where they tie with every
  other unlikely symbol; an output with PAD inside loses a symbol when detokenised.) The
  other entries are unchanged, so a hypothesis scores its log P under the model."""
  return logp.at[:, PAD].set(-jnp.inf).at[:, BOS].set(-jnp.inf)


def segments(model, max_len: int, kv_segments: tuple[int, int] | None = None
             ) -> tuple[int, ...]:
  """The output positions at which decoding's loop restarts with a longer carry
  (contract.EncoderDecoder.cache_lengths): a model whose carry grows with the output (the
  Transformer's KV cache) gives increasing lengths, the last max_len, and `resize`s its carry
  to each; each segment is a loop of its own over a cache as long as its end, since every
  step reads (and beam search reorders) the whole cache. Other models: one loop to max_len.
  kv_segments (shortest, most): the schedule's bounds (shapes.kv_segments); None: the
  model's defaults."""
  return tuple(model.cache_lengths(max_len, *(kv_segments or ())))


def run_segments(model, max_len: int, cond, body, loop,
                 kv_segments: tuple[int, int] | None = None):
  """jax.lax.while_loop(cond, body, loop) run in `segments`: before each segment's loop
  (it ends at loop.t = the segment's end), the model's carry, loop.carry, is resized to that
  end. `loop`: a NamedTuple with fields t and carry."""
  ends = segments(model, max_len, kv_segments)
  for end in ends:
    if len(ends) > 1:
      loop = loop._replace(carry=model.resize(loop.carry, end))
    loop = jax.lax.while_loop(lambda st, end=end: cond(st) & (st.t < end), body, loop)
  return loop


class _Loop(NamedTuple):
  t: jax.Array        # [] int32, the output position being decoded
  carry: Any          # the model's
  y_prev: jax.Array   # [B] int32
  tokens: jax.Array   # [B, L] int32
  weights: jax.Array  # [B, L, S] float32
  done: jax.Array     # [B] bool
  logp: jax.Array     # [B] float32, log P of the output so far
  score: jax.Array    # [B] float32, logp / lp(|Y|) once the row is done (0 before, filler)


def greedy(model, src: jax.Array, max_len: int, limit: jax.Array | None = None,
           with_weights: bool = True):
  """src [B, ...] -> (tokens [B, L] int32 (EOS then PAD after the end), weights [B, L, S]):
  the most probable emittable symbol at each step, L = max_len; S = the memory's length
  (model.source_mask: the source's tokens, or an image's grid cells).

  limit [B] int32 (<= max_len; default max_len): sentence b stops after limit[b] symbols
  without EOS. Stops early when every sentence has ended; shapes never depend on that.
  with_weights False: weights [B, L, 0], nothing kept (a translation that does not show its
  attention decodes faster: docs/performance.md); same tokens.
  """
  st = _greedy(model, src, max_len, limit, 0.0, None, with_weights)
  return st.tokens, st.weights


def greedy_scored(model, src: jax.Array, max_len: int, limit: jax.Array | None = None,
                  alpha: float = 0.6, with_weights: bool = True):
  """greedy's output with its score, as beam search of one beam gives them (beam.py:
  log P / lp(|Y|), Wu et al. 2016's length penalty with `alpha`; 0 for filler rows):
  (tokens [B, 1, L], scores [B, 1], weights [B, 1, L, S]), the n-best layout. The same
  tokens, weights and scores as beam_search(beam_size=1, nbest=1) (tests/test_beam.py) in a
  smaller loop: nothing ranked, merged or back-tracked. with_weights False: weights
  [B, 1, L, 0] (greedy's)."""
  st = _greedy(model, src, max_len, limit, alpha, length_penalty, with_weights)
  return st.tokens[:, None], st.score[:, None], st.weights[:, None]


def _greedy(model, src, max_len, limit, alpha, penalty=length_penalty,
            with_weights: bool = True) -> _Loop:
  """greedy's loop -> its final state (with a penalty: each row's score when done)."""
  mask = model.source_mask(src)               # [B, S]
  b, s = mask.shape
  width = s if with_weights else 0            # the weights kept per step: all, or none
  carry, mem = model.start(src, max_len)
  tokens = jnp.full((b, max_len), PAD, jnp.int32)
  weights = jnp.zeros((b, max_len, width), jnp.float32)
  done = ~jnp.any(mask, axis=1)               # filler rows produce nothing
  limit = jnp.full((b,), max_len, jnp.int32) if limit is None else limit

  def cond(st: _Loop):
    return ~jnp.all(st.done)

  def body(st: _Loop) -> _Loop:
    t, done = st.t, st.done
    carry, logp, w = model.step(st.carry, st.y_prev, mem)
    logp = emittable(logp)
    y = jnp.argmax(logp, axis=-1).astype(jnp.int32)
    now_done = done | (y == EOS) | (t + 1 >= limit)
    total, score = st.logp, st.score
    if penalty is not None:   # the sum beam search keeps, in its order of additions
      total = jnp.where(done, total, total + jnp.take_along_axis(logp, y[:, None], 1)[:, 0])
      score = jnp.where(now_done & ~done, total / penalty(t + 1, alpha), score)
    y = jnp.where(done, PAD, y)
    return _Loop(t + 1, carry, y, st.tokens.at[:, t].set(y),
                 st.weights.at[:, t].set(jnp.where(done[:, None], 0.0, w[:, :width])),
                 now_done, total, score)

  y0 = jnp.full((b,), BOS, jnp.int32)
  zero = jnp.zeros((b,), jnp.float32)
  return run_segments(model, max_len, cond, body,
                      _Loop(jnp.int32(0), carry, y0, tokens, weights, done, zero, zero))
