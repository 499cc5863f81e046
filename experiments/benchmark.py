r"""Speed benchmark: train throughput, achieved FLOP/s, compile time, decoding speed, memory.

  bash launch.sh bench                       every score x both decoders, configs char and base
  bash launch.sh bench --quick               char: general, additive x both RNN decoders; char
                                             and long: the scaled_dot Transformer (~3 min)
  bash launch.sh bench --configs=char --scores=general,dot --decoders=luong --out=/tmp/b.json
  bash launch.sh bench --quick --peer --peer_venv=/tmp/onmt_venv   also OpenNMT-py, same data

Synthetic random-token batches of fixed shapes (no data set): for each (config, score,
decoder) it measures
  compile_s        lowering + XLA compile of the train step (`Compiled.of(...).train`)
  tokens_per_s     real (non-PAD) target tokens per second of train steps: the median of
                   several timed windows after warm-up, each ended by `block_until_ready`
  flops_per_step   counted on the train step's jaxpr: 2·M·N·K per dot, 1 per element of every
                   other op, and a scan's body times its length. (XLA's `cost_analysis()`
                   counts a while/scan loop body once on the CPU, so it undercounts recurrent
                   models by about the sequence length; it is recorded as `xla_cost_flops`.)
  matmul_ratio     achieved FLOP/s / FLOP/s of a 2048x2048 float32 matmul (the machine's
                   practical ceiling), measured right before and after the variant's windows
  greedy / beam5   decoding sentences/s of `attention_jax.decoding.greedy.greedy` and
                   `attention_jax.decoding.beam.beam_search` (beam 5) on a batch of the config's
                   sources,
                   max_len = the padded target length, the median of timed calls after an
                   untimed first one (`first_call_s`). The weights are untrained, and EOS is
                   suppressed, so every sentence takes exactly max_len output steps (a real
                   model stops at its EOS: these are the figures for max_len-token outputs).
  memory           the compiled train step's buffers (`memory_analysis()`: arguments + outputs
                   + temporaries - donated aliases) and the process's peak RSS so far.
and per config `loop_matmul`: the decoder's gate matmul shape in a jitted loop, at the
train step's rows and beam-5's, the best a recurrent step's matmuls reach on the machine.
Results go to stdout as a table and to --out (JSON).

--peer: OpenNMT-py in its own venv, trained on the same synthetic sentences (written as text
files) with the same sizes (its RNN against our RNN rows with a score it has, its Transformer
against our scaled_dot Transformer rows, with its recipe: noam, Adam beta2 0.998, label
smoothing and attention dropout 0.1, which our Transformer rows also use), then its beam-5
translation of the sentences our beam5 decodes
(the same output length); prints our tokens/s and beam-5 sentences/s over theirs at equal
resources, two ways: one core each (this benchmark re-run in a child process pinned to CPU 0
with `taskset`, OpenNMT-py pinned there with 1 thread) and the whole machine each (re-run in a
child process with the cores as JAX devices, JAX_NUM_CPU_DEVICES: the train step data-parallel,
each device decoding its rows; OpenNMT-py with one thread per core; ours as measured above, on
this process's devices, beside it as `ratios_here`); `equal_resources` in the JSON. It is not a
dependency.
`pip install torch==2.13.0 OpenNMT-py==3.5.1` does not resolve (OpenNMT-py 3.5.1 pins
torch<2.3); this installs a venv that runs it:
  python3 -m venv /tmp/onmt_venv && /tmp/onmt_venv/bin/pip install torch==2.13.0
  /tmp/onmt_venv/bin/pip install --no-deps OpenNMT-py==3.5.1
  /tmp/onmt_venv/bin/pip install configargparse pyyaml sacrebleu six rapidfuzz pyahocorasick \
      pyonmttok spacy tensorboard fasttext-wheel flask waitress
  bash launch.sh bench --peer --peer_venv=/tmp/onmt_venv      (or ONMT_VENV=/tmp/onmt_venv)
--batch=N and --noinput_feeding change ours and OpenNMT-py's alike.

This file runs the variants and the equal-resource comparison; its parts are in
experiments/bench/: workload.py (configs, settings, synthetic batches, the experiment config),
measure.py (FLOP counting, timed windows, the matmul ceiling), peer.py (OpenNMT-py) and
report.py (tables, targets). Where one step's time goes: experiments/profile_step.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import jax
from absl import app, flags
from flax import nnx

from attention_jax import devices
from attention_jax.decoding import beam, greedy
from attention_jax.implicit import attribution
from attention_jax.models.scores import SCORES
from attention_jax.training import train
from experiments import cli
from experiments.bench import attribution as bench_attribution
from experiments.bench import end_to_end
from experiments.bench.measure import (compiled_bytes, count_flops, loop_matmul_flops_per_s,
                                       machine_info, matmul_flops_per_s, maxrss_mb,
                                       median_window, pinned, suppress_eos, xla_cost_flops)
from experiments.bench.peer import (ONMT_ATTENTION, ONMT_TRANSFORMER_SCORES,
                                    peer_beam_sentences_per_s, peer_tokens_per_s)
from experiments.bench.report import (COLUMNS, format_loop_matmuls, format_row, format_table,
                                      targets)
from experiments.bench.workload import (ARCHITECTURES, CONFIGS, PAIRS, QUICK, Settings,
                                        Shape, experiment_config, make_batch, sentences)

__all__ = ['ARCHITECTURES', 'CONFIGS', 'ONMT_ATTENTION', 'QUICK', 'SCORES', 'Settings', 'Shape',
           'bench_variant', 'experiment_config', 'format_table', 'make_batch',
           'machine_info', 'peer_beam_sentences_per_s', 'peer_tokens_per_s', 'run',
           'suppress_eos']


def loop_matmuls(shape: Shape) -> dict[str, Any]:
  """The decoder's gate matmul [rows, H + 2 H_enc] x [H + 2 H_enc, 4 H] (LSTM; input fed
  back or context) in a loop, at the train step's rows (batch) and beam-5's (5 x batch)."""
  k, n = shape.dec_hidden + 2 * shape.enc_hidden, 4 * shape.dec_hidden
  return {'k': k, 'n': n, 'train_rows': shape.batch, 'beam_rows': 5 * shape.batch,
          'train_flops_per_s': loop_matmul_flops_per_s(shape.batch, k, n),
          'beam_flops_per_s': loop_matmul_flops_per_s(5 * shape.batch, k, n)}


# ---- one variant ----------------------------------------------------------------------
def decoders(graphdef, max_len: int) -> dict[str, Callable]:
  """The decodings timed: name -> fn(params, src [B, S]) -> tokens [B, max_len]; with several
  devices each decodes its rows of the batch (devices.rows_apart), as inference does."""
  fns = {
      'greedy': lambda p, s: greedy.greedy(nnx.merge(graphdef, p), s, max_len)[0],
      'beam5': lambda p, s: beam.beam_search(nnx.merge(graphdef, p), s, beam_size=5,
                                             max_len=max_len)[0]}
  if jax.local_device_count() > 1:
    mesh = devices.local_mesh(jax.local_devices())
    fns = {k: devices.rows_apart(f, mesh) for k, f in fns.items()}
  return fns


def decode_speed(fn: Callable, params, src: jax.Array, windows: int) -> dict[str, float]:
  """fn(params, src [B, S]) -> tokens [B, L]: compile time, the first call's seconds (it
  also pays one-time costs: buffers first touched, kernels set up; about 0.5 s for the char
  Transformer's beam 5 on one core), and the median seconds of `windows` calls after it."""
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(params, src).compile()
  compile_s = time.perf_counter() - t0
  last = {}

  def call():
    last['tokens'] = compiled(params, src)
    return last['tokens']

  first_s, _ = median_window(call, 1, 1)
  seconds, _ = median_window(call, windows, 1)
  return {'compile_s': compile_s, 'first_call_s': first_s, 'seconds_per_batch': seconds,
          'sentences_per_s': src.shape[0] / seconds, 'output_len': last['tokens'].shape[1]}


