"""Fault injection: SIGKILL a training run at random moments, resume each time, and check that
the result equals an uninterrupted run bit for bit (CPU, same seed).

  .venv/bin/python tests/fault_injection.py [--kills 20] [--seed 0] [--steps 200] [--keep]

Runs `experiments.main` on `dates:smoke` (helpers.fault_cmd: a checkpoint every 5 steps, a
validation and maybe a best checkpoint every 15 of 30 by default; --steps 200: every 10, 50)
once straight through, then again with SIGKILL `--kills` times. Each kill is drawn from the
seed (and printed) before its attempt starts, a few steps past the step the attempt resumes
from: every other one inside a checkpoint write (hold point 'checkpoint_save': the step written
to Orbax's temporary directory, not yet committed, of the latest or of the best checkpoint),
the others at a random moment: a random fraction of one training step's time after the
attempt logs its target step (inside the next step, its log, a validation or a save; a step's
time, not seconds, so a fast machine lands them where a slow one does), never past the last
checkpoint step but one (or, past it, the last step but one), so the next even kill still has a
write to land in; a run trained to its last step is killed in its final evaluation (hold point
'final_evaluation'). After the kills it lets the run finish and checks that no attempt ever took
an unreadable step for a checkpoint (no `skipped unreadable checkpoint`, no checkpoints/corrupt/:
a killed write is never committed), and compares results.json (every metric) and the final
train state (parameters, optimiser state, step) with the uninterrupted run
(helpers.differences_from). Exit status 0 when identical. CI runs it with 6 kills
(tests/test_fault_injection.py, the scenario tier).
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
sys.path.insert(0, os.path.join(ROOT, 'tests'))

import helpers  # pylint: disable=wrong-import-position


def latest_steps(workdir: str, which: str = 'latest') -> list[int]:
  d = os.path.join(workdir, 'checkpoints', which)
  return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def plan_kill(seed: int, k: int, resume: int, steps: int, checkpoint_every: int,
              eval_every: int, best_steps: tuple[int, ...] = ()) -> dict:
  """Kill k (0, 1, ...), a few steps past `resume`, drawn from (seed, k): the even ones
  {'at': 'checkpoint_save', 'step', 'checkpoints'} (held inside that checkpoint write:
  hold.py), the odd ones {'at': 'moment', 'step', 'delay'} (`delay` in [0, 1) of one training
  step's time after the attempt logs `step`: its second step or later, at most the last
  checkpoint step but one, or past it, short of the last step); {'at': 'final_evaluation', 'split'}
  once the run has trained to its last step (held in its final evaluation). best_steps: those
  the best checkpoints hold (not written again)."""
  rng = random.Random(f'{seed}:{k}')
  if resume >= steps:
    return {'at': 'final_evaluation', 'split': 'validation'}
  if k % 2 == 0:
    saves = [s for s in range(resume + 1, min(resume + 3 * checkpoint_every, steps) + 1)
             if s % checkpoint_every == 0 or s == steps]
    if saves:
      step = rng.choice(saves)
      # a best checkpoint is written for sure at the first validation only (later ones only
      # when the score improves), unless written already
      best = step == eval_every and step not in best_steps and rng.random() < 0.5
      return {'at': 'checkpoint_save', 'step': step,
              'checkpoints': 'best' if best else 'latest'}
  # from this attempt's second step (a step's time is measured between two of its steps) to
  # the last checkpoint step but one, or short of the last step: the last write stays ahead
  first = resume + 2
  last = (min(resume + 12, steps - checkpoint_every) if first <= steps - checkpoint_every
          else steps - 1)
  return {'at': 'moment', 'step': rng.randint(min(first, last), last),
          'delay': round(rng.uniform(0.0, 1.0), 3)}


def describe(kill: dict) -> str:
  if kill['at'] == 'checkpoint_save':
    return f'inside the write of the {kill["checkpoints"]} checkpoint of step {kill["step"]}'
  if kill['at'] == 'final_evaluation':
    return f'in the final evaluation (after its {kill["split"]} split)'
  return f'{kill["delay"]:.3f} of a step\'s time after step {kill["step"]} is logged'


def attempt(cmd: list[str], kill: dict, held: str) -> tuple[int, str]:
  """One run of `cmd`, SIGKILLed as `kill` says -> (exit status, what it printed). The kill
  waits on events (the held file; the logged step), then on the drawn delay."""
  env = dict(os.environ)
  if kill['at'] != 'moment':
    env = helpers.hold_env(held, **kill)
  proc = subprocess.Popen(cmd, cwd=ROOT, env=helpers.fault_env(env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  log, logged, gaps, seen = [], threading.Event(), [], []   # seen: the last step line's time

  def read():
    for line in proc.stdout:
      log.append(line)
      if kill['at'] == 'moment' and line.startswith('step'):
        now = time.monotonic()
        if seen:
          gaps.append(now - seen[-1])
        seen.append(now)
        if int(line.split()[1].split('/')[0]) >= kill['step'] and gaps:
          logged.set()
  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  try:
    if kill['at'] == 'moment':
      while not logged.wait(0.05) and proc.poll() is None:
        pass
      if proc.poll() is None:
        # the random moment, drawn from the seed, in units of the attempt's quickest step
        threading.Event().wait(kill['delay'] * min(gaps))
    else:   # held there (or it ended first: then there is nothing to kill)
      while not os.path.exists(held) and proc.poll() is None:
        time.sleep(0.02)
    proc.kill()
    rc = proc.wait()
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
    reader.join()
    if os.path.exists(held):
      os.remove(held)
  return rc, ''.join(log)


def run_with_kills(workdir: str, data_dir: str, kills: int, seed: int, steps: int = 30,
                   checkpoint_every: int = 5, eval_every: int = 15,
                   say=print) -> tuple[int, list[str]]:
  """Trains fault_cmd into `workdir`, SIGKILLed `kills` times (each drawn from `seed`, said
  before its attempt; fewer if an attempt finishes the run before its kill: said), then to
  the end -> (kills done, the problems found: [] if none: an attempt that failed, a step taken
  for a checkpoint and found unreadable). Compare the finished run with an uninterrupted one
  yourself (helpers.differences_from)."""
  cmd = helpers.fault_cmd(workdir, data_dir, steps=steps, checkpoint_every=checkpoint_every,
                          eval_every=eval_every)
  held = os.path.join(os.path.dirname(os.path.abspath(workdir)),
                      f'.{os.path.basename(workdir)}.held')
  problems, done, outputs = [], 0, []
  while done < kills and not os.path.exists(os.path.join(workdir, 'results.json')):
    steps_now = latest_steps(workdir)
    kill = plan_kill(seed, done, steps_now[-1] if steps_now else 0, steps, checkpoint_every,
                     eval_every, tuple(latest_steps(workdir, 'best')))
    say(f'kill {done + 1}/{kills}: {describe(kill)} (latest checkpoints {steps_now})')
    rc, out = attempt(cmd, kill, held)
    outputs.append(out)
    if rc == -signal.SIGKILL:
      done += 1
    elif rc != 0:
      return done, [f'an attempt exited with status {rc}: {out[-3000:]}']
    else:
      say('  it finished before the kill')
      break
  final = subprocess.run(cmd, cwd=ROOT, env=helpers.fault_env(), capture_output=True, text=True,
                         timeout=1800)   # (a no-op if the last attempt finished the run)
  outputs.append(final.stdout + final.stderr)
  if final.returncode != 0:
    problems.append(f'the final run exited with status {final.returncode}: '
                    f'{final.stderr[-3000:]}')
  say(f'{done} kills; final run: exit {final.returncode}')
  for k, out in enumerate(outputs):
    bad = [line for line in out.splitlines() if 'skipped unreadable checkpoint' in line]
    if bad:
      problems.append(f'attempt {k + 1} resumed past an unreadable step: {bad[0]}')
  corrupt = os.path.join(workdir, 'checkpoints', 'corrupt')
  if os.path.isdir(corrupt):
    problems.append(f'steps set aside as unreadable: {sorted(os.listdir(corrupt))}')
  return done, problems


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--kills', type=int, default=20)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--steps', type=int, default=200, help='train.steps of the run (30 in CI)')
  ap.add_argument('--keep', action='store_true', help='keep the temporary workdirs')
  args = ap.parse_args()
  every = (10, 50) if args.steps >= 100 else (5, 15)
  tmp = tempfile.mkdtemp(prefix='fault_injection_')
  data_dir, ref, run = (os.path.join(tmp, n) for n in ('tfds', 'reference', 'killed'))
  t0 = time.time()
  print('uninterrupted reference run ...', flush=True)
  subprocess.run(helpers.fault_cmd(ref, data_dir, steps=args.steps, checkpoint_every=every[0],
                                   eval_every=every[1]),
                 cwd=ROOT, env=helpers.fault_env(), check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
  _, problems = run_with_kills(run, data_dir, args.kills, args.seed, steps=args.steps,
                            checkpoint_every=every[0], eval_every=every[1],
                            say=lambda s: print(s, flush=True))
  diffs = [] if problems else helpers.differences_from(ref, run)
  for p in problems + diffs:
    print(f'FAILED: {p}')
  if not problems:
    b = json.load(open(os.path.join(run, 'results.json')))
    print(f'identical (metrics and every array of the final state): {not diffs}; test exact '
          f'match {b["results"]["test"]["exact_match"]:.2f}; total {time.time() - t0:.0f} s')
  if args.keep:
    print(f'workdirs kept in {tmp}')
  else:
    shutil.rmtree(tmp, ignore_errors=True)
  return 0 if not (problems or diffs) else 1


if __name__ == '__main__':
  sys.exit(main())
