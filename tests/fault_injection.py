"""Fault injection: SIGKILL a training run at random moments, resume each time, and check
that the result equals an uninterrupted run bit for bit (CPU, same seed).

  .venv/bin/python tests/fault_injection.py [--kills 20] [--seed 0] [--keep]

Runs `experiments.main` on `dates:smoke` (200 steps, a checkpoint every 10, validation every
50) once straight through, then again with SIGKILL at `--kills` random moments: during
start-up, training steps, validation, checkpoint writes or the final evaluation. After the
kills it lets the run finish and compares results.json (every metric) and the final train
state (parameters, optimiser state, step) with the uninterrupted run. Not part of
`bash launch.sh test` (it takes minutes); exit status 0 when identical.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def command(workdir: str, data_dir: str) -> list[str]:
  return [sys.executable, '-m', 'experiments.main', '--config=experiments/configs/dates.py:smoke',
          f'--config.data.data_dir={data_dir}', '--config.train.steps=200',
          '--config.train.checkpoint_every=10', '--config.train.eval_every=50',
          '--config.train.log_every=10', '--config.train.keep_checkpoints=2',
          f'--workdir={workdir}']


def final_state(workdir: str):
  import jax
  import attention_jax as aj
  from attention_jax import checkpoint as ckpt_lib, train
  from experiments.configs import dates
  mc = aj.ModelConfig.from_dict(json.load(open(os.path.join(workdir, 'model_config.json'))))
  template = train.init_state(mc, train.make_optimizer(dates.get_config('smoke').train), 0)[1]
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  try:
    state = ckpt_lib.restore(ckpts.latest, ckpts.latest.latest_step(), template)[0]
  finally:
    ckpts.close()
  return jax.tree_util.tree_flatten_with_path(state)[0]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--kills', type=int, default=20)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--keep', action='store_true', help='keep the temporary workdirs')
  args = ap.parse_args()
  rng = random.Random(args.seed)
  tmp = tempfile.mkdtemp(prefix='fault_injection_')
  data_dir, ref, run = (os.path.join(tmp, n) for n in ('tfds', 'reference', 'killed'))
  env = {**os.environ, 'PYTHONUNBUFFERED': '1'}
  t0 = time.time()

  print('uninterrupted reference run ...', flush=True)
  t_ref = time.time()
  subprocess.run(command(ref, data_dir), cwd=ROOT, env=env, check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  duration = time.time() - t_ref
  print(f'  {duration:.1f} s', flush=True)

  kills = attempts = 0
  while kills < args.kills:
    attempts += 1
    delay = rng.uniform(0.3, duration)
    proc = subprocess.Popen(command(run, data_dir), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
      rc = proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
      kills += 1
      steps = sorted(int(n) for n in os.listdir(os.path.join(run, 'checkpoints', 'latest'))
                     if n.isdigit()) if os.path.isdir(os.path.join(run, 'checkpoints',
                                                                     'latest')) else []
      print(f'kill {kills:2d}/{args.kills} after {delay:5.1f} s; latest checkpoints {steps}',
            flush=True)
      continue
    if rc != 0:
      print(proc.stderr.read()[-3000:])
      print(f'FAILED: a resumed run exited with status {rc}')
      return 1
    print(f'  the run finished before its kill (attempt {attempts}); starting over so that '
          f'all {args.kills} kills hit a running job', flush=True)
    shutil.rmtree(run)

  print('final run to completion ...', flush=True)
  done = subprocess.run(command(run, data_dir), cwd=ROOT, env=env, capture_output=True,
                        text=True)
  if done.returncode != 0:
    print(done.stderr[-3000:])
    print(f'FAILED: the final resumed run exited with status {done.returncode}')
    return 1

  a = json.load(open(os.path.join(ref, 'results.json')))
  b = json.load(open(os.path.join(run, 'results.json')))
  same_metrics = a['results'] == b['results'] and a['best_step'] == b['best_step']
  sa, sb = final_state(ref), final_state(run)
  import numpy as np
  same_state = len(sa) == len(sb) and all(
      pa == pb and np.array_equal(np.asarray(xa), np.asarray(xb))
      for (pa, xa), (pb, xb) in zip(sa, sb))
  print(f'{kills} kills in {attempts} attempts; metrics identical: {same_metrics}; final '
        f'state ({len(sa)} arrays) bit-identical: {same_state}; test exact match '
        f'{b["results"]["test"]["exact_match"]:.2f}; total {time.time() - t0:.0f} s')
  if args.keep:
    print(f'workdirs kept in {tmp}')
  else:
    shutil.rmtree(tmp, ignore_errors=True)
  return 0 if same_metrics and same_state else 1


if __name__ == '__main__':
  sys.exit(main())