def variant(shape: Shape, score: str, decoder: str, settings: Settings):
  """One (shape, score, decoder) ready to run: (experiment config, graphdef, fresh train
  state, the synthetic batch as NumPy arrays)."""
  cfg = experiment_config(shape, score, decoder, settings.seed, settings.input_feeding)
  mcfg = train.model_config(cfg, shape.vocab, shape.vocab)
  graphdef, state = train.init_state(mcfg, train.make_optimizer(cfg.train), cfg.seed)
  return cfg, graphdef, state, make_batch(shape, settings.seed)


def bench_variant(shape: Shape, score: str, decoder: str, settings: Settings) -> dict[str, Any]:
  """Every measurement of one (shape, score, decoder)."""
  cfg, graphdef, state, batch_np = variant(shape, score, decoder, settings)
  batch = jax.device_put(batch_np)
  tokens = int((batch_np['tgt_out'] != 0).sum())
  steps = train.Compiled.of(graphdef, cfg)

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
  before = matmul_flops_per_s(settings.matmul_n, windows=3)
  step_s, windows = median_window(one_step, settings.windows, settings.steps)
  matmul = statistics.mean([before, matmul_flops_per_s(settings.matmul_n, windows=3)])
  params = box['state']['params']

  # untrained weights emit EOS at random, which would make decoding lengths (and speeds)
  # differ by chance: with EOS suppressed every variant decodes exactly max_len tokens
  params = suppress_eos(params)
  src, max_len = batch['src'], shape.padded
  decoding = {name: decode_speed(fn, params, src, settings.decode_windows)
              for name, fn in decoders(graphdef, max_len).items()}

  flops = dot + other
  return {
      'score': score, 'decoder': decoder, 'batch': shape.batch,
      'devices': jax.device_count(),
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


# ---- equal resources ---------------------------------------------------------------------
def cpu_devices(cores: int, batches: Sequence[int]) -> int:
  """The CPU devices ours runs on with `cores` cores: the most, up to one per core, that
  divide every batch (data parallelism splits each batch evenly)."""
  return max(d for d in range(1, cores + 1) if all(b % d == 0 for b in batches))


def ours_in_child(configs: Sequence[str], scores: Sequence[str], decoders: Sequence[str],
                  settings: Settings, cpus: str | None = None,
                  devices: int = 1) -> list[dict[str, Any]]:
  """Our result rows measured by this script in a child process, pinned to `cpus`
  (`taskset -c 0`: XLA sizes its thread pool to the one CPU it may use) and with the CPU
  split into `devices` JAX devices (JAX_NUM_CPU_DEVICES): the train step data-parallel under
  shard_map, decoding each device's rows of the batch."""
  with tempfile.TemporaryDirectory(prefix='bench_child_') as tmp:
    path = os.path.join(tmp, 'child.json')
    cmd = pinned([sys.executable, '-m', 'experiments.benchmark',
                   f'--configs={",".join(configs)}', f'--scores={",".join(scores)}',
                   f'--decoders={",".join(decoders)}', f'--windows={settings.windows}',
                   f'--steps={settings.steps}', f'--warmup={settings.warmup}',
                   f'--decode_windows={settings.decode_windows}',
                   f'--batch={settings.batch or 0}',
                   f'--input_feeding={settings.input_feeding}', f'--pairs={settings.pairs}',
                   f'--matmul_n={settings.matmul_n}', f'--out={path}'], cpus)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, 'JAX_NUM_CPU_DEVICES': str(devices)}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, check=False)
    if proc.returncode:
      raise RuntimeError(f'the benchmark on {devices} CPU device(s), CPUs {cpus or "all"}, '
                         f'failed (exit {proc.returncode}):\n' + proc.stderr[-3000:])
    with open(path) as f:
      return json.load(f)['results']


