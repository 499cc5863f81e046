"""Sweeps: run every variant of an experiment, each into its own workdir, then report.

A sweep file is an experiment config file with one more function:

  def get_config(arg) -> ConfigDict            # the experiment the variants vary
  def get_sweep(arg) -> list[tuple[str, dict]]  # (variant name, {'model.score': 'dot', ...})
  SEEDS = 3                                     # optional: seeds per variant (--seeds wins)
  BASELINE = 'additive'                         # optional: the report compares all with it

Each run executes `python -m experiments.main --config=<sweep file>:<arg>
--config.<field>=<value> ... --workdir=<workdir>` in its own process, so a failure stays with
its run. Without seeds a variant is one run at the config's seed, in <root>/<sweep>/<variant>;
with N seeds it is N runs, `--config.seed=k` for k = 1..N, in
<root>/<sweep>/<variant>/seed_<k>. The seed changes parameter init, dropout and batch order;
the data set (data.seed) is the same for every seed, so every run is tested on the same
sentences. A finished run (workdir.Run.finished) is skipped (so raising N later
runs only the new seeds); an interrupted one resumes from its checkpoint. With accelerators,
runs go in parallel, one per device (CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS), as devices
free up.

With `population` (sweep --seeds=N --population), a variant's unfinished seeds train as one
process, a population (--config.train.population, attention_jax/population_loop.py) into the
same <variant>/seed_<k> runs: consecutive seeds that start afresh or resume from the same step
form one population (`populations`); a lone seed runs alone. Its log goes to the first member's
log and is copied to the others' when it ends; each member's attempt records its share of the
population's time (1/N), so a variant's wall time over its seeds is the time it took.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Sequence

from absl import flags as absl_flags
from ml_collections import config_flags

from attention_jax import parallel as parallel_lib
from attention_jax import train
from attention_jax import workdir as workdir_lib


SAFE_NAME = re.compile(r'[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}')   # a variant's workdir name


SEED_DIR = workdir_lib.SEED_DIR   # <variant>/seed_<k>


@dataclasses.dataclass
class Variant:
  """One run of a sweep: a variant, at one seed (or at the config's seed when seed is None);
  with population = N > 1, the variant's seeds seed..seed+N-1 as one population process, its
  workdir the variant's (the members' runs are its seed_<k> folders: `members`)."""
  name: str
  overrides: dict
  workdir: str
  seed: int | None = None
  population: int = 1

  @property
  def label(self) -> str:
    if self.population > 1:
      return f'{self.name}/{SEED_DIR.format(self.seed)}..{self.seed + self.population - 1}'
    return self.name if self.seed is None else f'{self.name}/{SEED_DIR.format(self.seed)}'

  @property
  def members(self) -> list['Variant']:
    """The runs it trains: itself, or a population's members."""
    if self.population == 1:
      return [self]
    return [Variant(self.name, self.overrides, workdir_lib.seed_dir(self.workdir, k), k)
            for k in range(self.seed, self.seed + self.population)]


