"""Decoding a batch with a model's parameters, jit-compiled: greedy (greedy.py) or beam search
(beam.py), with n-best lists. Shared by training (validation), evaluation and the Python API,
so that all three decode alike.

  decode = make_decoder(graphdef, beam=5, alpha=0.6)
  tokens, weights = decode(params, src, max_len)          # [B, L] int32, [B, L, S]
  tokens, weights = decode(params, src, max_len, factor)  # each sentence at its own limit
  decode = make_decoder(graphdef, beam=5, alpha=0.6, nbest=3)
  tokens, scores, weights = decode(params, src, max_len)  # [B, N, L], [B, N], [B, N, L, S]

With several devices (`devices`, default all of this process's), each decodes its share of
the batch (parallel.split_batch); the outputs are those of one device.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import numpy as np
from flax import nnx

from attention_jax.decoding import beam as beam_lib
from attention_jax.decoding import greedy as decode_lib
from attention_jax.symbols import BOS
from attention_jax.training import parallel


def make_decoder(graphdef, beam: int = 1, alpha: float = 0.6, nbest: int = 0,
                 devices=None, with_weights: bool = True,
                 kv_segments: tuple[int, int] | None = None) -> Callable:
  """-> jit-compiled decode(params, src [B, S], max_len, factor=None) (max_len, factor static;
  with factor, each sentence stops at its own limit, greedy.output_limits: its output does
  not depend on the batch it is in).

  nbest = 0: (tokens [B, L], weights [B, L, S]) of the best output: greedy for beam == 1,
  else beam search with length penalty alpha. nbest = N (1 <= N <= beam): (tokens [B, N, L],
  scores [B, N], weights [B, N, L, S]), the N best hypotheses of the beam, best first (with
  beam == 1 and N == 1: the greedy output and its log-probability).

  devices: the devices that share each batch, row-wise (default: jax.local_devices()).
  with_weights False: weights with a last axis of 0, none kept (same tokens and scores).
  kv_segments (shortest, most): beam search's KV cache segment bounds (shapes.kv_segments;
  None: the model's defaults): the same outputs, another speed.
  """
  if not isinstance(beam, int) or beam < 1:
    raise ValueError(f'beam must be a positive integer, got {beam!r}')
  if not isinstance(nbest, int) or not 0 <= nbest <= beam:
    raise ValueError(f'nbest must be an integer in [1, beam={beam}] (or 0), got {nbest!r}')

  def decode(params, src, max_len, factor=None):
    model = nnx.merge(graphdef, params)
    limit = (None if factor is None
             else decode_lib.output_limits(model.source_mask(src), factor, max_len))
    if beam == 1:   # beam search of one beam is greedy: its smaller loop, with the score
      if nbest:
        return decode_lib.greedy_scored(model, src, max_len, limit, alpha, with_weights)
      return decode_lib.greedy(model, src, max_len, limit, with_weights)
    if not nbest:
      tokens, _, weights = beam_lib.beam_search(model, src, beam_size=beam, max_len=max_len,
                                                alpha=alpha, limit=limit,
                                                with_weights=with_weights,
                                                kv_segments=kv_segments)
      return tokens, weights
    return beam_lib.beam_search(model, src, beam_size=beam, max_len=max_len, alpha=alpha,
                                nbest=nbest, limit=limit, with_weights=with_weights,
                                kv_segments=kv_segments)
  devices = jax.local_devices() if devices is None else list(devices)
  if len(devices) > 1:
    return parallel.split_batch(decode, devices, static_argnums=(2, 3))
  return jax.jit(decode, static_argnums=(2, 3))


def layer_weights(graphdef, params, src: np.ndarray, out_ids: np.ndarray) -> np.ndarray:
  """The attention of every layer and head over one decoded output, teacher-forced on it
  (equal to what decoding computed: tests/test_transformer.py checks cache == no cache).

  src: token ids [S] (EOS last) or an image [H, W(, C)] (S = its grid's H'·W' cells);
  out_ids [T] (EOS last if it ended) -> weights [N, H, T, S] float32: a Transformer's N
  decoder layers' cross-attention per head; an RNN's one attention as [1, 1, T, S].
  One compiled program per (model, shapes): run eagerly, a Transformer's pass was some 270
  separately compiled operations (seconds per heatmap of every evaluation)."""
  tgt_in = np.concatenate([[BOS], out_ids[:-1]]).astype(np.int32)[None]       # [1, T]
  src = np.asarray(src)
  src = src.astype(np.int32 if np.issubdtype(src.dtype, np.integer) else np.float32)
  return np.asarray(_layer_weights(graphdef, params, src[None], tgt_in)[0], np.float32)


@functools.partial(jax.jit, static_argnums=0)
def _layer_weights(graphdef, params, src: jax.Array, tgt_in: jax.Array) -> jax.Array:
  """src [1, ...], tgt_in [1, T] -> [1, N, H, T, S] (layer_weights)."""
  model = nnx.merge(graphdef, params)
  _, read = model.forward(src, tgt_in)
  layers = model.layer_weights(read)
  return read.weights[:, None, None] if layers is None else layers            # [1, N, H, T, S]
