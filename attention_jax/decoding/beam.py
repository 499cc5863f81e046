"""Beam search, jit-compiled with fixed shapes (`jax.lax.while_loop` over time, every
sentence's K beams in one batch), returning the attention weights of the best hypothesis.

Hypotheses are ranked by the length-normalised score of Wu et al. 2016 (GNMT, "Google's
Neural Machine Translation System: Bridging the Gap between Human and Machine Translation",
eq. 14):

  score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha,

with |Y| counting the EOS token (alpha = 0: plain log-probability).

Finished hypotheses (fairseq's SequenceGenerator ranks candidates this way; it makes K = 1
exactly greedy):
  - each step ranks the K * V extensions of the K alive hypotheses by log P and keeps the top
    2K; an extension ending in EOS finishes only if it ranks in the top K (scored with its
    length); the K best that do not end in EOS stay alive. PAD and BOS are never extensions
    (greedy.emittable).
  - a sentence stops once no alive hypothesis can beat its answer (the best finished one;
    n-best: the K-th), since log P only falls: an alive one scores at most
    log P / lp(max_len); or once it has K finished hypotheses of which the worst scores at
    least what the best alive one would if it ended now, log P / lp(t + 1) (Hugging Face's
    `early_stopping=False`; a heuristic: with alpha > 0 a longer output is divided by a
    larger lp). Stopping at the first K finished, as fairseq does, fails a confident model:
    under label smoothing every unlikely symbol has the same floor probability, EOS ranks
    in the top K at every step, and K truncated outputs finished before the likely one
    could (a Transformer's beam 5 fell to 67% exact match where greedy had 99%);
  - a sentence at its output limit (max_len, or its own `limit`) ends there: its alive
    hypotheses join the finished ones, scored with |Y| = the limit (fairseq and OpenNMT-py
    end them so; it makes a larger beam never score below beam 1 when beam 1 runs to the
    limit);
  - the answer is the best-scoring finished hypothesis.
Filler rows (all-PAD source) return all PAD tokens, zero weights and score 0.

  tokens, scores, weights = beam_search(model, src, beam_size=4, max_len=20)
  # [B, L] int32 (EOS then PAD), [B] float32, [B, L, S] float32
  tokens, scores, weights = beam_search(model, src, beam_size=4, max_len=20, nbest=3)
  # [B, 3, L], [B, 3], [B, 3, L, S]: the 3 best, best first
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from attention_jax.decoding.greedy import emittable, length_penalty, run_segments
from attention_jax.symbols import BOS, EOS, PAD

NEG_INF = float('-inf')


def _tile(tree, k: int):
  """Every array leaf [B, ...] -> [B*K, ...]; the K copies of a sentence are adjacent."""
  return jax.tree.map(lambda x: jnp.repeat(x, k, axis=0) if jnp.ndim(x) else x, tree)


def _rows(tree, idx: jax.Array):
  """Every array leaf [N, ...] -> x[idx] [len(idx), ...]."""
  return jax.tree.map(lambda x: x[idx] if jnp.ndim(x) else x, tree)


def _pick(x: jax.Array, idx: jax.Array) -> jax.Array:
  """x [B, N, ...], idx [B, M] -> x[b, idx[b, m]] [B, M, ...]."""
  return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


class _State(NamedTuple):
  t: jax.Array           # [] int32, the output position being decoded
  carry: Any             # model carry, leaves [B*K, ...]
  alive_tok: jax.Array   # [B, K, L] int32
  alive_logp: jax.Array  # [B, K] float32, sorted descending; -inf for an empty beam
  fin_tok: jax.Array     # [B, K, L] int32
  fin_score: jax.Array   # [B, K] float32 (length-normalised), sorted descending; -inf empty
  fin_at: jax.Array      # [B, K] int32, the step of a finished hypothesis's EOS ...
  fin_cand: jax.Array    # [B, K] int32, ... and its index among that step's 2K candidates
  done: jax.Array        # [B] bool, the sentence's answer can no longer change
  # attention weights by back-pointers: each step writes [B, K, S] rows and [B, *] indices
  # instead of reordering every hypothesis's [L, S] history (which cost most of the time)
  w_hist: jax.Array      # [L, B, K, S] float32, step t's weights of alive beam k (of t-1)
                         # (S = 0 without weights)
  parent: jax.Array      # [L, B, 2K] int32, the alive beam each of step t's candidates extends
  alive_from: jax.Array  # [L, B, K] int32, the candidate that became alive beam k at step t


def _backtrack(st: _State, t_end: jax.Array, cand: jax.Array) -> jax.Array:
  """The attention weights [B, L, S] of the hypothesis that is candidate `cand` [B] of step
  `t_end` [B] (zero after t_end), following the back-pointers from t_end down to 0."""
  from_prev = jnp.concatenate([jnp.zeros_like(st.alive_from[:1]), st.alive_from[:-1]])
  take = lambda x, i: _pick(x, i[:, None])[:, 0]                      # x[b, i[b]]

  def body(c, x):
    t, w_t, parent_t, from_t = x             # [], [B, K, S], [B, 2K], [B, K] (step t - 1)
    active = t <= t_end                                                # [B]
    p = take(parent_t, c)                                              # [B] alive beam
    return (jnp.where(active, take(from_t, p), c),
            jnp.where(active[:, None], take(w_t, p), 0.0))             # [B, S]

  steps = jnp.arange(st.w_hist.shape[0])
  _, w = jax.lax.scan(body, cand, (steps, st.w_hist, st.parent, from_prev), reverse=True)
  return jnp.swapaxes(w, 0, 1)


def beam_search(model, src: jax.Array, *, beam_size: int, max_len: int, alpha: float = 0.6,
                nbest: int = 0, limit: jax.Array | None = None, with_weights: bool = True,
                kv_segments: tuple[int, int] | None = None):
  """src [B, ...] -> (tokens [B, L] int32, scores [B] float32, weights [B, L, S] float32).

  `model` has `source_mask(src) -> [B, S] bool` (the memory's real positions),
  `start(src, max_len) -> (carry, mem)` and `step(carry, y_prev [N], mem) -> (carry,
  log-probabilities [N, V], weights [N, S])` (`Seq2Seq`). Beam search calls step with
  N = B*K hypothesis rows (a sentence's K rows adjacent) and the memory of the B sentences
  as `start` returned it, not copied K times (`Attention.read` groups the rows); a model whose
  carry grows with the output also has `cache_lengths` and `resize` (greedy.segments). The best
  hypothesis per sentence (EOS then PAD), its length-normalised score, and its attention
  weights per output step.

  limit [B] int32 (<= max_len; default max_len): sentence b's hypotheses end after limit[b]
  symbols without EOS (greedy.output_limits).

  nbest = N (1 <= N <= beam_size): the N best hypotheses, (tokens [B, N, L], scores [B, N],
  weights [B, N, L, S]), best first (score -inf: fewer than N; unfinished ones, without
  EOS, are scored with |Y| = the limit). The first is the answer without nbest. With N > 1
  a sentence stops only once K hypotheses have finished (the early stop that keeps the best
  answer can drop the runners-up).
  with_weights False: weights [B, L, 0] ([B, N, L, 0]): no history kept; the same tokens and
  scores.
  kv_segments (shortest, most): bounds of a growing carry's segments (greedy.segments; None:
  the model's defaults); the same outputs, another speed (shapes.kv_segments).
  Call it inside `jax.jit` with beam_size, max_len, alpha, nbest and kv_segments static.
  """
  if not isinstance(beam_size, int) or beam_size < 1:
    raise ValueError(f'beam_size must be a positive integer, got {beam_size!r}')
  if not isinstance(max_len, int) or max_len < 1:
    raise ValueError(f'max_len must be a positive integer, got {max_len!r}')
  if not alpha >= 0:  # the early stop bound assumes lp grows with |Y|
    raise ValueError(f'alpha must be >= 0, got {alpha!r}')
  if not isinstance(nbest, int) or not 0 <= nbest <= beam_size:
    raise ValueError(f'nbest must be an integer in [1, beam_size={beam_size}] (or 0), '
                     f'got {nbest!r}')
  mask = model.source_mask(src)                                        # [B, S]
  b, s = mask.shape
  width = s if with_weights else 0                                     # weights kept a step
  k, n = beam_size, max_len
  carry, mem = model.start(src, max_len)
  # the carry per hypothesis (leaves [B*K, ...]); the memory stays [B, ...]: the attention
  # reads a sentence's K hypotheses as K queries of it (Attention._grouped_read)
  carry = _tile(carry, k)
  filler = ~jnp.any(mask, axis=1)                                      # [B]
  row0 = (jnp.arange(b) * k)[:, None]                                  # [B, 1]
  limit = jnp.full((b,), n, jnp.int32) if limit is None else jnp.minimum(limit, n)   # [B]
  lp_limit = length_penalty(limit, alpha)          # an unfinished hypothesis's, at its limit

  def cond(st: _State):
    return ~jnp.all(st.done)

  def body(st: _State) -> _State:
    t = st.t
    y_prev = jnp.where(t == 0, BOS, st.alive_tok[:, :, jnp.maximum(t - 1, 0)])    # [B, K]
    carry, logp, w = model.step(st.carry, y_prev.reshape(b * k), mem)  # [B*K,V], [B*K,S]
    v = logp.shape[-1]
    cand = st.alive_logp[:, :, None] + emittable(logp).reshape(b, k, v)  # [B, K, V]
    top_logp, top = jax.lax.top_k(cand.reshape(b, k * v), 2 * k)      # [B, 2K]
    parent, tok = top // v, (top % v).astype(jnp.int32)                # [B, 2K]
    seq = _pick(st.alive_tok, parent).at[:, :, t].set(tok)            # [B, 2K, L]
    is_eos = tok == EOS
    real = top_logp > NEG_INF                                          # from a real beam

    # alive: the K best extensions not ending in EOS (top_logp is sorted, so is this)
    alive_logp, i = jax.lax.top_k(jnp.where(is_eos, NEG_INF, top_logp), k)        # [B, K]
    alive_tok = _pick(seq, i)                                          # [B, K, L]
    if k > 1:   # with one beam every parent is beam 0: the carry stays where it is
      carry = _rows(carry, (row0 + _pick(parent, i)).reshape(b * k))  # leaves [B*K, ...]

    # finished, merged with the earlier ones: EOS extensions in the step's top K; and where
    # a sentence reaches its limit, its alive hypotheses (no EOS, |Y| = limit), as fairseq
    # and OpenNMT-py end them at max_len
    new_fin = is_eos & real & (jnp.arange(2 * k) < k)[None] & ~st.done[:, None]   # [B, 2K]
    new_score = jnp.where(new_fin, top_logp / length_penalty(t + 1, alpha), NEG_INF)
    capped = (t + 1 >= limit) & ~st.done                               # [B]
    cap_score = jnp.where(capped[:, None], alive_logp / lp_limit[:, None], NEG_INF)  # [B, K]
    fin_score, j = jax.lax.top_k(jnp.concatenate([st.fin_score, new_score, cap_score], 1), k)
    fin_tok = _pick(jnp.concatenate([st.fin_tok, seq, alive_tok], 1), j)          # [B, K, L]
    fin_at = _pick(jnp.concatenate([st.fin_at, jnp.full((b, 3 * k), t)], 1), j)
    fin_cand = _pick(jnp.concatenate([st.fin_cand, jnp.broadcast_to(
        jnp.arange(2 * k, dtype=jnp.int32), (b, 2 * k)), i.astype(jnp.int32)], 1), j)  # [B, K]

    # K finished, the worst of them at least the best alive one ended now; or no alive one
    # can beat the answer (the best finished; n-best: the K-th) even at the limit
    worst, answer = fin_score[:, k - 1], fin_score[:, 0 if nbest <= 1 else k - 1]   # [B]
    settled = (worst > NEG_INF) & (worst >= alive_logp[:, 0] / length_penalty(t + 1, alpha))
    beaten = answer > alive_logp[:, 0] / lp_limit
    return _State(t + 1, carry, alive_tok, alive_logp, fin_tok, fin_score, fin_at,
                  fin_cand, st.done | settled | beaten | capped,
                  st.w_hist.at[t].set(w.reshape(b, k, s)[..., :width].astype(jnp.float32)),
                  st.parent.at[t].set(parent.astype(jnp.int32)),
                  st.alive_from.at[t].set(i.astype(jnp.int32)))

  alive_logp = jnp.full((b, k), NEG_INF, jnp.float32).at[:, 0].set(0.0)
  zeros = lambda *shape: jnp.zeros(shape, jnp.int32)
  st = _State(jnp.int32(0), carry,
              jnp.full((b, k, n), PAD, jnp.int32), alive_logp,
              jnp.full((b, k, n), PAD, jnp.int32), jnp.full((b, k), NEG_INF, jnp.float32),
              zeros(b, k), zeros(b, k), filler,
              jnp.zeros((n, b, k, width), jnp.float32), zeros(n, b, 2 * k), zeros(n, b, k))
  st = run_segments(model, n, cond, body, st, kv_segments)   # to t = n at the latest

  # every sentence is done (at the latest at its limit): the answers are its finished
  # hypotheses, sorted (-inf: an empty slot)
  m = max(nbest, 1)
  tokens = jnp.where(filler[:, None, None], PAD, st.fin_tok[:, :m])                 # [B,N,L]
  scores = jnp.where(filler[:, None], 0.0, st.fin_score[:, :m])                     # [B, N]
  weights = jnp.stack([_backtrack(st, st.fin_at[:, j], st.fin_cand[:, j])
                       for j in range(m)], 1)                                        # [B,N,L,S]
  weights = jnp.where(filler[:, None, None, None], 0.0, weights)
  if not nbest:
    return tokens[:, 0], scores[:, 0], weights[:, 0]
  return tokens, scores, weights