def _module(path: str):
  if not os.path.isfile(path):
    raise FileNotFoundError(f'no sweep file {path!r}')
  spec = importlib.util.spec_from_file_location('sweep_config', path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:   # one line naming the place, not a traceback
    raise ValueError(f'{path} line {e.lineno}: {e.msg} (the sweep file is not valid '
                     'Python)') from None
  except ImportError as e:
    raise ValueError(f'{path}: {type(e).__name__}: {e}') from None
  if not hasattr(module, 'get_sweep'):
    raise ValueError(f'{path} has no get_sweep(arg): not a sweep file')
  return module


def baseline(path_arg: str) -> str | None:
  """The variant the sweep file names as BASELINE for its report (None: the best one)."""
  return getattr(_module(path_arg.partition(':')[0]), 'BASELINE', None)


def load_sweep(path_arg: str, root: str = 'runs',
               seeds: int | None = None) -> tuple[str, list[Variant]]:
  """'experiments/configs/x.py[:arg]' -> (sweep name, runs): every variant once, or under
  seeds 1..N where N is `seeds`, else the sweep file's SEEDS (if it sets one)."""
  name, variants, module = _variants(path_arg, root)
  seeds = seeds if seeds is not None else getattr(module, 'SEEDS', None)
  if seeds is None:
    return name, variants
  if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
    raise ValueError(f'seeds must be a whole number >= 1, got {seeds!r}')
  for v in variants:
    if workdir_lib.Run(v.workdir).started:
      raise ValueError(f'{v.workdir} holds a single-seed run of variant {v.name!r}; with '
                       f'seeds its runs go to {v.workdir}/{SEED_DIR.format("<k>")}: move it '
                       f'there (named after its config seed) or use another --root')
  return name, [Variant(v.name, v.overrides, workdir_lib.seed_dir(v.workdir, k), k)
                for v in variants for k in range(1, seeds + 1)]


def _variants(path_arg: str, root: str):
  """(sweep name, its variants at the config's seed, the sweep file's module)."""
  path, _, arg = path_arg.partition(':')
  module = _module(path)
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
  return name, variants, module


def finished_runs(config_arg: str, root: str = 'runs') -> list[Variant]:
  """Every finished run on disk of the sweep file's variants, at any seed (seed_<k> folders,
  or the variant's own folder)."""
  out = []
  for v in _variants(config_arg, root)[1]:
    if finished(v):
      out.append(v)
    elif os.path.isdir(v.workdir):
      for d in sorted(os.listdir(v.workdir)):
        if m := re.fullmatch(SEED_DIR.format(r'(\d+)'), d):
          seeded = Variant(v.name, v.overrides, os.path.join(v.workdir, d), int(m[1]))
          if finished(seeded):
            out.append(seeded)
  return out


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
  flags += [] if v.seed is None else [f'--config.seed={v.seed}']
  flags += [f'--config.train.population={v.population}'] if v.population > 1 else []
  return [sys.executable, '-m', 'experiments.main', f'--config={config_arg}', *flags,
          f'--workdir={v.workdir}']


def finished(v: Variant) -> bool:
  return workdir_lib.Run(v.workdir).finished


def populations(queue: list[Variant]) -> list[Variant]:
  """The runs to do with a variant's seeds as populations: consecutive seeds of one variant
  that start afresh, or resume from the same step, become one Variant (population = their
  number, in the variant's folder); a seed on its own stays a run alone. A population resumes
  every member from one step, so members at other steps go in other populations."""
  out, group = [], []

  def close():
    if len(group) > 1:
      out.append(Variant(group[0].name, group[0].overrides, os.path.dirname(group[0].workdir),
                         group[0].seed, population=len(group)))
    else:
      out.extend(group)
    group.clear()

  for v in queue:
    if v.seed is None:
      raise ValueError(f'populations are of seeds: variant {v.name!r} has none (give --seeds=N)')
    last = group[-1] if group else None
    if last and (v.name != last.name or v.seed != last.seed + 1 or
                 _newest(v) != _newest(last)):
      close()
    group.append(v)
  close()
  return out


def _newest(v: Variant) -> int | None:
  return workdir_lib.Run(v.workdir).newest_step


def select(variants: list[Variant], only: Sequence[str]) -> list[Variant]:
  """The variants whose names match one of the shell patterns `only` (all if empty); a
  pattern that matches none fails, naming the variants."""
  for pattern in only:
    if not any(fnmatch.fnmatchcase(v.name, pattern) for v in variants):
      raise ValueError(f'--only pattern {pattern!r} matches no variant; variants: '
                       f'{", ".join(v.name for v in variants)}')
  return [v for v in variants
          if not only or any(fnmatch.fnmatchcase(v.name, p) for p in only)]


def local(parallel: int | None = None, runs_per_device: int = 1):
  """The local executor: the runs as subprocesses of this machine, `parallel` at a time on a
  CPU; where there are accelerators, `runs_per_device` on each (each then gets 1/K of its
  memory: parallel.memory_env). (attention_jax.ray_executor.run is the other; an executor is
  f(config_arg, sweep name, runs to do, sweep dir, extra flags) -> status.)"""
  if runs_per_device < 1:
    raise ValueError(f'runs_per_device must be >= 1, got {runs_per_device}')
  return functools.partial(_run_local, parallel=parallel, runs_per_device=runs_per_device)


def variant_config(config_arg: str, v: Variant, extra_flags: Sequence[str] = ()) -> dict:
  """The config a run of `v` trains with (as the run saves it): the sweep file's
  get_config(arg) with the same --config.* flags `command` gives the run, parsed by absl as
  experiments/main.py parses them."""
  argv = ['sweep'] + [a for a in command(config_arg, v) + list(extra_flags)
                      if a.startswith(('--config=', '--config.'))]
  values = absl_flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, 'the sweep file', flag_values=values,
                                  lock_config=True, sys_argv=argv)
  values(argv)
  return json.loads(values.config.to_json())


def changes(config_arg: str, v: Variant, extra_flags: Sequence[str] = ()) -> list[str]:
  """How a finished run's saved config differs from what its variant asks for now (the
  fields a resume compares: train.config_differences); [] if it is the same run."""
  return train.config_differences(workdir_lib.Run(v.workdir).config(),
                                  variant_config(config_arg, v, extra_flags))


REPLACED = '.replaced'   # <sweep dir>/.replaced/<UTC time>/<label>: changed runs set aside


