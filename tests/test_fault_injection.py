"""SIGKILL at known moments, the same command again each time: the run ends bit-identical to
one straight through (results.json's metrics, every array of the final train state). Each
kill lands where a test could not hit it by timing: inside a checkpoint write (the step
written to Orbax's temporary directory, not yet committed; hold point 'checkpoint_save'), of
the latest checkpoint and of the best, and between two training steps ('train_step'). A
half-written step is left on disk each time, and the next run resumes from the step before
it. Then tests/fault_injection.py's kills at random moments (drawn from a fixed seed,
printed), several of them inside checkpoint writes."""

import os
import signal
import subprocess

import pytest

import fault_injection
import helpers
from attention_jax import workdir as workdir_lib


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
  return helpers.uninterrupted(tmp_path_factory)


def killed_at(tmp_path, workdir, data_dir, at, **where) -> str:
  """fault_cmd held at point `at` (hold.py) with `where`, then SIGKILLed -> what it printed."""
  held = tmp_path / f'held_{at}_{where.get("step")}'
  proc = subprocess.Popen(helpers.fault_cmd(workdir, data_dir), cwd=helpers.ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=helpers.fault_env(helpers.hold_env(held, at, workdir=workdir,
                                                                 **where)))
  try:
    info = helpers.wait_held(held, proc)
    if at == 'checkpoint_save':   # a step half-way: written, not committed
      assert os.listdir(info['tmp']), info
      assert not os.path.exists(os.path.join(os.path.dirname(info['tmp']), str(where['step'])))
    proc.kill()
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == -signal.SIGKILL, out[-3000:]
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  if at == 'checkpoint_save':   # left on disk, and not a step to resume from
    assert os.path.isdir(info['tmp']), info
  return out


def resumed_from(out: str) -> int | None:
  lines = [l for l in out.splitlines() if l.startswith('resumed from ')]
  return int(lines[-1].split()[-1]) if lines else None


@pytest.mark.scenario
def test_sigkill_inside_checkpoint_writes_and_between_steps_resumes_bit_identical(
    reference, tmp_path):
  ref, data_dir = reference
  workdir = str(tmp_path / 'run')
  run = workdir_lib.Run(workdir)
  latest = os.path.join(workdir, 'checkpoints', 'latest')
  # checkpoints every 5 steps, a validation (and a best checkpoint) every 15 of 30
  out = killed_at(tmp_path, workdir, data_dir, 'checkpoint_save', step=10,
                  checkpoints='latest')
  assert resumed_from(out) is None and run.newest_step == 5, out[-3000:]
  out = killed_at(tmp_path, workdir, data_dir, 'checkpoint_save', step=15, checkpoints='best')
  assert resumed_from(out) == 5, out[-3000:]   # not from the half-written step 10
  assert f'resumed from {latest} step 5' in out
  assert run.newest_step == 10, out[-3000:]    # step 10 written again, whole
  out = killed_at(tmp_path, workdir, data_dir, 'train_step', step=22)
  assert resumed_from(out) == 10 and run.newest_step == 20, out[-3000:]
  done = subprocess.run(helpers.fault_cmd(workdir, data_dir), cwd=helpers.ROOT, text=True,
                        capture_output=True, env=helpers.fault_env(), timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert resumed_from(done.stdout) == 20, done.stdout[-3000:]
  assert not helpers.differences_from(ref, workdir)


KILLS, SEED = 6, 0


@pytest.mark.scenario
def test_sigkill_at_random_moments_resumes_bit_identical(reference, tmp_path, capsys):
  """tests/fault_injection.py's loop: KILLS SIGKILLs drawn from SEED (printed: each kill, where
  it lands, the checkpoints then), every other one inside a checkpoint write (hold point
  'checkpoint_save'), the others a random fraction of one step's time after a step is logged
  (short of the last checkpoint, so each even kill has a write to land in, on a fast machine
  too); each followed by the same command again. No attempt ever finds an unreadable step (a
  write killed before its commit is no step), and the run ends bit-identical to one straight
  through."""
  ref, data_dir = reference
  said = []
  def say(line):
    said.append(line)
    print(line, flush=True)
  workdir = str(tmp_path / 'run')
  done, problems = fault_injection.run_with_kills(workdir, data_dir, KILLS, SEED, say=say)
  plan = f'kills drawn from seed {SEED}:\n' + '\n'.join(said)
  with capsys.disabled():   # the kill times in the log of a run without -n (and on failure)
    print('\n' + plan)
  assert done == KILLS and problems == [], plan + '\n' + '\n'.join(problems)
  assert sum('inside the write of the' in line for line in said) >= KILLS // 2, plan
  assert helpers.differences_from(ref, workdir) == [], plan
