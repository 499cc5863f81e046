"""Sweeps: run every variant of an experiment, each into its own workdir, then report.

A sweep file is an experiment config file with one more function:

  def get_config(arg) -> ConfigDict            # the experiment the variants vary
  def get_sweep(arg) -> list[tuple[str, dict]]  # (variant name, {'model.score': 'dot', ...})

Each variant runs as `python -m experiments.main --config=<sweep file>:<arg>
--config.<field>=<value> ... --workdir=<root>/<sweep>/<variant>` in its own process, so a
failure stays with its variant. A variant whose workdir has results.json is finished and
skipped; an interrupted one resumes from its checkpoint. With accelerators, variants run in
parallel, one per device (CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS), as devices free up.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Sequence

from attention_jax import workdir as workdir_lib


SAFE_NAME = re.compile(r'[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}')   # a variant's workdir name


@dataclasses.dataclass
class Variant:
  name: str
  overrides: dict
  workdir: str


def load_sweep(path_arg: str, root: str = 'runs') -> tuple[str, list[Variant]]:
  """'experiments/configs/x.py[:arg]' -> (sweep name, variants)."""
  path, _, arg = path_arg.partition(':')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'no sweep file {path!r}')
  spec = importlib.util.spec_from_file_location('sweep_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, 'get_sweep'):
    raise ValueError(f'{path} has no get_sweep(arg): not a sweep file')
  name = os.path.splitext(os.path.basename(path))[0] + (f'_{arg.replace(",", "_")}' if arg
                                                         else '')
  variants, seen = [], set()
  for vname, overrides in module.get_sweep(arg or None):
    if not isinstance(vname, str) or not SAFE_NAME.fullmatch(vname):
      raise ValueError(f'variant name {vname!r} in {path} is not a plain directory name: use '
                       "letters, digits, '.', '_' and '-' (not starting with '.')")
    if vname in seen:
      raise ValueError(f'variant name {vname!r} appears twice in {path}')
    seen.add(vname)
    variants.append(Variant(vname, dict(overrides), os.path.join(root, name, vname)))
  return name, variants


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


def command(config_arg: str, v: Variant) -> list[str]:
  flags = [f'--config.{k}={val}' for k, val in v.overrides.items()]
  return [sys.executable, '-m', 'experiments.main', f'--config={config_arg}', *flags,
          f'--workdir={v.workdir}']


def finished(v: Variant) -> bool:
  return os.path.exists(os.path.join(v.workdir, 'results.json'))


def select(variants: list[Variant], only: Sequence[str]) -> list[Variant]:
  """The variants whose names match one of the shell patterns `only` (all if empty); a
  pattern that matches none fails, naming the variants."""
  for pattern in only:
    if not any(fnmatch.fnmatchcase(v.name, pattern) for v in variants):
      raise ValueError(f'--only pattern {pattern!r} matches no variant; variants: '
                       f'{", ".join(v.name for v in variants)}')
  return [v for v in variants
          if not only or any(fnmatch.fnmatchcase(v.name, p) for p in only)]


def run(config_arg: str, root: str = 'runs', parallel: int | None = None,
        extra_flags: Sequence[str] = (), only: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
  """Runs every unfinished variant (of those matching `only`, if given); returns
  (sweep dir, {variant: finished|skipped|failed})."""
  name, variants = load_sweep(config_arg, root)
  variants = select(variants, only)
  sweep_dir = os.path.join(root, name)
  with workdir_lib.WorkdirLock(sweep_dir):   # one sweep per directory at a time
    return _run(config_arg, name, variants, sweep_dir, parallel, extra_flags)


def _run(config_arg, name, variants, sweep_dir, parallel, extra_flags):
  devices = accelerators()
  slots = devices or [None] * max(1, parallel or 1)
  print(f'sweep {name}: {len(variants)} variants -> {sweep_dir}/ '
        f'({len(slots)} at a time{", devices " + ",".join(devices) if devices else ""})',
        flush=True)
  status, queue, running = {}, [], {}
  for v in variants:
    if finished(v):
      status[v.name] = 'skipped'
      print(f'[{v.name}] finished earlier (results.json exists), skipping', flush=True)
    else:
      queue.append(v)
  free = list(slots)
  while queue or running:
    while queue and free:
      v, slot = queue.pop(0), free.pop(0)
      os.makedirs(v.workdir, exist_ok=True)
      env = dict(os.environ)
      if slot is not None:
        env['CUDA_VISIBLE_DEVICES'] = env['TPU_VISIBLE_CHIPS'] = slot
      how = 'resuming' if os.path.isdir(os.path.join(v.workdir, 'checkpoints')) else 'starting'
      print(f'[{v.name}] {how}{" on device " + slot if slot else ""}: '
            f'{" ".join(f"{k}={x}" for k, x in v.overrides.items())}', flush=True)
      log = open(os.path.join(v.workdir, 'train.log'), 'a')
      proc = subprocess.Popen(command(config_arg, v) + list(extra_flags), stdout=log,
                              stderr=subprocess.STDOUT, env=env)
      running[proc] = (v, slot, log, time.time())
    for proc in list(running):
      if proc.poll() is None:
        continue
      v, slot, log, t0 = running.pop(proc)
      log.close()
      free.append(slot)
      ok = proc.returncode == 0 and finished(v)
      status[v.name] = 'finished' if ok else 'failed'
      with open(os.path.join(v.workdir, 'wall_time.json'), 'a') as f:
        f.write(json.dumps({'seconds': time.time() - t0, 'returncode': proc.returncode}) + '\n')
      print(f'[{v.name}] {"finished" if ok else f"FAILED (exit {proc.returncode})"} in '
            f'{time.time() - t0:.0f} s' + ('' if ok else
                                            f'; see {os.path.join(v.workdir, "train.log")}'),
            flush=True)
    time.sleep(0.5)
  failed = [k for k, s in status.items() if s == 'failed']
  print(f'sweep {name}: {sum(s == "finished" for s in status.values())} finished, '
        f'{sum(s == "skipped" for s in status.values())} skipped, {len(failed)} failed'
        + (f' ({", ".join(failed)})' if failed else ''), flush=True)
  return sweep_dir, status
