"""OpenNMT-py's time per PyTorch operation (torch.profiler), for experiments/profile_step.py's
--peer: run by the peer venv's Python (it imports torch and onmt, never attention_jax).

  python peer_profile.py train OUT.json CALLS -config config.yaml
  python peer_profile.py translate OUT.json CALLS -model m.pt -src s.txt ... (onmt_translate's)

train: onmt_train with its config; the profiler records the last CALLS of its train steps
(`Trainer._gradient_accumulation`: forward, loss, backward and the optimizer step), the first
ones untimed (warm-up). translate: the file translated once untimed, then CALLS times under the
profiler. OUT.json: the wall milliseconds per call, and per aten operation its self CPU
milliseconds per call and its calls per call (self time: the operation's own, without the
operations it calls), sorted by time.
"""

from __future__ import annotations

import json
import sys
import time


def _ops(prof, calls: int) -> list[dict]:
  """Per operation: self CPU ms per call, and how often it runs per call."""
  rows = [{'name': e.key, 'ms': e.self_cpu_time_total / 1e3 / calls,
           'per_call': e.count / calls} for e in prof.key_averages()
          if e.self_cpu_time_total > 0]
  return sorted(rows, key=lambda r: -r['ms'])


def profile_train(out: str, calls: int, argv: list[str]) -> None:
  import torch
  from onmt import trainer
  from onmt.bin import train as onmt_train

  original = trainer.Trainer._gradient_accumulation
  state = {'n': 0, 'wall': 0.0, 'prof': None}

  def timed(self, *args, **kwargs):
    state['n'] += 1
    if state['n'] == state['first']:
      state['prof'] = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
      state['prof'].start()
    t0 = time.perf_counter()
    result = original(self, *args, **kwargs)
    if state['prof'] is not None:
      state['wall'] += time.perf_counter() - t0
    return result

  with open(argv[argv.index('-config') + 1]) as f:     # peer.train_config's JSON
    steps = json.load(f)['train_steps']
  state['first'] = steps - calls + 1
  trainer.Trainer._gradient_accumulation = timed
  sys.argv = ['onmt_train'] + argv
  onmt_train.main()
  state['prof'].stop()
  _write(out, calls, state['wall'], _ops(state['prof'], calls))


def profile_translate(out: str, calls: int, argv: list[str]) -> None:
  import torch
  from onmt.bin import translate as onmt_translate
  from onmt.inference_engine import InferenceEnginePY
  from onmt.utils.parse import ArgumentParser

  opt = onmt_translate._get_parser().parse_args(argv)
  ArgumentParser.validate_translate_opts(opt)
  ArgumentParser._get_all_transform_translate(opt)
  ArgumentParser._validate_transforms_opts(opt)
  ArgumentParser.validate_translate_opts_dynamic(opt)
  engine = InferenceEnginePY(opt)
  engine.infer_file()                              # warm-up: the first call's allocations
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    t0 = time.perf_counter()
    for _ in range(calls):
      engine.infer_file()
    wall = time.perf_counter() - t0
  engine.terminate()
  _write(out, calls, wall, _ops(prof, calls))


def _write(out: str, calls: int, wall_s: float, ops: list[dict]) -> None:
  with open(out, 'w') as f:
    json.dump({'calls': calls, 'wall_ms': wall_s * 1e3 / calls, 'ops': ops}, f, indent=1)


if __name__ == '__main__':
  what, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
  {'train': profile_train, 'translate': profile_translate}[what](path, n, sys.argv[4:])
