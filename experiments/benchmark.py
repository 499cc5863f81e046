r"""Speed benchmark: train throughput, achieved FLOP/s, compile time, decoding speed, memory.

  bash launch.sh bench                       every score x both decoders, configs char and base
  bash launch.sh bench --quick               char, general + additive x both decoders (< 2 min)
  bash launch.sh bench --configs=char --scores=general,dot --decoders=luong --out=/tmp/b.json
  bash launch.sh bench --quick --peer --peer_venv=/tmp/onmt_venv   also OpenNMT-py, same data

Synthetic random-token batches of fixed shapes (no data set): for each (config, score,
decoder) it measures
  compile_s        lowering + XLA compile of the train step (`Steps.of(...).train`)
  tokens_per_s     real (non-PAD) target tokens per second of train steps: the median of
                   several timed windows after warm-up, each ended by `block_until_ready`
  flops_per_step   counted on the train step's jaxpr: 2·M·N·K per dot, 1 per element of every
                   other op, and a scan's body times its length. (XLA's `cost_analysis()`
                   counts a while/scan loop body once on the CPU, so it undercounts recurrent
                   models by about the sequence length; it is recorded as `xla_cost_flops`.)
  matmul_ratio     achieved FLOP/s / FLOP/s of a 2048x2048 float32 matmul (the machine's
                   practical ceiling), measured right before and after the variant's windows
  greedy / beam5   decoding sentences/s of `attention_jax.decode.greedy` and
                   `attention_jax.beam.beam_search` (beam 5) on a batch of the config's sources,
                   max_len = the padded target length. The weights are untrained, and EOS is
                   suppressed, so every sentence takes exactly max_len output steps (a real
                   model stops at its EOS: these are the figures for max_len-token outputs).
  memory           the compiled train step's buffers (`memory_analysis()`: arguments + outputs
                   + temporaries - donated aliases) and the process's peak RSS so far.
and per config `loop_matmul`: the decoder's gate matmul shape in a jitted loop, at the
train step's rows and beam-5's, the best a recurrent step's matmuls reach on the machine.
Results go to stdout as a table and to --out (JSON).

--peer: OpenNMT-py in its own venv, trained on the same synthetic sentences (written as text
files) with the same sizes, then its beam-5 translation of the sentences our beam5 decodes
(the same output length); prints our tokens/s and beam-5 sentences/s over theirs at equal
resources, two ways: one core each (this benchmark re-run in a child process pinned to CPU 0
with `taskset`, OpenNMT-py pinned there with 1 thread) and the whole machine each (ours as
measured above, OpenNMT-py with one thread per core); `equal_resources` in the JSON. It is
not a dependency.
`pip install torch==2.13.0 OpenNMT-py==3.5.1` does not resolve (OpenNMT-py 3.5.1 pins
torch<2.3); this installs a venv that runs it:
  python3 -m venv /tmp/onmt_venv && /tmp/onmt_venv/bin/pip install torch==2.13.0
  /tmp/onmt_venv/bin/pip install --no-deps OpenNMT-py==3.5.1
  /tmp/onmt_venv/bin/pip install configargparse pyyaml sacrebleu six rapidfuzz pyahocorasick \
      pyonmttok spacy tensorboard fasttext-wheel flask waitress
  bash launch.sh bench --peer --peer_venv=/tmp/onmt_venv      (or ONMT_VENV=/tmp/onmt_venv)
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from attention_jax import beam, decode, train
from attention_jax.data import batching
from attention_jax.data.tokenizers import EOS
from attention_jax.decoder import DECODERS
from attention_jax.scores import SCORES
from experiments import cli
from experiments.configs import common


@dataclasses.dataclass(frozen=True)
class Shape:
  """One benchmark configuration: model sizes (LSTM cells, one bidirectional encoder layer)
  and the synthetic data's vocabulary, batch and length range (tokens, before EOS)."""
  emb_dim: int
  enc_hidden: int       # per direction; the annotations are 2 x enc_hidden
  dec_hidden: int
  attn_dim: int
  vocab: int            # both sides
  batch: int
  min_len: int
  max_len: int
  d_model: int = 128    # the Transformer of this size (decoder 'transformer'): 3+3 layers
  ff_dim: int = 512

  @property
  def padded(self) -> int:
    """The padded length S = T (longest sentence + EOS, rounded up to a multiple of 8)."""
    return batching.round_up(self.max_len + 1)


CONFIGS = {
    'char': Shape(emb_dim=128, enc_hidden=128, dec_hidden=256, attn_dim=256, vocab=32,
                  batch=64, min_len=50, max_len=70, d_model=128, ff_dim=512),
    'base': Shape(emb_dim=256, enc_hidden=256, dec_hidden=512, attn_dim=512, vocab=8000,
                  batch=64, min_len=30, max_len=50, d_model=256, ff_dim=1024),
    # a few seconds in all; for tests of this script
    'tiny': Shape(emb_dim=16, enc_hidden=16, dec_hidden=32, attn_dim=32, vocab=20, batch=8,
                  min_len=4, max_len=10, d_model=16, ff_dim=32),
}
# the decoders benchmarked: the RNN decoders, and 'transformer' (model.arch; its score is the
# cross-attention's, with scaled_dot self-attention, 4 heads, 3+3 layers)
ARCHITECTURES = sorted(DECODERS) + ['transformer']