def peer_arch(decoder: str) -> str:
  """The OpenNMT-py model compared with our `decoder`: its Transformer, or its RNN."""
  return 'transformer' if decoder == 'transformer' else 'rnn'


def peer_runs(ours: list[dict]) -> list[tuple[str, str, str]]:
  """The (config, arch, score) OpenNMT-py trains for our result rows: its RNN for each of our
  RNN rows' scores it has (ONMT_ATTENTION), its Transformer for our scaled_dot Transformer."""
  runs = []
  for r in ours:
    arch = peer_arch(r['decoder'])
    if r['score'] in (ONMT_TRANSFORMER_SCORES if arch == 'transformer' else ONMT_ATTENTION):
      if (r['config'], arch, r['score']) not in runs:
        runs.append((r['config'], arch, r['score']))
  return runs


def equal_resource_ratios(ours: list[dict], peers: list[dict]) -> list[dict[str, Any]]:
  """Per (config, score, decoder): our train tokens/s and beam-5 sentences/s over those of
  OpenNMT-py's model of the same kind (peer_arch) on the same config."""
  by_key = {(p['config'], p['arch'], p['score']): p for p in peers}
  out = []
  for r in ours:
    p = by_key.get((r['config'], peer_arch(r['decoder']), r['score']))
    if p is not None:
      out.append({'config': r['config'], 'score': r['score'], 'decoder': r['decoder'],
                  'peer_arch': p['arch'],
                  'train_ratio': r['tokens_per_s'] / p['tokens_per_s'],
                  'beam5_ratio': r['beam5']['sentences_per_s']
                  / p['beam5']['sentences_per_s']})
  return out


