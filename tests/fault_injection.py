"""Fault injection, the random stress test: SIGKILL a training run at random moments, resume
each time, and check that the result equals an uninterrupted run bit for bit (CPU, same seed).

  .venv/bin/python tests/fault_injection.py [--kills 20] [--seed 0] [--keep]

Runs `experiments.main` on `dates:smoke` (200 steps, a checkpoint every 10, validation every
50: helpers.fault_cmd) once straight through, then again with SIGKILL at `--kills` random
moments: each attempt is killed during start-up (1 in 5) or a random 0-1.5 s after it logs a
step 1-12 steps past the one it resumed from, so kills land in training steps, validation
and checkpoint writes. After the kills it lets the run finish and compares results.json
(every metric) and the final train state (parameters, optimiser state, step) with the
uninterrupted run (helpers.differences_from). Minutes: not run by CI, whose
tests/test_fault_injection.py (scenario) kills at chosen moments instead (inside a checkpoint
write, between steps). Exit status 0 when identical.
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
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'tests'))

import helpers  # pylint: disable=wrong-import-position


def command(workdir: str, data_dir: str) -> list[str]:
  return helpers.fault_cmd(workdir, data_dir, steps=200, checkpoint_every=10, eval_every=50)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--kills', type=int, default=20)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--keep', action='store_true', help='keep the temporary workdirs')
  args = ap.parse_args()
  rng = random.Random(args.seed)
  tmp = tempfile.mkdtemp(prefix='fault_injection_')
  data_dir, ref, run = (os.path.join(tmp, n) for n in ('tfds', 'reference', 'killed'))
  env = helpers.fault_env()
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
    early = rng.random() < 0.2                  # during start-up (imports, data, compile)
    delay = rng.uniform(0.3, 6.0) if early else rng.uniform(0.0, 1.5)
    latest = os.path.join(run, 'checkpoints', 'latest')
    resume = max([int(n) for n in os.listdir(latest) if n.isdigit()], default=0) \
        if os.path.isdir(latest) else 0
    target = resume + rng.randint(1, 12)         # a few steps past where it resumes
    proc = subprocess.Popen(command(run, data_dir), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(delay, proc.kill)
    if early:
      timer.start()
    log = []
    for line in proc.stdout:
      log.append(line)
      if not early and not timer.is_alive() and line.startswith('step') and \
          int(line.split()[1].split('/')[0]) >= target:
        timer.start()
    rc = proc.wait()
    timer.cancel()
    if rc == -signal.SIGKILL:
      kills += 1
      last = next((l.split()[1] for l in reversed(log) if l.startswith('step')), 'start-up')
      steps = sorted(int(n) for n in os.listdir(os.path.join(run, 'checkpoints', 'latest'))
                     if n.isdigit()) if os.path.isdir(os.path.join(run, 'checkpoints',
                                                                     'latest')) else []
      print(f'kill {kills:2d}/{args.kills}: last logged step {last}; latest checkpoints '
            f'{steps}', flush=True)
      continue
    if rc != 0:
      print(''.join(log)[-3000:])
      print(f'FAILED: a resumed run exited with status {rc}')
      return 1
    print(f'  attempt {attempts} finished before its kill', flush=True)
    break

  print('final run to completion ...', flush=True)
  done = subprocess.run(command(run, data_dir), cwd=ROOT, env=env, capture_output=True,
                        text=True)   # (a no-op if the last attempt finished the run)
  if done.returncode != 0:
    print(done.stderr[-3000:])
    print(f'FAILED: the final resumed run exited with status {done.returncode}')
    return 1

  diffs = helpers.differences_from(ref, run)
  b = json.load(open(os.path.join(run, 'results.json')))
  print(f'{kills} kills in {attempts} attempts; identical (metrics and every array of the '
        f'final state): {not diffs}{"" if not diffs else " " + str(diffs[:5])}; test exact '
        f'match {b["results"]["test"]["exact_match"]:.2f}; total {time.time() - t0:.0f} s')
  if args.keep:
    print(f'workdirs kept in {tmp}')
  else:
    shutil.rmtree(tmp, ignore_errors=True)
  return 0 if not diffs else 1


if __name__ == '__main__':
  sys.exit(main())
