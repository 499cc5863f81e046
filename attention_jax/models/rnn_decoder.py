"""Bahdanau and Luong attention decoders.

Both expose the same step, used by the teacher-forced `jax.lax.scan` and by greedy/beam
decoding, so training and inference run the same arithmetic:

  carry, mem = dec.start(encoded)                      # once per sentence
  carry, (feat, r) = dec.step(carry, xp_t, mem, key)   # xp_t [B, G]: the target embedding's
                                                       # input projection, hoisted out of the loop;
                                                       # r: Read (weights, logp, entropy, coverage
                                                       # loss; context dropped), key: hard modes
  logits = dec.logits(feat, emb)                       # after the loop, over all [B, T] at once

The carry is (rnn carries, fed-back vector, step index t, coverage [B, S] or None).

Bahdanau et al. 2015: the query is the previous state s_{t-1}; the context feeds the RNN,
  s_t = RNN(s_{t-1}, [E y_{t-1}; c_t]);  p(y_t) = softmax(W_o tanh(L [s_t; c_t; E y_{t-1}])).
Luong et al. 2015: the query is the current state h_t,
  h_t = RNN(h_{t-1}, [E y_{t-1}; h̃_{t-1}])  (input feeding; without it just E y_{t-1}),
  h̃_t = tanh(W_c [c_t; h_t]);  p(y_t) = softmax(W_s h̃_t).
  Without input feeding the teacher-forced RNN runs first and the attention for all t is
  one batched computation.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import cells
from attention_jax.models import attention
from attention_jax.models import layers
from attention_jax.models.attention import Attention, Memory, Read, Tap
from attention_jax.models.encoders import Encoded
from attention_jax.models.layers import dropout

DECODERS: dict[str, type['Decoder']] = {}


register = registry.registrar(DECODERS, 'decoder')


def _linear(i, o, *, bias, dtype, rngs):
  return layers.Linear(i, o, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class Decoder(nnx.Module):
  """Shared parts: target embedding, stacked cells, bridge from the encoder, attention."""

  def __init__(self, cfg, key_dim: int, *, rngs: nnx.Rngs):
    dt = cfg.compute_dtype
    h = cfg.dec_hidden
    self.dropout = cfg.dropout
    self.dtype = dt
    self.embed = nnx.Embed(cfg.tgt_vocab, cfg.emb_dim, dtype=dt, param_dtype=jnp.float32,
                           rngs=rngs)
    self.cells = nnx.List([
        cells.make_cell(cfg.cell, cfg.emb_dim if l == 0 else h, h, dtype=dt, rngs=rngs)
        for l in range(cfg.dec_layers)])
    extra = self.extra_input_dim(cfg, key_dim)
    # the part of layer 0's input that is only known inside the loop (context / h̃_{t-1})
    self.w_extra = _linear(extra, cells.CELLS[cfg.cell].gates * h, bias=False, dtype=dt,
                           rngs=rngs) if extra else None
    self.bridge = _linear(key_dim, cfg.dec_layers * h, bias=True, dtype=dt, rngs=rngs)
    self.attention = Attention(cfg.score, query_dim=h, key_dim=key_dim, attn_dim=cfg.attn_dim,
                               max_src_len=cfg.max_src_len, mode=cfg.attention_mode,
                               normaliser=cfg.normaliser, window=cfg.window,
                               coverage=cfg.coverage, temperature=cfg.hard_temperature,
                               gate=cfg.context_gate, dtype=dt, rngs=rngs)

  def extra_input_dim(self, cfg, key_dim) -> int:
    raise NotImplementedError

  def start(self, enc: Encoded) -> tuple[Any, Memory]:
    """Initial carry (s_0 = tanh(W [→h_last; ←h_first]) per layer) and the memory."""
    h0 = jnp.tanh(self.bridge(enc.summary))                                # [B, L*H]
    rnn = tuple(c.carry_from_h(x) for c, x in zip(self.cells, jnp.split(h0, len(self.cells), -1)))
    feed = jnp.zeros((enc.summary.shape[0], self.cells[0].hidden), self.dtype)
    mem = self.attention.memory(enc.annotations, enc.mask, enc.summary)
    cov = jnp.zeros(enc.mask.shape, jnp.float32) if self.attention.coverage else None
    return (rnn, feed, jnp.int32(0), cov), mem

  def _read(self, query, carry, mem, key, tap=None) -> tuple[Any, Read]:
    """One step's attention: query [B, Q] -> (t + 1 and updated coverage, Read [B, ...]).
    tap: Tap of [B, 1, ...] zeros (see `features`)."""
    t, cov = carry[2], carry[3]
    r = self.attention.read(query[:, None, :], mem, pos=t[None],
                            cov=None if cov is None else cov[:, None, :], key=key, tap=tap)
    r = jax.tree.map(lambda x: x[:, 0], r)
    return (t + 1, None if cov is None else cov + r.weights), r

  def _rnn_step(self, rnn, xp0):
    """One step of the stacked cells: xp0 [B, G] -> (new carries, top output [B, H])."""
    new, h = [], None
    for layer, cell in enumerate(self.cells):   # layer 0 reads xp0, layer l > 0 layer l-1's h
      c, h = cell.step(rnn[layer], xp0 if h is None else cell.project(h))
      new.append(c)
    return tuple(new), h

  def step(self, carry, xp_t: jax.Array, mem: Memory, key: jax.Array | None = None,
           tap: Tap | None = None):
    """carry, xp_t [B, G], mem -> (carry, (features [B, F], Read [B, ...] without context))."""
    raise NotImplementedError

  def features(self, carry, xp: jax.Array, mem: Memory, key: jax.Array | None = None):
    """Teacher forcing: xp [B, T, G] -> (features [B, T, F], Read [B, T, ...]), a scan.

    With soft attention the memory's gradient is deferred (`_memory_scan`): the reverse
    loop only emits d_c_t and d_e_t, and d(keys) = Σ_t a_tᵀ d_c_t, d(pre) = Σ_t d_e_t φ(q_t)ᵀ
    (bilinear scores) are batched matmuls after it, instead of [B, S, K] outer products
    accumulated at every step (faster: docs/performance.md, "What was tried").
    """
    if not self.attention.deferrable:   # (soft modes ignore the sampling key)
      return self.scan(carry, xp, mem, key)
    graphdef, state = nnx.split(self)
    return _memory_scan(graphdef, state, carry, xp, mem)

  def scan(self, carry, xp, mem, key=None, taps: Tap | None = None):
    """`features` by plain autodiff of a scan over `step`; taps [T, B, 1, ...] or None."""
    steps = xp.shape[1]
    keys = None if key is None else attention.split_sample(key, steps)

    def body(carry, x):
      xp_t, key_t, tap_t = x
      return self.step(carry, xp_t, mem, key_t, tap_t)

    _, (feat, r) = jax.lax.scan(body, carry, (jnp.swapaxes(xp, 0, 1), keys, taps))
    return jnp.swapaxes(feat, 0, 1), jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), r)

  def logits(self, feat: jax.Array, emb: jax.Array, dropout_key=None) -> jax.Array:
    """features [B, T, F], target embeddings [B, T, E] -> logits [B, T, V] float32."""
    raise NotImplementedError


@register('bahdanau')
class BahdanauDecoder(Decoder):
  """Bahdanau, Cho & Bengio 2015: query s_{t-1}; context fed into the RNN; deep output."""

  def __init__(self, cfg, key_dim, *, rngs):
    super().__init__(cfg, key_dim, rngs=rngs)
    h = cfg.dec_hidden
    self.readout = _linear(h + key_dim + cfg.emb_dim, h, bias=True, dtype=cfg.compute_dtype,
                           rngs=rngs)
    self.out = _linear(h, cfg.tgt_vocab, bias=True, dtype=cfg.compute_dtype, rngs=rngs)

  def extra_input_dim(self, cfg, key_dim):
    return key_dim

  def step(self, carry, xp_t, mem, key=None, tap=None):
    rnn, feed = carry[:2]
    s_prev = self.cells[-1].output(rnn[-1])                                  # [B, H]
    rest, r = self._read(s_prev, carry, mem, key, tap)                       # context [B, K]
    rnn, s = self._rnn_step(rnn, xp_t + self.w_extra(r.context))
    feat = jnp.concatenate([s, r.context.astype(s.dtype)], axis=-1)
    return (rnn, feed, *rest), (feat, r._replace(context=None))

  def logits(self, feat, emb, dropout_key=None):
    r = jnp.tanh(self.readout(jnp.concatenate([feat, emb.astype(feat.dtype)], axis=-1)))
    return self.out(dropout(r, self.dropout, dropout_key)).astype(jnp.float32)


@register('luong')
class LuongDecoder(Decoder):
  """Luong, Pham & Manning 2015: query h_t; attentional state h̃_t = tanh(W_c [c_t; h_t])."""

  def __init__(self, cfg, key_dim, *, rngs):
    self.input_feeding = cfg.input_feeding
    super().__init__(cfg, key_dim, rngs=rngs)
    h = cfg.dec_hidden
    self.w_c = _linear(key_dim + h, h, bias=False, dtype=cfg.compute_dtype, rngs=rngs)
    self.out = _linear(h, cfg.tgt_vocab, bias=True, dtype=cfg.compute_dtype, rngs=rngs)

  def extra_input_dim(self, cfg, key_dim):
    return cfg.dec_hidden if cfg.input_feeding else 0

  def _attentional(self, h, c):
    """h [..., H], context c [..., K] -> h̃ [..., H]. One 2-D matmul (as `Cell.project`):
    its weight gradient then contracts a single axis."""
    x = jnp.concatenate([c.astype(h.dtype), h], axis=-1)
    return jnp.tanh(self.w_c(x.reshape(-1, x.shape[-1]))).reshape(*h.shape[:-1], -1)

  def step(self, carry, xp_t, mem, key=None, tap=None):
    rnn, feed = carry[:2]
    if self.input_feeding:
      xp_t = xp_t + self.w_extra(feed)
    rnn, h = self._rnn_step(rnn, xp_t)
    rest, r = self._read(h, carry, mem, key, tap)
    h_tilde = self._attentional(h, r.context)
    return (rnn, h_tilde, *rest), (h_tilde, r._replace(context=None))

  def features(self, carry, xp, mem, key=None):
    # coverage makes step t depend on the weights of steps < t: no batching over t then
    if self.input_feeding or self.attention.coverage:
      return super().features(carry, xp, mem, key)
    rnn = carry[0]
    everywhere = jnp.ones(xp.shape[:2], bool)
    h = None
    for layer, cell in enumerate(self.cells):
      h, _ = cells.run(cell, xp if h is None else cell.project(h), everywhere,
                       carry=rnn[layer])                                    # [B, T, H]
    r = self.attention.read(h, mem, key=key)                                 # all t at once
    return self._attentional(h, r.context), r._replace(context=None)

  def logits(self, feat, emb, dropout_key=None):
    del emb
    return self.out(dropout(feat, self.dropout, dropout_key)).astype(jnp.float32)


# ---- the teacher-forced loop with the memory's gradient deferred -------------------------
def _taps(decoder, xp, mem: Memory) -> Tap:
  t, b, s = xp.shape[1], xp.shape[0], mem.keys.shape[1]
  scores = (jnp.zeros((t, b, 1, s), mem.pre.dtype)
            if decoder.attention.score.bilinear else None)
  return Tap(scores, jnp.zeros((t, b, 1, mem.keys.shape[-1]), mem.keys.dtype))


def _tapped(graphdef, state, carry, xp, mem, taps):
  """The loop, with the memory read only through the taps' gradients (stop_gradient)."""
  dec = nnx.merge(graphdef, state)
  sg = jax.lax.stop_gradient
  loop_mem = mem._replace(keys=sg(mem.keys),
                          pre=sg(mem.pre) if taps.scores is not None else mem.pre)
  feat, r = dec.scan(carry, xp, loop_mem, None, taps)
  return (feat, r._replace(query=None)), r.query


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _memory_scan(graphdef, state, carry, xp, mem):
  """Decoder.features(carry, xp, mem) for soft attention, with a deferred memory gradient."""
  feat, r = nnx.merge(graphdef, state).scan(carry, xp, mem)
  return feat, r._replace(query=None)