# ---- the run ------------------------------------------------------------------------------
# the peer comparisons at equal resources: one core each (both pinned to CPU 0), and every core
PEER_SETTINGS = ('one_core', 'all_cores')


def run(configs: Sequence[str], scores: Sequence[str], decoders: Sequence[str],
        settings: Settings = Settings(), peer_venv: str | None = None, peer_steps: int = 40,
        peer_settings: Sequence[str] = PEER_SETTINGS, log: Callable[[str], None] = print,
        save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
  """Benchmarks every (config, score, decoder); -> the JSON-able results. `save` is called
  with the results so far after each variant (a long run keeps what it measured).
  peer_settings: which of PEER_SETTINGS the peer comparison runs (with peer_venv)."""
  for names, valid, what in ((configs, CONFIGS, 'config'), (scores, SCORES, 'score'),
                             (decoders, ARCHITECTURES, 'decoder')):
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
      raise ValueError(f'unknown or no {what}(s) {unknown}; valid: {", ".join(sorted(valid))}')
  unknown = [x for x in peer_settings if x not in PEER_SETTINGS]
  if unknown or not peer_settings:
    raise ValueError(f'unknown or no peer setting(s) {unknown}; valid: {", ".join(PEER_SETTINGS)}')
  t_start = time.perf_counter()
  out = {'created': datetime.datetime.now().isoformat(timespec='seconds'),
         'machine': machine_info(), 'load_average_start': os.getloadavg(),
         'settings': dataclasses.asdict(settings), 'configs': {}, 'results': []}
  matmul = [matmul_flops_per_s(settings.matmul_n)]
  n = settings.matmul_n
  log(f'{n}x{n} float32 matmul: {matmul[0] / 1e9:.1f} GFLOP/s; load average '
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
        if not PAIRS[settings.pairs](name, decoder, score):
          continue
        r = bench_variant(shape, score, decoder, settings)
        r['config'] = name
        out['results'].append(r)
        log(format_row(r))
        if save:
          save(out)
  matmul.append(matmul_flops_per_s(settings.matmul_n))
  out['matmul'] = {'n': settings.matmul_n, 'flops_per_s': matmul[0], 'flops_per_s_end': matmul[1]}
  if peer_venv:
    # equal resources, two ways: one core each (ours pinned in a child process, OpenNMT-py
    # pinned with 1 thread), and the whole machine each (ours in a child process with the
    # cores as JAX devices, OpenNMT-py with a thread per core; ours as measured above, on
    # this process's devices, beside it); OpenNMT-py's RNN against our RNN rows, its
    # Transformer against ours
    cores = len(os.sched_getaffinity(0))
    devices = cpu_devices(cores, [settings.shape(c).batch for c in configs])
    out['equal_resources'] = {}
    with tempfile.TemporaryDirectory(prefix='onmt_bench_') as tmp:
      for setting, cpus, threads in (('one_core', '0', 1), ('all_cores', None, cores)):
        if setting not in peer_settings:
          continue
        if setting == 'one_core':
          log('one core: this benchmark again, pinned to CPU 0 ...')
          ours = ours_in_child(configs, scores, decoders, settings, cpus='0')
        else:
          log(f'all cores: this benchmark again, on {devices} CPU devices ...')
          ours = ours_in_child(configs, scores, decoders, settings, devices=devices)
        peers = []
        for config, arch, score in peer_runs(ours):
          shape = settings.shape(config)
          work = os.path.join(tmp, f'{setting}_{config}_{arch}_{score}')
          log(f'{setting}: OpenNMT-py {arch} ({score}) on {config} ...')
          p = peer_tokens_per_s(peer_venv, shape, score, peer_steps, settings.seed, work,
                                threads, cpus, settings.input_feeding, arch=arch)
          p.update(score=score, config=config)
          # the sentences our beam5 decodes (make_batch(shape, seed)'s sources)
          p['beam5'] = peer_beam_sentences_per_s(
              peer_venv, p.pop('checkpoint'), sentences(shape, settings.seed)[0],
              shape.padded, work, threads, cpus=cpus)
          peers.append(p)
        summary = lambda rows: [
            {k: r[k] for k in ('config', 'score', 'decoder', 'batch', 'input_feeding',
                               'tokens_per_s', 'matmul_ratio', 'devices')}
            | {'beam5_sentences_per_s': r['beam5']['sentences_per_s']} for r in rows]
        ratios = equal_resource_ratios(ours, peers)
        out['equal_resources'][setting] = {
            'cores': 1 if cpus else cores, 'peer_threads': threads,
            'devices': 1 if cpus else devices, 'input_feeding': settings.input_feeding,
            'batch': {c: settings.shape(c).batch for c in configs},
            'ours': summary(ours), 'peer': peers, 'ratios': ratios}
        if not cpus:   # the whole machine as this process's devices (one, unless set)
          out['equal_resources'][setting].update(
              ours_here=summary(out['results']),
              ratios_here=equal_resource_ratios(out['results'], peers))
        for x in ratios:
          log(f'{setting}: {x["config"]} {x["score"]}/{x["decoder"]} ours / OpenNMT-py '
              f'{x["peer_arch"]}: train {x["train_ratio"]:.2f}x, beam-5 '
              f'{x["beam5_ratio"]:.2f}x')
    # issue 9's targets compare with OpenNMT-py's RNN on 1 thread (ours: every core)
    out['peer'] = [p for p in out['equal_resources'].get('one_core', {}).get('peer', [])
                   if p['arch'] == 'rnn']
  out['targets'] = targets(out)
  out['load_average_end'] = os.getloadavg()
  out['total_s'] = time.perf_counter() - t_start
  return out


# ---- command line ---------------------------------------------------------------------------
# with QUICK's pairs: the RNNs on char (general, additive), the Transformer (scaled_dot) on
# char and long
QUICK_SELECTION = {'configs': ['char', 'long'], 'scores': ['general', 'additive', 'scaled_dot'],
                   'decoders': ['bahdanau', 'luong', 'transformer']}

def define_flags():
  """The command line's flags (defined when run as a script, so that other entry points
  can import this module and define their own)."""
  flags.DEFINE_bool('quick', False, 'A quick subset (char: general, additive x both RNN '
                    'decoders; char and long: the scaled_dot Transformer; short windows); '
                    '--configs/--scores/--decoders still override it.')
  flags.DEFINE_enum('pairs', None, list(PAIRS), 'Which (config, decoder, score) of the '
                    'selection run (default: all; quick with --quick).')
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
  flags.DEFINE_list('peer_settings', list(PEER_SETTINGS), '--peer: which equal-resource '
                    f'comparisons run. Valid: {", ".join(PEER_SETTINGS)}.')
  flags.DEFINE_integer('warmup', None, 'Untimed train steps after compiling (default 1).')
  flags.DEFINE_integer('decode_windows', None, 'Timed decoding calls (default 3; quick 1).')
  flags.DEFINE_integer('batch', 0, 'Sentences per batch, ours and the peer\'s (0: each '
                       'config\'s own: char and base 64).')
  flags.DEFINE_integer('matmul_n', Settings.matmul_n, 'Size n of the n x n float32 matmul '
                       'whose FLOP/s is the ceiling the ratios are taken against.', lower_bound=1)
  flags.DEFINE_list('attribution', None, 'Instead of the train and decode rows: the speed of '
                    'these attribution methods (e.g. gradient,integrated_gradients; "all") on '
                    'reverse-sized sentences (experiments/bench/attribution.py).')
  flags.DEFINE_integer('attribution_steps', attribution.Options.steps, '--attribution: '
                       "integrated gradients' steps (the refine rule: the most it may use).",
                       lower_bound=1)
  flags.DEFINE_enum('attribution_rule', attribution.Options.rule, attribution.RULES,
                    "--attribution: integrated gradients' quadrature rule.")
  flags.DEFINE_float('attribution_tol', attribution.Options.tol, '--attribution: the refine '
                     "rule's completeness error, a share of the largest output change.")
  flags.DEFINE_string('attribution_run', None, '--attribution: a trained reverse run whose '
                      'parameters are timed (default: untrained ones).')
  flags.DEFINE_bool('end_to_end', False, 'Instead of the train and decode rows: fresh '
                    'processes translating a file, start to exit, cold and warm compilation '
                    'cache, with --peer against onmt_translate (experiments/bench/end_to_end.py).')
  flags.DEFINE_integer('e2e_sentences', 2000, '--end_to_end: lines in the file.', lower_bound=1)
  flags.DEFINE_list('e2e_archs', sorted(end_to_end.ARCHS), '--end_to_end: our models.')
  flags.DEFINE_list('e2e_beams', ['1', '5'], '--end_to_end: beam sizes (1 = greedy).')
  flags.DEFINE_list('e2e_cores', ['1', '2'], '--end_to_end: 1 (pinned to CPU 0) and/or all '
                    'cores.')
  flags.DEFINE_bool('e2e_noahead', False, '--end_to_end: also a cold process of ours that '
                    'compiles each shape on first use, not ahead in a background thread.')
  flags.DEFINE_integer('e2e_devices', 0, '--end_to_end: our processes see the CPU as this '
                       'many devices (JAX_NUM_CPU_DEVICES; each chunk\'s rows split among '
                       'them); 0: as translate does, one per core.', lower_bound=0)
  flags.DEFINE_integer('e2e_repeats', 1, '--end_to_end: interleaved rounds of ours cold, '
                       'ours warm and OpenNMT-py\'s per row; the row gives their medians and '
                       'every round.', lower_bound=1)
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
      batch=FLAGS.batch or None, input_feeding=FLAGS.input_feeding, matmul_n=FLAGS.matmul_n,
      pairs=FLAGS.pairs or settings.pairs)
  if FLAGS.peer and not FLAGS.peer_venv:
    raise app.UsageError('--peer needs --peer_venv=DIR (or $ONMT_VENV), a venv with '
                         'OpenNMT-py; see the docstring of experiments/benchmark.py')
  cli.check_output(FLAGS.out)   # before any work (it used to fail after the whole run)
  def save(out):
    tmp = FLAGS.out + '.tmp'
    with open(tmp, 'w') as f:
      json.dump(out, f, indent=2)
    os.replace(tmp, FLAGS.out)

  if FLAGS.end_to_end:
    machine = machine_info()
    end_to_end.compare(FLAGS.e2e_archs, [int(b) for b in FLAGS.e2e_beams],
                       [int(c) for c in FLAGS.e2e_cores], FLAGS.e2e_sentences,
                       FLAGS.peer_venv if FLAGS.peer else None,
                       saved=lambda rows: save({'machine': machine, 'end_to_end': rows}),
                       noahead=FLAGS.e2e_noahead, devices=FLAGS.e2e_devices,
                       repeats=FLAGS.e2e_repeats)
    print(f'results: {FLAGS.out}')
    return
  if FLAGS.attribution:
    methods = (attribution.names('tokens') if FLAGS.attribution == ['all']
               else FLAGS.attribution)
    for m in methods:
      attribution.check(m, 'tokens')
    opts = attribution.Options(steps=FLAGS.attribution_steps, rule=FLAGS.attribution_rule,
                               tol=FLAGS.attribution_tol)
    rows = bench_attribution.rows(methods, options=opts, run=FLAGS.attribution_run)
    save({'machine': machine_info(), 'attribution': rows})
    print(bench_attribution.format_rows(rows))
    print(f'results: {FLAGS.out}')
    return
  out = run(FLAGS.configs or default['configs'], FLAGS.scores or default['scores'],
            FLAGS.decoders or default['decoders'], settings,
            peer_venv=FLAGS.peer_venv if FLAGS.peer else None, peer_steps=FLAGS.peer_steps,
            peer_settings=FLAGS.peer_settings, save=save)
  save(out)
  print(format_table(out))
  print(f'results: {FLAGS.out}')


if __name__ == '__main__':
  define_flags()
  cli.run(main)