# The speed targets of issue 9. The OpenNMT-py figures are the ones quoted there (2-core CPU,
# char config); --peer measures them on this machine instead.
PEER_REFERENCE_TOK_S = {'general': 3400.0, 'additive': 1100.0}
TARGET_PEER_RATIO = 3.0
TARGET_PEER_BEAM_RATIO = 5.0   # beam-5 sentences/s over OpenNMT-py's, when --peer measured it
TARGET_MATMUL_RATIO = 0.5   # config base
TARGET_COMPILE_S = 30.0
MATMUL_N = 2048


@dataclasses.dataclass(frozen=True)
class Settings:
  warmup: int = 1           # untimed train steps after compiling
  windows: int = 5          # timed windows; the median counts
  steps: int = 1            # train steps per timed window
  decode_windows: int = 3   # timed decoding calls (one batch each; already compiled, so the
                            # first call is timed too); the median counts
  seed: int = 0
  batch: int | None = None  # sentences per batch (None: the config's), ours and the peer's
  input_feeding: bool = True  # Luong decoders (ours and OpenNMT-py's `input_feed`)

  def shape(self, name: str) -> 'Shape':
    """The config `name`'s shape with this run's batch size."""
    return dataclasses.replace(CONFIGS[name], batch=self.batch or CONFIGS[name].batch)


# 3 steps per window: single-step windows varied by 30% between runs on a quiet machine
QUICK = Settings(warmup=1, windows=2, steps=3, decode_windows=1)


# ---- FLOPs ------------------------------------------------------------------------------
def count_flops(closed_jaxpr) -> tuple[int, int]:
  """-> (matmul FLOPs, other FLOPs) of a jaxpr, loops included.

  dot_general: 2 x (output elements) x (contracted size). Any other primitive: one FLOP per
  output element (XLA's cost model counts elementwise ops the same way). A scan counts its
  body `length` times; a while loop's trip count is unknown, so its body counts once; a cond
  counts its most expensive branch.
  """
  dot = other = 0
  for eqn in getattr(closed_jaxpr, 'jaxpr', closed_jaxpr).eqns:
    name, params = eqn.primitive.name, eqn.params
    if name == 'scan':
      d, o = count_flops(params['jaxpr'])
      dot, other = dot + d * params['length'], other + o * params['length']
    elif name == 'while':
      d, o = count_flops(params['body_jaxpr'])
      dot, other = dot + d, other + o
    elif name == 'cond':
      branches = [count_flops(b) for b in params['branches']]
      dot += max(b[0] for b in branches)
      other += max(b[1] for b in branches)
    elif name == 'dot_general':
      (contract, _), _ = params['dimension_numbers']
      lhs = eqn.invars[0].aval.shape
      out = eqn.outvars[0].aval.shape
      dot += 2 * int(np.prod(out)) * int(np.prod([lhs[i] for i in contract]))
    else:
      inner = next((params[k] for k in ('jaxpr', 'call_jaxpr', 'fun_jaxpr')
                    if k in params and hasattr(getattr(params[k], 'jaxpr', params[k]), 'eqns')),
                   None)
      if inner is not None:   # pjit, custom_jvp / custom_vjp, remat, ...
        d, o = count_flops(inner)
        dot, other = dot + d, other + o
      else:
        other += sum(int(np.prod(v.aval.shape)) for v in eqn.outvars
                     if hasattr(v.aval, 'shape'))
  return dot, other


def xla_cost_flops(compiled) -> float | None:
  """XLA's own FLOP estimate (counts each loop body once), or None if unavailable."""
  try:
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float(ca.get('flops')) if ca and 'flops' in ca else None
  except Exception:  # pylint: disable=broad-except
    return None


def compiled_bytes(compiled) -> int | None:
  """Arguments + outputs + temporaries - donated aliases of a compiled executable."""
  try:
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes -
               m.alias_size_in_bytes)
  except Exception:  # pylint: disable=broad-except
    return None


def maxrss_mb() -> float:
  """The process's peak resident memory so far (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---- timing -----------------------------------------------------------------------------
def median_window(fn: Callable[[], Any], windows: int, per_window: int) -> tuple[float, list]:
  """Runs `fn` per_window times per window, blocking at the window's end.
  -> (median seconds per call, [seconds per call of each window])."""
  times = []
  for _ in range(windows):
    t0 = time.perf_counter()
    for _ in range(per_window):
      out = fn()
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / per_window)
  return statistics.median(times), times


def matmul_flops_per_s(n: int = MATMUL_N, windows: int = 5) -> float:
  """FLOP/s of an n x n float32 matmul (jit, median of `windows` calls)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  jax.block_until_ready(f(a))
  t, _ = median_window(lambda: f(a), windows, 1)
  return 2.0 * n ** 3 / t


def loop_matmul_flops_per_s(m: int, k: int, n: int, reps: int = 100, windows: int = 3) -> float:
  """FLOP/s of a recurrent step's matmul: [m, k] x [k, n] (n >= k) repeated `reps` times in
  a jitted loop, each on the previous result (x = tanh(x W)[:, :k]). What a decoder step's
  gate matmul can reach at best, as a yardstick next to the large matmul."""
  x = jax.random.normal(jax.random.key(1), (m, k), jnp.float32)
  w = jax.random.normal(jax.random.key(2), (k, n), jnp.float32) / np.sqrt(k)
  f = jax.jit(lambda x, w: jax.lax.fori_loop(
      0, reps, lambda _, x: jnp.tanh(x @ w)[:, :k], x))
  jax.block_until_ready(f(x, w))
  t, _ = median_window(lambda: f(x, w), windows, 1)
  return 2.0 * m * k * n * reps / t