def set_aside(sweep_dir: str, v: Variant) -> str:
  """Moves a changed run out of the variant's place (never deleted): returns where to."""
  stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
  dest = os.path.join(sweep_dir, REPLACED, stamp, v.label)
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  os.rename(v.workdir, dest)
  return dest


def run(config_arg: str, root: str = 'runs', parallel: int | None = None,
        extra_flags: Sequence[str] = (), only: Sequence[str] = (),
        seeds: int | None = None, execute=None,
        rerun_changed: bool = False, population: bool = False) -> tuple[str, dict[str, str]]:
  """Runs every unfinished run (of the variants matching `only`, if given) under `seeds`
  seeds (see load_sweep) with `execute` (default: local(parallel)); returns (sweep dir,
  {run label: finished|skipped|failed|changed}).

  A finished run whose saved config differs from its variant's now is 'changed': neither
  skipped nor reported (one line names the fields), unless `rerun_changed`, which sets the
  old run aside under <sweep dir>/.replaced/ and runs the variant afresh. `population`: each
  variant's unfinished seeds as populations (`populations`), into the same runs."""
  execute = execute or local(parallel)
  name, variants = load_sweep(config_arg, root, seeds)
  if population and any(v.seed is None for v in variants):
    raise ValueError('--population trains a variant\'s seeds as one program: give --seeds=N '
                     '(the sweep file sets no SEEDS)')
  variants = select(variants, only)
  sweep_dir = os.path.join(root, name)
  with workdir_lib.WorkdirLock(sweep_dir):   # one sweep per directory at a time
    status, queue = {}, []
    for v in variants:
      done = finished(v)
      diffs = changes(config_arg, v, extra_flags) if done else []
      if diffs and rerun_changed:
        print(f'[{v.label}] changed since it finished ({"; ".join(diffs)}): the old run is '
              f'set aside in {set_aside(sweep_dir, v)}; running it again', flush=True)
        queue.append(v)
      elif diffs:
        status[v.label] = 'changed'
        print(f'[{v.label}] CHANGED since it finished ({"; ".join(diffs)}): not skipped, not '
              'reported; --rerun_changed sets the old run aside and runs the variant again',
              flush=True)
      elif done:
        status[v.label] = 'skipped'
        print(f'[{v.label}] finished earlier ({workdir_lib.RESULTS} exists), skipping', flush=True)
      else:
        queue.append(v)
    status |= execute(config_arg, name, populations(queue) if population else queue, sweep_dir,
                      extra_flags)
    for v in finished_runs(config_arg, root):   # those not run now (--only, fewer seeds)
      if v.label not in status and (diffs := changes(config_arg, v, extra_flags)):
        status[v.label] = 'changed'
        print(f'[{v.label}] CHANGED since it finished ({"; ".join(diffs)}): not reported',
              flush=True)
  failed = sorted(k for k, s in status.items() if s == 'failed')
  changed = sorted(k for k, s in status.items() if s == 'changed')
  print(f'sweep {name}: {sum(s == "finished" for s in status.values())} finished, '
        f'{sum(s == "skipped" for s in status.values())} skipped, {len(failed)} failed'
        + (f' ({", ".join(failed)})' if failed else '')
        + (f', {len(changed)} changed and not reported ({", ".join(changed)})' if changed
           else ''), flush=True)
  return sweep_dir, status


def describe(v: Variant) -> str:
  """'model.score=dot seed=2': what a run changes, for the progress lines."""
  seeds = (f' seeds={v.seed}..{v.seed + v.population - 1} (a population)' if v.population > 1
           else '' if v.seed is None else f' seed={v.seed}')
  return (' '.join(f'{k}={x}' for k, x in v.overrides.items()) + seeds).strip()


def record_attempt(workdir: str, seconds: float, returncode: int | None, **where) -> None:
  """Appends one attempt (its running time, exit status and where it ran) to the run's
  attempts (workdir.Run.attempts); a run's wall time is the sum over its attempts."""
  workdir_lib.Run(workdir).append_attempt({'seconds': seconds, 'returncode': returncode, **where})


class Attempt:
  """One attempt of a run as the last line of its attempts (workdir.Run.attempts): written when it
  starts, its seconds brought up to date every `beat` seconds while it runs, and closed with
  its exit status. A sweep killed mid-run leaves the time its run really ran (to within
  `beat`; its process dies with it: die_with_parent), not nothing."""

  def __init__(self, workdir: str, beat: float = 10.0, share: int = 1, **where):
    """share: the number of runs this attempt trains at once (a population's members): each
    records 1/share of its time."""
    self.path, self.beat, self.where = workdir_lib.Run(workdir).wall_time_path, beat, where
    self.share = share
    if share > 1:
      self.where = {**where, 'population': share}
    try:
      with open(self.path) as f:
        self.before = [line for line in f if line.strip()]
    except FileNotFoundError:
      self.before = []
    self.t0 = self.last = time.time()
    self._write(None)

  @property
  def seconds(self) -> float:
    """Wall seconds since it started."""
    return time.time() - self.t0

  def _write(self, returncode: int | None) -> None:
    self.last = time.time()
    line = json.dumps({'seconds': self.seconds / self.share, 'returncode': returncode,
                       **self.where})
    workdir_lib.write_atomic(self.path, ''.join(self.before) + line + '\n')

  def alive(self) -> None:
    if time.time() - self.last >= self.beat:
      self._write(None)

  def close(self, returncode: int) -> None:
    self._write(returncode)


