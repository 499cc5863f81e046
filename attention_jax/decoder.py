"""Bahdanau and Luong attention decoders.

Both expose the same step, used by the teacher-forced `jax.lax.scan` and by greedy/beam
decoding, so training and inference run the same arithmetic:

  carry, mem = dec.start(encoded)                      # once per sentence
  carry, (feat, a) = dec.step(carry, xp_t, mem)        # xp_t [B, G]: the target embedding's
                                                       # input projection, hoisted out of the loop
  logits = dec.logits(feat, emb)                       # after the loop, over all [B, T] at once

Bahdanau et al. 2015: the query is the previous state s_{t-1}; the context feeds the RNN,
  s_t = RNN(s_{t-1}, [E y_{t-1}; c_t]);  p(y_t) = softmax(W_o tanh(L [s_t; c_t; E y_{t-1}])).
Luong et al. 2015: the query is the current state h_t,
  h_t = RNN(h_{t-1}, [E y_{t-1}; h̃_{t-1}])  (input feeding; without it just E y_{t-1}),
  h̃_t = tanh(W_c [c_t; h_t]);  p(y_t) = softmax(W_s h̃_t).
  Without input feeding the teacher-forced RNN runs first and the attention for all t is
  one batched computation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import cells, registry
from attention_jax.attention import Attention, Memory
from attention_jax.encoder import Encoded, dropout

DECODERS: dict[str, type['Decoder']] = {}


register = registry.registrar(DECODERS, 'decoder')


def _linear(i, o, *, bias, dtype, rngs):
  return nnx.Linear(i, o, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


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
                               max_src_len=cfg.max_src_len, dtype=dt, rngs=rngs)

  def extra_input_dim(self, cfg, key_dim) -> int:
    raise NotImplementedError

  def start(self, enc: Encoded) -> tuple[Any, Memory]:
    """Initial carry (s_0 = tanh(W [→h_last; ←h_first]) per layer) and the memory."""
    h0 = jnp.tanh(self.bridge(enc.summary))                                # [B, L*H]
    rnn = tuple(c.carry_from_h(x) for c, x in zip(self.cells, jnp.split(h0, len(self.cells), -1)))
    feed = jnp.zeros((enc.summary.shape[0], self.cells[0].hidden), self.dtype)
    mem = self.attention.memory(enc.annotations, enc.mask, enc.summary)
    return (rnn, feed), mem

  def _rnn_step(self, rnn, xp0):
    """One step of the stacked cells: xp0 [B, G] -> (new carries, top output [B, H])."""
    new, xp = [], xp0
    for layer, cell in enumerate(self.cells):
      if layer > 0:
        xp = cell.project(h)
      c, h = cell.step(rnn[layer], xp)
      new.append(c)
    return tuple(new), h

  def step(self, carry, xp_t: jax.Array, mem: Memory):
    """carry, xp_t [B, G], mem -> (carry, (features [B, F], weights [B, S]))."""
    raise NotImplementedError

  def features(self, carry, xp: jax.Array, mem: Memory):
    """Teacher forcing: xp [B, T, G] -> (features [B, T, F], weights [B, T, S]), a scan."""

    def body(carry, xp_t):
      carry, (feat, w) = self.step(carry, xp_t, mem)
      return carry, (feat, w)

    _, (feat, w) = jax.lax.scan(body, carry, jnp.swapaxes(xp, 0, 1))
    return jnp.swapaxes(feat, 0, 1), jnp.swapaxes(w, 0, 1)

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

  def step(self, carry, xp_t, mem):
    rnn, feed = carry
    s_prev = self.cells[-1].output(rnn[-1])                                  # [B, H]
    c, w = self.attention(s_prev[:, None, :], mem)                           # [B,1,K],[B,1,S]
    rnn, s = self._rnn_step(rnn, xp_t + self.w_extra(c[:, 0]))
    return (rnn, feed), (jnp.concatenate([s, c[:, 0]], axis=-1), w[:, 0])

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

  def _attentional(self, h, mem):
    """h [B, T, H] -> (h̃ [B, T, H], weights [B, T, S])."""
    c, w = self.attention(h, mem)
    return jnp.tanh(self.w_c(jnp.concatenate([c.astype(h.dtype), h], axis=-1))), w

  def step(self, carry, xp_t, mem):
    rnn, feed = carry
    if self.input_feeding:
      xp_t = xp_t + self.w_extra(feed)
    rnn, h = self._rnn_step(rnn, xp_t)
    h_tilde, w = self._attentional(h[:, None, :], mem)
    return (rnn, h_tilde[:, 0]), (h_tilde[:, 0], w[:, 0])

  def features(self, carry, xp, mem):
    if self.input_feeding:
      return super().features(carry, xp, mem)
    rnn, _ = carry
    everywhere = jnp.ones(xp.shape[:2], bool)
    for layer, cell in enumerate(self.cells):
      if layer > 0:
        xp = cell.project(h)
      h, _ = cells.run(cell, xp, everywhere, carry=rnn[layer])              # [B, T, H]
    return self._attentional(h, mem)                                         # all t at once

  def logits(self, feat, emb, dropout_key=None):
    del emb
    return self.out(dropout(feat, self.dropout, dropout_key)).astype(jnp.float32)