def loop_matmuls(shape: Shape) -> dict[str, Any]:
  """The decoder's gate matmul [rows, H + 2 H_enc] x [H + 2 H_enc, 4 H] (LSTM; input fed
  back or context) in a loop, at the train step's rows (batch) and beam-5's (5 x batch)."""
  k, n = shape.dec_hidden + 2 * shape.enc_hidden, 4 * shape.dec_hidden
  return {'k': k, 'n': n, 'train_rows': shape.batch, 'beam_rows': 5 * shape.batch,
          'train_flops_per_s': loop_matmul_flops_per_s(shape.batch, k, n),
          'beam_flops_per_s': loop_matmul_flops_per_s(5 * shape.batch, k, n)}


def format_loop_matmuls(name: str, lm: dict[str, Any], matmul: float) -> str:
  return (f'{name}: gate matmul [rows, {lm["k"]}] x [{lm["k"]}, {lm["n"]}] in a loop: '
          f'{lm["train_flops_per_s"] / 1e9:.1f} GFLOP/s at {lm["train_rows"]} rows '
          f'({lm["train_flops_per_s"] / matmul:.0%} of the large matmul), '
          f'{lm["beam_flops_per_s"] / 1e9:.1f} at {lm["beam_rows"]} '
          f'({lm["beam_flops_per_s"] / matmul:.0%})')


# ---- synthetic data and models ----------------------------------------------------------
def sentences(shape: Shape, seed: int) -> tuple[list[list[int]], list[list[int]]]:
  """shape.batch random (source, target) token-id sentences, ids in [4, vocab) (0-3 are
  PAD, BOS, EOS, UNK), lengths uniform in [min_len, max_len], independently per side."""
  rng = np.random.default_rng(seed)
  def side():
    return [rng.integers(4, shape.vocab, size=int(n)).tolist()
            for n in rng.integers(shape.min_len, shape.max_len + 1, size=shape.batch)]
  return side(), side()


def make_batch(shape: Shape, seed: int) -> dict[str, np.ndarray]:
  """The package's own batch format (batching.make_batch), padded to (padded, padded)."""
  src, tgt = sentences(shape, seed)
  enc = batching.Encoded(batching.Ragged.from_lists(src), batching.Ragged.from_lists(tgt))
  return batching.make_batch(enc, range(shape.batch), (shape.padded, shape.padded),
                             shape.batch)


def experiment_config(shape: Shape, score: str, decoder: str, seed: int,
                      input_feeding: bool = True):
  """base_config() with this shape's model: LSTM cells, one bidirectional encoder layer,
  input feeding (Luong) unless input_feeding=False, dropout as in base_config; one device,
  no shard_map."""
  cfg = common.base_config()
  cfg.seed = seed
  cfg.parallel = 'single'
  cfg.data.batch_size = shape.batch
  m = cfg.model
  if decoder == 'transformer':
    m.arch, m.cross_attention_score = 'transformer', score
    m.d_model, m.ff_dim, m.heads, m.transformer_layers = shape.d_model, shape.ff_dim, 4, 3
    m.max_positions = max(m.max_positions, 2 * shape.padded)
    return cfg
  m.cell, m.decoder, m.score = 'lstm', decoder, score
  m.emb_dim, m.enc_hidden, m.enc_layers, m.bidirectional = (shape.emb_dim, shape.enc_hidden,
                                                            1, True)
  m.dec_hidden, m.dec_layers, m.attn_dim = shape.dec_hidden, 1, shape.attn_dim
  m.input_feeding = input_feeding
  m.max_src_len = max(m.max_src_len, shape.padded)
  return cfg


# ---- one variant ----------------------------------------------------------------------
def suppress_eos(params: dict) -> dict:
  """The params with the output layer's EOS bias at -1e9 (the model never ends a sentence)."""
  if 'decoder' not in params:   # the Transformer's output layer is at the top
    return {**params, 'out': {**params['out'], 'bias': params['out']['bias'].at[EOS].set(-1e9)}}
  out = params['decoder']['out']
  out = {**out, 'bias': out['bias'].at[EOS].set(-1e9)}
  return {**params, 'decoder': {**params['decoder'], 'out': out}}


def decode_speed(fn: Callable, params, src: jax.Array, windows: int) -> dict[str, float]:
  """fn(params, src [B, S]) -> tokens [B, L]: compile time, and the median seconds of
  `windows` calls (already compiled, so the first call counts too)."""
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(params, src).compile()
  compile_s = time.perf_counter() - t0
  last = {}

  def call():
    last['tokens'] = compiled(params, src)
    return last['tokens']

  seconds, _ = median_window(call, windows, 1)
  return {'compile_s': compile_s, 'seconds_per_batch': seconds,
          'sentences_per_s': src.shape[0] / seconds, 'output_len': last['tokens'].shape[1]}


