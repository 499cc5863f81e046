"""Decoding a batch with a model's parameters, jit-compiled: greedy (greedy.py) or beam search
(beam.py), with n-best lists. Shared by training (validation), evaluation and the Python API,
so that all three decode alike.

  decode = make_decoder(graphdef, beam=5, alpha=0.6)
  tokens, weights = decode(params, src, max_len)          # [B, L] int32, [B, L, S]
  tokens, weights = decode(params, src, max_len, factor)  # each sentence at its own limit
  decode = make_decoder(graphdef, beam=5, alpha=0.6, nbest=3)
  tokens, scores, weights = decode(params, src, max_len)  # [B, N, L], [B, N], [B, N, L, S]

With several devices (`devices`, default all of this process's), each decodes its share of
the batch (split_batch); the outputs are those of one device.
"""

from __future__ import annotations

import functools
import types
from typing import Callable

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from attention_jax.decoding import beam as beam_lib
from attention_jax.decoding import greedy
from attention_jax.devices import AXIS, local_mesh, rows_apart
from attention_jax.symbols import BOS


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
             else greedy.output_limits(model.source_mask(src), factor, max_len))
    if beam == 1:   # beam search of one beam is greedy: its smaller loop, with the score
      if nbest:
        return greedy.greedy_scored(model, src, max_len, limit, alpha, with_weights)
      return greedy.greedy(model, src, max_len, limit, with_weights)
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
    return split_batch(decode, devices, static_argnums=(2, 3))
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


def split_batch(fn, devices, static_argnums=(2, 3)):
  """-> call(params, x [B, ...], *static): rows_apart(fn) over `devices`, jit-compiled, for any B:
  padded to a multiple of the device count with copies of the last row, cut off again from
  every output [B, ...]. Like a jax.jit function, `call.lower(params, x, *static).compile()`
  compiles one shape ahead of use (x a jax.ShapeDtypeStruct or array [B, ...]) and returns
  program(params, x [B, ...]), padded and cut as `call` does (decoding/ahead.py).

  Decoding loops (while_loop over output positions, cache gathers) run as they do on one
  device, on each device's rows: on a CPU split into devices (JAX_NUM_CPU_DEVICES) this
  keeps every core busy where XLA's intra-op threads cannot (a beam step's operations are
  too small to split), and on several GPUs each decodes its share.
  """
  mesh = local_mesh(devices)
  n = mesh.size
  rows, same = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
  jitted = jax.jit(rows_apart(fn, mesh), static_argnums=static_argnums)
  placed = [None, None]   # the params last given and their copy on every device

  def replicated(params):
    """params on every device, copied once per params object (not once per chunk: a file
    decodes hundreds of chunks with the same params)."""
    if placed[0] is not params:
      placed[:] = [params, jax.device_put(params, same)]
    return placed[1]

  def run(program, params, x):
    b = x.shape[0]
    pad = -b % n
    if pad:
      x = np.concatenate([np.asarray(x), np.repeat(np.asarray(x)[-1:], pad, 0)])
    out = program(replicated(params), jax.device_put(x, rows))
    return jax.tree.map(lambda y: y[:b], out) if pad else out

  def call(params, x, *static):
    return run(lambda p, xs: jitted(p, xs, *static), params, x)

  def lower(params, x, *static):
    spec = lambda a, sharding, shape=None: jax.ShapeDtypeStruct(
        a.shape if shape is None else shape, a.dtype, sharding=sharding)
    padded = (x.shape[0] + -x.shape[0] % n,) + tuple(x.shape[1:])
    lowered = jitted.lower(jax.tree.map(lambda a: spec(a, same), params),
                           spec(x, rows, padded), *static)
    return types.SimpleNamespace(compile=lambda: functools.partial(run, lowered.compile()))

  call.lower = lower
  return call