def _memory_scan_fwd(graphdef, state, carry, xp, mem):
  taps = _taps(nnx.merge(graphdef, state), xp, mem)
  out, vjp_fn, queries = jax.vjp(functools.partial(_tapped, graphdef), state, carry, xp, mem,
                                 taps, has_aux=True)
  return out, (vjp_fn, out[1].weights, queries)


def _memory_scan_bwd(graphdef, res, ct):
  del graphdef
  vjp_fn, weights, queries = res                        # weights [B, T, S], queries [B, T, D]
  d_state, d_carry, d_xp, d_mem, d_taps = vjp_fn(ct)
  d_ctx = d_taps.context[:, :, 0]                                          # [T, B, K]
  d_keys = d_mem.keys + jnp.einsum('bts,tbk->bsk', weights.astype(d_ctx.dtype), d_ctx)
  d_pre = d_mem.pre
  if queries is not None:
    d_e = d_taps.scores[:, :, 0]                                           # [T, B, S]
    d_pre = d_pre + jnp.einsum('tbs,btd->bsd', d_e, queries.astype(d_e.dtype))
  return d_state, d_carry, d_xp, d_mem._replace(keys=d_keys, pre=d_pre)


_memory_scan.defvjp(_memory_scan_fwd, _memory_scan_bwd)