def bench_variant(shape: Shape, score: str, decoder: str, settings: Settings) -> dict[str, Any]:
  """Every measurement of one (shape, score, decoder)."""
  cfg = experiment_config(shape, score, decoder, settings.seed, settings.input_feeding)
  mcfg = train.model_config(cfg, shape.vocab, shape.vocab)
  tx = train.make_optimizer(cfg.train)
  graphdef, state = train.init_state(mcfg, tx, cfg.seed)
  batch_np = make_batch(shape, settings.seed)
  batch = jax.device_put(batch_np)
  tokens = int((batch_np['tgt_out'] != 0).sum())
  steps = train.Steps.of(graphdef, cfg)

  t0 = time.perf_counter()
  if hasattr(steps.train, 'lower'):
    compiled = steps.train.lower(state, batch).compile()
    step_fn = compiled
  else:  # a mode without AOT lowering: the first call compiles
    compiled, step_fn = None, steps.train
    state, _ = step_fn(state, batch)
    jax.block_until_ready(state)
  compile_s = time.perf_counter() - t0
  dot, other = count_flops(jax.make_jaxpr(steps.train)(state, batch))

  for _ in range(max(settings.warmup, 1)):
    state, metrics = step_fn(state, batch)
  if not bool(metrics['finite']):
    raise FloatingPointError(f'non-finite loss in the benchmark of {score}/{decoder}')
  box = {'state': state}

  def one_step():
    box['state'], m = step_fn(box['state'], batch)
    return m['loss']

  # the ceiling, measured right before and after the train step's windows: other work on
  # the machine moves both together (a 2048 matmul ran at 150-190 GFLOP/s here when the
  # machine was idle, at 75-90 while other jobs shared it)
  before = matmul_flops_per_s(windows=3)
  step_s, windows = median_window(one_step, settings.windows, settings.steps)
  matmul = statistics.mean([before, matmul_flops_per_s(windows=3)])
  params = box['state']['params']

  # untrained weights emit EOS at random, which would make decoding lengths (and speeds)
  # differ by chance: with EOS suppressed every variant decodes exactly max_len tokens
  params = suppress_eos(params)
  src, max_len = batch['src'], shape.padded
  decoders = {
      'greedy': lambda p, s: decode.greedy(nnx.merge(graphdef, p), s, max_len)[0],
      'beam5': lambda p, s: beam.beam_search(nnx.merge(graphdef, p), s, beam_size=5,
                                             max_len=max_len)[0]}
  decoding = {name: decode_speed(fn, params, src, settings.decode_windows)
              for name, fn in decoders.items()}

  flops = dot + other
  return {
      'score': score, 'decoder': decoder, 'batch': shape.batch,
      'input_feeding': settings.input_feeding, 'compile_s': compile_s, 'step_s': step_s,
      'step_s_windows': windows, 'target_tokens_per_batch': tokens,
      'tokens_per_s': tokens / step_s, 'sentences_per_s': shape.batch / step_s,
      'flops_per_step': flops, 'matmul_flops_per_step': dot,
      'xla_cost_flops': xla_cost_flops(compiled) if compiled is not None else None,
      'flops_per_s': flops / step_s, 'matmul_flops_per_s': matmul,
      'matmul_ratio': flops / step_s / matmul,
      'greedy': decoding['greedy'], 'beam5': decoding['beam5'],
      'memory': {'train_step_bytes': compiled_bytes(compiled) if compiled is not None else None,
                 'maxrss_mb': maxrss_mb()},
      'parameters': int(sum(x.size for x in jax.tree.leaves(params))),
  }


# ---- OpenNMT-py as a peer -----------------------------------------------------------------
ONMT_ATTENTION = {'general': 'general', 'additive': 'mlp', 'dot': 'dot'}
PEER_CORPUS_BATCHES = 32


def _peer_text(sentences: list[list[int]]) -> str:
  """Token-id sentences as OpenNMT-py text lines: id i is the word `t{i}`."""
  return '\n'.join(' '.join(f't{i}' for i in ids) for ids in sentences) + '\n'


def _pinned(cmd: list[str], cpus: str | None) -> list[str]:
  """cmd, run on the CPUs `cpus` only (taskset's list, e.g. '0'), or anywhere for None."""
  return cmd if cpus is None else ['taskset', '-c', cpus] + cmd


