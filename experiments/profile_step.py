"""Where one train step's (or decoding call's) time goes, operation by operation (a
jax.profiler trace).

  bash launch.sh profile --config=char --score=general --decoder=luong
  taskset -c 0 bash launch.sh profile --config=char --score=general --decoder=luong   # one core
  bash launch.sh profile --config=char --score=general --decoder=luong --noinput_feeding --top=40
  bash launch.sh profile --config=char --score=scaled_dot --decoder=transformer --what=beam5

The step is the benchmark's (experiments/benchmark.py: same synthetic batch, model and
optimizer; --what=greedy|beam5: its decoding of that batch, EOS suppressed). It is compiled,
warmed up, timed, then traced for --steps calls; the trace's
per-operation events are summed and matched to the compiled HLO, which gives each one's
output shape and the JAX operation it came from. Printed: the step time, the time inside
each `while` loop (a `lax.scan`: the decoder's and encoder's time loops, forward and
backward), the share of matrix products, and the top operations with how often each runs per
step (72 = once per time step of a `char` sentence). Tested on the CPU, where every XLA
thunk is a trace event.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import tempfile
from typing import Any

import jax
from absl import flags

from attention_jax.training import train
from experiments import benchmark
from experiments import cli
from experiments.bench import op_categories, peer
from experiments.bench.measure import median_window

# `%name = shape opcode(operands), ..., metadata={op_name="..."}`; a shape may be a tuple
_HLO_LINE = re.compile(r'^\s*(?:ROOT )?%?([\w.-]+) = (\([^\n]*?\)|\S+) ([\w-]+)\('
                       r'(?:[^\n]*?op_name="([^"]*)")?', re.M)


def hlo_index(hlo_text: str) -> dict[str, dict[str, str]]:
  """HLO instruction name -> its output shape, opcode and JAX op_name (metadata)."""
  return {m.group(1): {'shape': m.group(2), 'opcode': m.group(3), 'op_name': m.group(4) or ''}
          for m in _HLO_LINE.finditer(hlo_text)}


def trace_events(trace_dir: str) -> list[dict[str, Any]]:
  """The complete ('X') events of the perfetto trace jax.profiler wrote under trace_dir."""
  (path,) = glob.glob(f'{trace_dir}/**/perfetto_trace.json.gz', recursive=True)
  with gzip.open(path) as f:
    data = json.load(f)
  events = data['traceEvents'] if isinstance(data, dict) else data
  return [e for e in events if e.get('ph') == 'X']


def summarize(events: list[dict], hlo: dict[str, dict], steps: int) -> dict[str, Any]:
  """Per HLO operation: milliseconds and executions per call (step). Events that are not HLO
  instructions (Python frames, the executor's own spans) are left out."""
  total, count = collections.Counter(), collections.Counter()
  for e in events:
    if e['name'] in hlo:
      total[e['name']] += e.get('dur', 0) / 1e3 / steps
      count[e['name']] += 1
  ops = [{'name': n, 'ms': total[n], 'per_step': count[n] / steps, **hlo[n]}
         for n in total]
  ops.sort(key=lambda o: -o['ms'])
  loops = [o for o in ops if o['opcode'] == 'while']
  leaves = [o for o in ops if o['opcode'] != 'while']
  def is_matmul(o):
    return o['opcode'] == 'dot' or o['op_name'].endswith('dot_general')
  return {'loops': loops, 'ops': leaves,
          'leaf_ms': sum(o['ms'] for o in leaves),
          'in_loop_ms': sum(o['ms'] for o in leaves if o['per_step'] > 1),
          'matmul_ms': sum(o['ms'] for o in leaves if is_matmul(o))}


WHAT = ('train', 'greedy', 'beam5')


def profile(config: str, score: str, decoder: str, steps: int = 5,
            settings: benchmark.Settings = benchmark.Settings(),
            what: str = 'train') -> dict[str, Any]:
  """Compiles, times and traces `what` of the benchmark's (config, score, decoder): its
  train step, or greedy / beam-5 decoding of one batch (EOS suppressed, as there)."""
  shape = settings.shape(config)
  cfg, graphdef, state, batch = benchmark.variant(shape, score, decoder, settings)
  batch = jax.device_put(batch)
  if what == 'train':
    compiled = train.Compiled.of(graphdef, cfg).train.lower(state, batch).compile()

    def run():
      nonlocal state
      state, _ = compiled(state, batch)
      return state
  else:
    params = benchmark.suppress_eos(state['params'])
    fn = benchmark.decoders(graphdef, shape.padded)[what]
    compiled = jax.jit(fn).lower(params, batch['src']).compile()
    run = lambda: compiled(params, batch['src'])
  for _ in range(max(settings.warmup, 1)):
    jax.block_until_ready(run())
  step_s, _ = median_window(run, 3, steps)
  with tempfile.TemporaryDirectory(prefix='profile_step_') as tmp:
    with jax.profiler.trace(tmp, create_perfetto_trace=True):
      traced_s, _ = median_window(run, 1, steps)
    events = trace_events(tmp)
  return {'what': what, 'config': config, 'score': score, 'decoder': decoder,
          'batch': shape.batch, 'input_feeding': settings.input_feeding,
          'step_ms': step_s * 1e3, 'traced_ms': traced_s * 1e3,
          'devices': str(jax.devices()), **summarize(events, hlo_index(compiled.as_text()), steps)}


def report(p: dict[str, Any], top: int = 30) -> str:
  lines = [f'{p["what"]}: {p["config"]} {p["score"]}/{p["decoder"]}, batch {p["batch"]}'
           f'{"" if p["input_feeding"] else ", no input feeding"}, {p["devices"]}: '
           f'{p["step_ms"]:.1f} ms per call (untraced); traced operations '
           f'{p["leaf_ms"]:.1f} ms per call, {p["in_loop_ms"]:.1f} of it inside loops, '
           f'{p["matmul_ms"]:.1f} in matrix products']
  lines.append('loops (lax.scan / while, the time of their whole body): ' + ', '.join(
      f'{o["name"]} {o["ms"]:.1f} ms' for o in p['loops'] if o['ms'] >= 0.5))
  lines.append('| ms/step | share | runs/step | operation | output | from (JAX op) |')
  lines.append('|---|---|---|---|---|---|')
  for o in p['ops'][:top]:
    lines.append(f'| {o["ms"]:.2f} | {o["ms"] / p["leaf_ms"]:.1%} | {o["per_step"]:g} | '
                 f'{o["name"]} | {o["shape"]} | {o["op_name"][-70:]} |')
  return '\n'.join(lines)


def peer_report(p: dict[str, Any], top: int = 30) -> str:
  """OpenNMT-py's profile (peer.peer_profile): the top aten operations by self time."""
  total = sum(o['ms'] for o in p['ops'])
  lines = [f'OpenNMT-py {p["arch"]} ({p["score"]}) {p["what"]}: {p["wall_ms"]:.1f} ms per '
           f'call under the profiler, {total:.1f} of it inside operations (self time)',
           '| ms/call | share | runs/call | operation | kind |', '|---|---|---|---|---|']
  for o in p['ops'][:top]:
    lines.append(f'| {o["ms"]:.2f} | {o["ms"] / max(total, 1e-9):.1%} | {o["per_call"]:g} | '
                 f'{o["name"]} | {op_categories.peer_category(o["name"])} |')
  return '\n'.join(lines)


def define_flags():
  flags.DEFINE_string('config', 'char', f'Benchmark config: {", ".join(benchmark.CONFIGS)}.')
  flags.DEFINE_string('score', 'general', 'Score (the Transformer\'s cross-attention\'s).')
  flags.DEFINE_string('decoder', 'luong', f'One of {", ".join(benchmark.ARCHITECTURES)}.')
  flags.DEFINE_enum('what', 'train', WHAT, 'The train step, or greedy / beam-5 decoding '
                    'of one batch.')
  flags.DEFINE_integer('steps', 5, 'Calls traced (and per timed window).')
  flags.DEFINE_integer('batch', 0, 'Sentences per batch (0: the config\'s).')
  flags.DEFINE_bool('input_feeding', True, 'Luong decoder with input feeding.')
  flags.DEFINE_integer('top', 30, 'Operations listed.')
  flags.DEFINE_string('out', '', 'Also write the profile as JSON here.')
  flags.DEFINE_string('peer_venv', '', 'Also profile OpenNMT-py (a venv with it, as for '
                      'bench --peer) on the same sentences with torch.profiler, and print '
                      'where the time goes by kind of work, ours beside its '
                      '(experiments/bench/op_categories.py). --what=train or beam5; run it '
                      'under `taskset -c 0` for one core each (the peer runs on 1 thread).')


FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise ValueError(f'unexpected arguments: {argv[1:]}')
  for name, valid in ((FLAGS.config, benchmark.CONFIGS), (FLAGS.score, benchmark.SCORES),
                      (FLAGS.decoder, benchmark.ARCHITECTURES)):
    if name not in valid:
      raise ValueError(f'unknown name {name!r}; valid: {", ".join(sorted(valid))}')
  settings = benchmark.Settings(batch=FLAGS.batch or None, input_feeding=FLAGS.input_feeding)
  if FLAGS.peer_venv and FLAGS.what == 'greedy':
    raise ValueError('--peer_venv profiles --what=train or beam5, not greedy')
  p = profile(FLAGS.config, FLAGS.score, FLAGS.decoder, FLAGS.steps, settings, FLAGS.what)
  print(report(p, FLAGS.top))
  if FLAGS.peer_venv:
    shape = settings.shape(FLAGS.config)
    with tempfile.TemporaryDirectory(prefix='peer_profile_') as tmp:
      # the calling process's CPUs (taskset), as ours ran on them
      p['peer'] = peer.peer_profile(FLAGS.peer_venv, shape, FLAGS.score,
                                    benchmark.peer_arch(FLAGS.decoder), FLAGS.what, tmp,
                                    calls=FLAGS.steps, seed=settings.seed,
                                    input_feeding=FLAGS.input_feeding, cpus=None)
    print(peer_report(p['peer'], FLAGS.top))
    print(op_categories.table(op_categories.ours_by_category(p),
                              op_categories.peer_by_category(p['peer'])))
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      json.dump(p, f, indent=2)


if __name__ == '__main__':
  define_flags()
  cli.run(main)