def wait_for_workdir(v: Variant, timeout: float = 120.0) -> None:
  """Waits while another process holds the run's workdir lock: the run of a sweep killed a
  moment ago saves its checkpoint and exits (SIGTERM from die_with_parent) before the run
  starts again here. After `timeout`, the run starts anyway (and fails, naming the holder)."""
  deadline, said = time.time() + timeout, False
  while time.time() < deadline:
    try:
      workdir_lib.WorkdirLock(v.workdir).acquire().release()
      return
    except workdir_lib.WorkdirInUse as e:
      if not said:
        print(f'[{v.label}] waiting: {e}', flush=True)
        said = True
      time.sleep(0.5)


def die_with_parent() -> None:
  """preexec_fn of a run's process (Linux): SIGTERM it when the process that started it
  dies, so a killed sweep or Ray worker leaves no orphan training (SIGTERM: it saves a
  checkpoint and exits, and the next attempt resumes)."""
  if sys.platform.startswith('linux'):
    import ctypes  # pylint: disable=g-import-not-at-top
    import signal  # pylint: disable=g-import-not-at-top
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def _run_local(config_arg, name, queue, sweep_dir, extra_flags, parallel=None,
               runs_per_device=1):
  devices = accelerators()
  if runs_per_device > 1 and not devices:
    raise ValueError(f'--runs_per_device={runs_per_device} shares accelerators, and this '
                     'machine has none: on a CPU, --parallel sets how many runs share it')
  # device d repeated K times, interleaved: the first runs spread over every device
  slots = [d for _ in range(runs_per_device) for d in devices] or [None] * max(1, parallel or 1)
  memory = parallel_lib.memory_env(1.0 / runs_per_device) if devices else {}
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
        wait_for_workdir(m)
      how = ('resuming' if any(workdir_lib.Run(m.workdir).has_checkpoints for m in members)
             else 'starting')
      print(f'[{v.label}] {how}{" on device " + slot if slot else ""}: {describe(v)}',
            flush=True)
      log, offset = _open_log(v)
      proc = subprocess.Popen(command(config_arg, v) + list(extra_flags), stdout=log,
                              stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
      running[proc] = (v, slot, log, offset, [
          Attempt(m.workdir, share=len(members), executor='local', host=socket.gethostname())
          for m in members])
    for proc in list(running):
      v, slot, log, offset, attempts = running[proc]
      if proc.poll() is None:
        for attempt in attempts:
          attempt.alive()
        continue
      del running[proc]
      log.close()
      free.append(slot)
      _copy_log(v, offset)
      for m, attempt in zip(v.members, attempts):
        # a population's member may finish while another one fails (exit 1)
        ok = finished(m) and (proc.returncode == 0 or v.population > 1)
        status[m.label] = 'finished' if ok else 'failed'
        attempt.close(proc.returncode)
        print(f'[{m.label}] {"finished" if ok else f"FAILED (exit {proc.returncode})"} in '
              f'{attempt.seconds:.0f} s' + ('' if ok else
                                            f'; see {workdir_lib.Run(m.workdir).train_log_path}'),
              flush=True)
    time.sleep(0.5)
  return status


def _open_log(v: Variant):
  """(the log the process of `v` writes, where this attempt starts in it): its run's log; a
  population's first member's, the others told so (_copy_log copies it when it ends)."""
  first = workdir_lib.Run(v.members[0].workdir)
  for m in v.members[1:]:
    with workdir_lib.Run(m.workdir).open_log() as f:
      f.write(f'== {v.label}: this attempt\'s log goes to {first.train_log_path} and is copied '
              'here when it ends\n')
  path = first.train_log_path
  return first.open_log(), os.path.getsize(path) if os.path.exists(path) else 0


def _copy_log(v: Variant, offset: int) -> None:
  """A population's attempt: its log (in the first member's, from `offset`) appended to the
  other members' logs."""
  if v.population == 1:
    return
  with open(workdir_lib.Run(v.members[0].workdir).train_log_path, 'rb') as f:
    f.seek(offset)
    text = f.read().decode('utf-8', 'replace')
  for m in v.members[1:]:
    with workdir_lib.Run(m.workdir).open_log() as f:
      f.write(text)