def peer_tokens_per_s(venv: str, shape: Shape, score: str, steps: int, seed: int,
                      workdir: str, threads: int = 1, cpus: str | None = None,
                      input_feeding: bool = True) -> dict[str, Any]:
  """Trains OpenNMT-py (brnn LSTM encoder, rnn LSTM decoder with input feeding unless
  input_feeding=False, i.e. Luong, global attention `ONMT_ATTENTION[score]`) on the same
  synthetic sentences, and returns its target tokens/s (as it logs them, data loading
  included): the median of its report windows after the first. `threads`: OMP/MKL threads
  of PyTorch (on this 2-core machine, with other work running, 2 OpenMP threads made it
  10-20x slower than 1)."""
  binary = os.path.join(venv, 'bin', 'onmt_train')
  if not os.path.exists(binary):
    raise FileNotFoundError(f'{binary} not found: install OpenNMT-py into {venv} (see the '
                            f'docstring of experiments/benchmark.py)')
  os.makedirs(workdir, exist_ok=True)
  src, tgt = [], []
  for k in range(PEER_CORPUS_BATCHES):
    s, t = sentences(shape, seed + k)
    src += s
    tgt += t
  for name, side in (('src', src), ('tgt', tgt)):
    with open(os.path.join(workdir, f'train.{name}'), 'w') as f:
      f.write(_peer_text(side))
    with open(os.path.join(workdir, f'vocab.{name}'), 'w') as f:
      f.write(''.join(f't{i}\t1\n' for i in range(4, shape.vocab)))
  report = max(steps // 4, 1)
  cfg = {
      'save_data': os.path.join(workdir, 'run'),
      'save_model': os.path.join(workdir, 'model'),
      'src_vocab': os.path.join(workdir, 'vocab.src'),
      'tgt_vocab': os.path.join(workdir, 'vocab.tgt'),
      'data': {'corpus_1': {'path_src': os.path.join(workdir, 'train.src'),
                            'path_tgt': os.path.join(workdir, 'train.tgt')}},
      'src_seq_length': shape.padded * 2, 'tgt_seq_length': shape.padded * 2,
      'encoder_type': 'brnn', 'decoder_type': 'rnn', 'rnn_type': 'LSTM',
      'enc_layers': 1, 'dec_layers': 1, 'enc_hid_size': 2 * shape.enc_hidden,
      'dec_hid_size': shape.dec_hidden, 'word_vec_size': shape.emb_dim,
      'global_attention': ONMT_ATTENTION[score], 'input_feed': int(input_feeding),
      'dropout': [0.1],
      'batch_size': shape.batch, 'batch_type': 'sents', 'optim': 'adam',
      'learning_rate': 0.002, 'train_steps': steps, 'report_every': report,
      # the last step's checkpoint is what peer_beam_sentences_per_s translates with
      'valid_steps': 10 * steps, 'save_checkpoint_steps': steps, 'seed': seed,
      # one bucket = the whole corpus: with the default (262,144 examples) OpenNMT-py
      # re-reads a small corpus hundreds of times before its first step
      'num_workers': 0, 'bucket_size': PEER_CORPUS_BATCHES * shape.batch,
  }
  path = os.path.join(workdir, 'config.yaml')
  with open(path, 'w') as f:
    json.dump(cfg, f)   # JSON is YAML
  t0 = time.perf_counter()
  env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)}
  proc = subprocess.run(_pinned([binary, '-config', path], cpus), capture_output=True,
                        text=True, cwd=workdir, env=env, check=False)
  wall = time.perf_counter() - t0
  log = proc.stdout + proc.stderr
  rates = [float(m.group(2)) for m in re.finditer(r'(\d+)/\s*(\d+) tok/s', log)]
  if proc.returncode or not rates:
    raise RuntimeError(f'onmt_train failed (exit {proc.returncode}); last lines:\n'
                       + '\n'.join(log.splitlines()[-20:]))
  kept = rates[1:] or rates
  return {'attention': ONMT_ATTENTION[score], 'tokens_per_s': statistics.median(kept),
          'report_windows': rates, 'steps': steps, 'threads': threads, 'cpus': cpus,
          'wall_s': wall,
          'checkpoint': os.path.join(workdir, f'model_step_{steps}.pt')}


def peer_beam_sentences_per_s(venv: str, checkpoint: str, src: list[list[int]], length: int,
                              workdir: str, threads: int = 1, beam_size: int = 5,
                              repeats: int = 3, cpus: str | None = None) -> dict[str, Any]:
  """OpenNMT-py's beam search (onmt_translate) on the sentences `src` (repeated `repeats`
  times, one batch of len(src) each) with -min_length = -max_length = `length`: like our
  EOS-suppressed decoding, every output has `length` tokens. -> sentences/s as OpenNMT-py
  reports it (its translation loop only: model loading and process start excluded)."""
  binary = os.path.join(venv, 'bin', 'onmt_translate')
  path = os.path.join(workdir, 'beam.src')
  with open(path, 'w') as f:
    f.write(_peer_text(src * repeats))
  pred = os.path.join(workdir, 'beam.pred')
  # OpenNMT-py 3.5.1 pickles its options into the checkpoint, which torch >= 2.6 refuses to
  # load by default (weights_only); the checkpoint was written by the run just before
  env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads),
         'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'}
  proc = subprocess.run(_pinned(
      [binary, '-model', checkpoint, '-src', path, '-output', pred, '-beam_size',
       str(beam_size), '-batch_size', str(len(src)), '-min_length', str(length),
       '-max_length', str(length), '-report_time', '-gpu', '-1'], cpus),
      capture_output=True, text=True, cwd=workdir, env=env, check=False)
  log = proc.stdout + proc.stderr
  ms = re.search(r'Average translation time \(ms\): ([\d.]+)', log)
  if proc.returncode or not ms:
    raise RuntimeError(f'onmt_translate failed (exit {proc.returncode}); last lines:\n'
                       + '\n'.join(log.splitlines()[-20:]))
  with open(pred) as f:
    out_lens = [len(line.split()) for line in f]
  return {'beam_size': beam_size, 'sentences_per_s': 1e3 / float(ms.group(1)),
          'sentences': len(out_lens), 'mean_output_len': statistics.mean(out_lens)}


