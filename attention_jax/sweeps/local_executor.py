"""The local executor of sweeps: each run a subprocess of this machine, `parallel` at a time
on a CPU, or `runs_per_device` on each accelerator (CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS),
as slots free up (a population: one process, its log copied to each member's)."""

import functools
import os
import shutil
import socket
import subprocess
import time

from attention_jax import devices as devices_lib
from attention_jax import workdir as workdir_lib
from attention_jax.sweeps import attempts
from attention_jax.sweeps import sweep_file as sweep_lib


def accelerators() -> list[str]:
  """Visible accelerator ids to run variants on in parallel ([] on a CPU-only machine)."""
  nvsmi = shutil.which('nvidia-smi')
  if nvsmi:
    try:
      out = subprocess.run([nvsmi, '-L'], capture_output=True, text=True, timeout=30).stdout
      return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith('GPU')]
    except (OSError, subprocess.SubprocessError):
      return []
  return []


def local(parallel: int | None = None, runs_per_device: int = 1):
  """The local executor: the runs as subprocesses of this machine, `parallel` at a time on a
  CPU; where there are accelerators, `runs_per_device` on each (each then gets 1/K of its
  memory: devices_lib.memory_env). (attention_jax.sweeps.ray_executor.run is the other; an executor is
  f(config_arg, sweep name, runs to do, sweep dir, extra flags) -> status.)"""
  if runs_per_device < 1:
    raise ValueError(f'runs_per_device must be >= 1, got {runs_per_device}')
  if runs_per_device > 1 and not accelerators():   # refused before the sweep makes a folder
    raise ValueError(f'--runs_per_device={runs_per_device} shares accelerators, and this '
                     'machine has none: on a CPU, --parallel sets how many runs share it')
  return functools.partial(_run_local, parallel=parallel, runs_per_device=runs_per_device)


def _run_local(config_arg, name, queue, sweep_dir, extra_flags, parallel=None,
               runs_per_device=1):
  devices = accelerators()
  if runs_per_device > 1 and not devices:
    raise ValueError(f'--runs_per_device={runs_per_device} shares accelerators, and this '
                     'machine has none: on a CPU, --parallel sets how many runs share it')
  # device d repeated K times, interleaved: the first runs spread over every device
  slots = [d for _ in range(runs_per_device) for d in devices] or [None] * max(1, parallel or 1)
  memory = devices_lib.memory_env(1.0 / runs_per_device) if devices else {}
  per_device = f', {runs_per_device} per device' if runs_per_device > 1 else ''
  runs = sum(len(v.members) for v in queue)
  print(f'sweep {name}: {runs} runs to do'
        + (f' in {len(queue)} processes (populations)' if runs != len(queue) else '')
        + f' -> {sweep_dir}/ ({len(slots)} at a time'
        f'{", devices " + ",".join(devices) if devices else ""}{per_device})', flush=True)
  status, queue, running = {}, list(queue), {}
  free = list(slots)
  while queue or running:
    while queue and free:
      v, slot = queue.pop(0), free.pop(0)
      members = v.members
      for m in members:
        os.makedirs(m.workdir, exist_ok=True)
      env = {**os.environ, **memory}
      if slot is not None:
        env['CUDA_VISIBLE_DEVICES'] = env['TPU_VISIBLE_CHIPS'] = slot
      for m in members:
        attempts.wait_for_workdir(m)
      how = ('resuming' if any(workdir_lib.Run(m.workdir).has_checkpoints for m in members)
             else 'starting')
      where = f' on device {slot}' if slot else ''
      print(f'[{v.label}] {how}{where}: {sweep_lib.describe(v)}', flush=True)
      log, offset = attempts.open_log(v)
      proc = subprocess.Popen(sweep_lib.command(config_arg, v) + list(extra_flags),
                              stdout=log, stderr=subprocess.STDOUT, env=env,
                              preexec_fn=attempts.die_with_parent)
      running[proc] = (v, slot, log, offset, [
          attempts.Attempt(m.workdir, share=len(members), executor='local',
                           host=socket.gethostname())
          for m in members])
    for proc in list(running):
      v, slot, log, offset, tries = running[proc]
      if proc.poll() is None:
        for attempt in tries:
          attempt.alive()
        continue
      del running[proc]
      log.close()
      free.append(slot)
      attempts.copy_log(v, offset)
      for m, attempt in zip(v.members, tries):
        ok = sweep_lib.member_finished(v, m, proc.returncode)
        status[m.label] = 'finished' if ok else 'failed'
        attempt.close(proc.returncode)
        print(f'[{m.label}] {"finished" if ok else f"FAILED (exit {proc.returncode})"} in '
              f'{attempt.seconds:.0f} s' + ('' if ok else
                                            f'; see {workdir_lib.Run(m.workdir).train_log_path}'),
              flush=True)
    time.sleep(0.5)
  return status