# ---- equal resources ---------------------------------------------------------------------
def ours_on_one_core(configs: Sequence[str], scores: Sequence[str], decoders: Sequence[str],
                     settings: Settings) -> list[dict[str, Any]]:
  """Our result rows measured by this script in a child process pinned to CPU 0
  (`taskset -c 0`: XLA sizes its thread pool to the one CPU it may use)."""
  with tempfile.TemporaryDirectory(prefix='bench_one_core_') as tmp:
    path = os.path.join(tmp, 'one_core.json')
    cmd = _pinned([sys.executable, '-m', 'experiments.benchmark',
                   f'--configs={",".join(configs)}', f'--scores={",".join(scores)}',
                   f'--decoders={",".join(decoders)}', f'--windows={settings.windows}',
                   f'--steps={settings.steps}', f'--warmup={settings.warmup}',
                   f'--decode_windows={settings.decode_windows}',
                   f'--batch={settings.batch or 0}',
                   f'--input_feeding={settings.input_feeding}', f'--out={path}'], '0')
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, check=False)
    if proc.returncode:
      raise RuntimeError(f'the one-core benchmark failed (exit {proc.returncode}):\n'
                         + proc.stderr[-3000:])
    with open(path) as f:
      return json.load(f)['results']


def equal_resource_ratios(ours: list[dict], peers: list[dict]) -> list[dict[str, Any]]:
  """Per (score, decoder): our train tokens/s and beam-5 sentences/s over OpenNMT-py's."""
  by_score = {p['score']: p for p in peers}
  return [{'score': r['score'], 'decoder': r['decoder'],
           'train_ratio': r['tokens_per_s'] / by_score[r['score']]['tokens_per_s'],
           'beam5_ratio': r['beam5']['sentences_per_s']
           / by_score[r['score']]['beam5']['sentences_per_s']}
          for r in ours if r['score'] in by_score and r['decoder'] != 'transformer']


# ---- the run ------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
  cpu = platform.processor()
  try:
    with open('/proc/cpuinfo') as f:
      cpu = next((l.split(':', 1)[1].strip() for l in f if l.startswith('model name')), cpu)
  except OSError:
    pass
  return {'cpu': cpu, 'cpu_count': os.cpu_count(), 'platform': platform.platform(),
          'python': platform.python_version(), 'jax': jax.__version__,
          'devices': [str(d) for d in jax.devices()],
          'xla_flags': os.environ.get('XLA_FLAGS', '')}


def run(configs: Sequence[str], scores: Sequence[str], decoders: Sequence[str],
        settings: Settings = Settings(), peer_venv: str | None = None, peer_steps: int = 40,
        log: Callable[[str], None] = print,
        save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
  """Benchmarks every (config, score, decoder); -> the JSON-able results. `save` is called
  with the results so far after each variant (a long run keeps what it measured)."""
  for names, valid, what in ((configs, CONFIGS, 'config'), (scores, SCORES, 'score'),
                             (decoders, ARCHITECTURES, 'decoder')):
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
      raise ValueError(f'unknown or no {what}(s) {unknown}; valid: {", ".join(sorted(valid))}')
  t_start = time.perf_counter()
  out = {'created': datetime.datetime.now().isoformat(timespec='seconds'),
         'machine': machine_info(), 'load_average_start': os.getloadavg(),
         'settings': dataclasses.asdict(settings), 'configs': {}, 'results': []}
  matmul = [matmul_flops_per_s()]
  log(f'{MATMUL_N}x{MATMUL_N} float32 matmul: {matmul[0] / 1e9:.1f} GFLOP/s; load average '
      f'{out["load_average_start"][0]:.2f} on {os.cpu_count()} cores')
  log('| ' + ' | '.join(COLUMNS) + ' |')
  for name in configs:
    shape = settings.shape(name)
    out['configs'][name] = {**dataclasses.asdict(shape), 'padded_len': shape.padded,
                            'loop_matmul': loop_matmuls(shape)}
    log(format_loop_matmuls(name, out['configs'][name]['loop_matmul'], matmul[0]))
    for decoder in decoders:
      for score in scores:
        if decoder == 'transformer' and not SCORES[score].content_based:
          continue   # location / none have no per-head form (multihead.check)
        r = bench_variant(shape, score, decoder, settings)
        r['config'] = name
        out['results'].append(r)
        log(format_row(r))
        if save:
          save(out)
  matmul.append(matmul_flops_per_s())
  out['matmul'] = {'n': MATMUL_N, 'flops_per_s': matmul[0], 'flops_per_s_end': matmul[1]}
  if peer_venv:
    # equal resources, two ways: one core each (ours pinned in a child process, OpenNMT-py
    # pinned with 1 thread), and the whole machine each (ours here, OpenNMT-py with a thread
    # per core)
    config = 'char' if 'char' in configs else configs[0]
    shape, cores = settings.shape(config), len(os.sched_getaffinity(0))
    out['equal_resources'] = {}
    with tempfile.TemporaryDirectory(prefix='onmt_bench_') as tmp:
      for setting, cpus, threads in (('one_core', '0', 1), ('all_cores', None, cores)):
        if setting == 'one_core':
          log('one core: this benchmark again, pinned to CPU 0 ...')
          ours = ours_on_one_core([config], scores, decoders, settings)
        else:
          ours = [r for r in out['results'] if r['config'] == config]
        peers = []
        for score in [s for s in scores if s in ONMT_ATTENTION]:
          work = os.path.join(tmp, f'{setting}_{score}')
          p = peer_tokens_per_s(peer_venv, shape, score, peer_steps, settings.seed, work,
                                threads, cpus, settings.input_feeding)
          p.update(score=score, config=config)
          # the sentences our beam5 decodes (make_batch(shape, seed)'s sources)
          p['beam5'] = peer_beam_sentences_per_s(
              peer_venv, p.pop('checkpoint'), sentences(shape, settings.seed)[0],
              shape.padded, work, threads, cpus=cpus)
          peers.append(p)
        ratios = equal_resource_ratios(ours, peers)
        out['equal_resources'][setting] = {
            'cores': 1 if cpus else cores, 'peer_threads': threads, 'config': config,
            'batch': shape.batch, 'input_feeding': settings.input_feeding,
            'ours': [{k: r[k] for k in ('score', 'decoder', 'batch', 'input_feeding',
                                        'tokens_per_s', 'matmul_ratio')}
                     | {'beam5_sentences_per_s': r['beam5']['sentences_per_s']} for r in ours],
            'peer': peers, 'ratios': ratios}
        for x in ratios:
          log(f'{setting}: {x["score"]}/{x["decoder"]} ours / OpenNMT-py: train '
              f'{x["train_ratio"]:.2f}x, beam-5 {x["beam5_ratio"]:.2f}x')
    # issue 9's targets compare with OpenNMT-py on 1 thread (ours: every core)
    out['peer'] = out['equal_resources']['one_core']['peer']
  out['targets'] = targets(out)
  out['load_average_end'] = os.getloadavg()
  out['total_s'] = time.perf_counter() - t_start
  return out


def targets(out: dict[str, Any]) -> list[dict[str, Any]]:
  """The issue's speed targets, each with the measured value and whether it is met."""
  peer = {p['score']: (p['tokens_per_s'], 'OpenNMT-py on 1 thread in this run, ours on every '
                                          'core: unequal resources')
          for p in out.get('peer', []) if p.get('config') == 'char'}
  peer_beam = {p['score']: p['beam5']['sentences_per_s'] for p in out.get('peer', [])
               if p.get('config') == 'char' and 'beam5' in p}
  rows = []
  for r in out['results']:
    what = f'{r["config"]}/{r["score"]}/{r["decoder"]}'
    rows.append({'what': f'{what} compile_s <= {TARGET_COMPILE_S:g}', 'value': r['compile_s'],
                 'met': r['compile_s'] <= TARGET_COMPILE_S})
    if r['config'] == 'base':
      rows.append({'what': f'{what} matmul_ratio >= {TARGET_MATMUL_RATIO}',
                   'value': r['matmul_ratio'], 'met': r['matmul_ratio'] >= TARGET_MATMUL_RATIO})
    if r['config'] == 'char' and r['score'] in PEER_REFERENCE_TOK_S:
      ref, source = peer.get(r['score'], (PEER_REFERENCE_TOK_S[r['score']],
                                          'OpenNMT-py figure quoted in issue 9'))
      rows.append({'what': f'{what} tokens_per_s >= {TARGET_PEER_RATIO:g} x {ref:,.0f} '
                           f'({source})', 'value': r['tokens_per_s'] / ref,
                   'met': r['tokens_per_s'] >= TARGET_PEER_RATIO * ref})
    if r['config'] == 'char' and r['score'] in peer_beam:
      ref = peer_beam[r['score']]
      rows.append({'what': f'{what} beam5 sentences_per_s >= {TARGET_PEER_BEAM_RATIO:g} x '
                           f'{ref:.1f} (OpenNMT-py beam-5 on 1 thread in this run, ours on '
                           f'every core)',
                   'value': r['beam5']['sentences_per_s'] / ref,
                   'met': r['beam5']['sentences_per_s'] >= TARGET_PEER_BEAM_RATIO * ref})
  return rows


COLUMNS = ('config', 'score', 'decoder', 'compile s', 'step ms', 'tok/s', 'sent/s',
           'GFLOP/step', 'GFLOP/s', 'matmul GFLOP/s', 'ratio', 'greedy sent/s', 'beam5 sent/s',
           'step MiB', 'RSS MiB')


def format_row(r: dict[str, Any]) -> str:
  mem = r['memory']['train_step_bytes']
  cells = [r['config'], r['score'], r['decoder'], f'{r["compile_s"]:.1f}',
           f'{1e3 * r["step_s"]:.0f}', f'{r["tokens_per_s"]:,.0f}',
           f'{r["sentences_per_s"]:.1f}', f'{r["flops_per_step"] / 1e9:.2f}',
           f'{r["flops_per_s"] / 1e9:.1f}', f'{r["matmul_flops_per_s"] / 1e9:.0f}',
           f'{100 * r["matmul_ratio"]:.0f}%',
           f'{r["greedy"]["sentences_per_s"]:.0f}', f'{r["beam5"]["sentences_per_s"]:.1f}',
           '-' if mem is None else f'{mem / 2 ** 20:.0f}', f'{r["memory"]["maxrss_mb"]:.0f}']
  return '| ' + ' | '.join(cells) + ' |'


def format_table(out: dict[str, Any]) -> str:
  lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
  lines += [format_row(r) for r in out['results']]
  m = out['matmul']
  lines.append(f'\nmatmul {m["n"]}x{m["n"]} float32: {m["flops_per_s"] / 1e9:.1f} GFLOP/s at '
               f'the start, {m["flops_per_s_end"] / 1e9:.1f} at the end; load average '
               f'{out["load_average_start"][0]:.2f} -> {out["load_average_end"][0]:.2f} on '
               f'{out["machine"]["cpu_count"]} cores; {out["total_s"]:.0f} s in all')
  lines += [format_loop_matmuls(name, c['loop_matmul'], m['flops_per_s'])
            for name, c in out['configs'].items()]
  for setting, e in out.get('equal_resources', {}).items():
    lines.append(f'\nequal resources, {setting}: ours on {e["cores"]} core(s), OpenNMT-py on '
                 f'{e["cores"]} core(s) with {e["peer_threads"]} thread(s), config '
                 f'{e["config"]}, batch {e.get("batch", "64")}, input feeding '
                 f'{"on" if e.get("input_feeding", True) else "off"} (Luong)')
    ours = {(r['score'], r['decoder']): r for r in e['ours']}
    peers = {p['score']: p for p in e['peer']}
    lines.append('| score (OpenNMT-py) | our decoder | ours tok/s | OpenNMT-py tok/s | ratio | '
                 'ours beam-5 sent/s | OpenNMT-py beam-5 sent/s | ratio |')
    lines.append('|---|---|---|---|---|---|---|---|')
    for x in e['ratios']:
      r, p = ours[(x['score'], x['decoder'])], peers[x['score']]
      lines.append(f'| {x["score"]} ({p["attention"]}) | {x["decoder"]} | '
                   f'{r["tokens_per_s"]:,.0f} | {p["tokens_per_s"]:,.0f} | '
                   f'{x["train_ratio"]:.2f}x | {r["beam5_sentences_per_s"]:.1f} | '
                   f'{p["beam5"]["sentences_per_s"]:.1f} | {x["beam5_ratio"]:.2f}x |')
  lines.append('targets:')
  lines += [f'  [{"met" if t["met"] else "MISSED"}] {t["what"]}: {t["value"]:.3g}'
            for t in out['targets']]
  return '\n'.join(lines)


# ---- command line ---------------------------------------------------------------------------
QUICK_SELECTION = {'configs': ['char'], 'scores': ['general', 'additive'],
                   'decoders': ['bahdanau', 'luong']}

def define_flags():
  """The command line's flags (defined when run as a script, so that other entry points
  can import this module and define their own)."""
  flags.DEFINE_bool('quick', False, 'A quick subset (char; general, additive; both decoders; '
                    'short windows); --configs/--scores/--decoders still override it.')
  flags.DEFINE_list('configs', None, f'Configs (default: char,base). Valid: {", ".join(CONFIGS)}')
  flags.DEFINE_list('scores', None, 'Scores (default: all of attention_jax.SCORES).')
  flags.DEFINE_list('decoders', None, 'Decoders (default: bahdanau,luong,transformer; the '
                    "transformer's score is its cross-attention's).")
  flags.DEFINE_string('out', 'benchmark.json', 'Where the JSON results go.')
  flags.DEFINE_integer('windows', None, 'Timed train windows (default 5; quick 2).')
  flags.DEFINE_integer('steps', None, 'Train steps per timed window (default 1).')
  flags.DEFINE_bool('peer', False, 'Also train OpenNMT-py (--peer_venv) on the same data.')
  flags.DEFINE_string('peer_venv', os.environ.get('ONMT_VENV', ''),
                      'A venv with OpenNMT-py installed (default: $ONMT_VENV).')
  flags.DEFINE_integer('peer_steps', 40, 'OpenNMT-py train steps (--peer).')
  flags.DEFINE_integer('warmup', None, 'Untimed train steps after compiling (default 1).')
  flags.DEFINE_integer('decode_windows', None, 'Timed decoding calls (default 3; quick 1).')
  flags.DEFINE_integer('batch', 0, 'Sentences per batch, ours and the peer\'s (0: each '
                       'config\'s own: char and base 64).')
  flags.DEFINE_bool('input_feeding', True, 'Luong decoders with input feeding (ours and '
                    'OpenNMT-py\'s); --noinput_feeding: the attention runs after the RNN, '
                    'batched over time.')


FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  default = QUICK_SELECTION if FLAGS.quick else {
      'configs': ['char', 'base'], 'scores': sorted(SCORES), 'decoders': ARCHITECTURES}
  settings = QUICK if FLAGS.quick else Settings()
  settings = dataclasses.replace(
      settings, windows=FLAGS.windows or settings.windows, steps=FLAGS.steps or settings.steps,
      warmup=FLAGS.warmup or settings.warmup,
      decode_windows=FLAGS.decode_windows or settings.decode_windows,
      batch=FLAGS.batch or None, input_feeding=FLAGS.input_feeding)
  if FLAGS.peer and not FLAGS.peer_venv:
    raise app.UsageError('--peer needs --peer_venv=DIR (or $ONMT_VENV), a venv with '
                         'OpenNMT-py; see the docstring of experiments/benchmark.py')
  def save(out):
    tmp = FLAGS.out + '.tmp'
    with open(tmp, 'w') as f:
      json.dump(out, f, indent=2)
    os.replace(tmp, FLAGS.out)

  out = run(FLAGS.configs or default['configs'], FLAGS.scores or default['scores'],
            FLAGS.decoders or default['decoders'], settings,
            peer_venv=FLAGS.peer_venv if FLAGS.peer else None, peer_steps=FLAGS.peer_steps,
            save=save)
  save(out)
  print(format_table(out))
  print(f'results: {FLAGS.out}')


if __name__ == '__main__':
  define_flags()
  cli.run(main)
