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
process, a population (--config.train.population, attention_jax/training/population_run.py)
into the same <variant>/seed_<k> runs: consecutive seeds that start afresh or resume from the same step
form one population (`populations`); a lone seed runs alone. Its log goes to the first member's
log and is copied to the others' when it ends; each member's attempt records its share of the
population's time (1/N), so a variant's wall time over its seeds is the time it took.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import fnmatch
import importlib.util
import json
import os
import re
import sys
import time
from typing import Sequence

import ml_collections
from absl import flags as absl_flags
from ml_collections import config_flags

from attention_jax import hold
from attention_jax import workdir as workdir_lib
from attention_jax.training import train


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


def load_sweep(path_arg: str, root: str = 'runs', seeds: int | None = None,
               only: Sequence[str] = ()) -> tuple[str, list[Variant]]:
  """'experiments/configs/x.py[:arg]' -> (sweep name, runs): every variant (or those that
  `only` selects) once, or under seeds 1..N where N is `seeds`, else the sweep file's SEEDS
  (if it sets one). A single-seed run in the way of a selected variant's seeds fails; other
  variants' folders are not looked at."""
  name, variants, module = _variants(path_arg, root)
  variants = select(variants, only)
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
  for vname, overrides in _checked_sweep(module.get_sweep(arg or None), path):
    if not isinstance(vname, str) or not SAFE_NAME.fullmatch(vname):
      raise ValueError(f'variant name {vname!r} in {path} is not a plain directory name: use '
                       "letters, digits, '.', '_' and '-' (not starting with '.')")
    if vname in seen:
      raise ValueError(f'variant name {vname!r} appears twice in {path}')
    seen.add(vname)
    variants.append(Variant(vname, dict(overrides), os.path.join(root, name, vname)))
  return name, variants, module


FORM = ("get_sweep() must return a non-empty list of (name, {field: value}) pairs, e.g. "
        "[('dot', {'model.score': 'dot'}), ('general', {'model.score': 'general'})]")


def _checked_sweep(sweep, path: str) -> list:
  """A sweep file's get_sweep() result, or one line naming the file and the expected form."""
  shown = lambda x: repr(x) if len(repr(x)) <= 60 else repr(x)[:57] + '...'
  if not isinstance(sweep, (list, tuple)) or not sweep:
    raise ValueError(f'{path}: {FORM}; got {shown(sweep)}')
  for item in sweep:
    if not (isinstance(item, (list, tuple)) and len(item) == 2
            and isinstance(item[1], collections.abc.Mapping)):
      raise ValueError(f'{path}: {FORM}; got the item {shown(item)}')
  return list(sweep)


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


def command(config_arg: str, v: Variant) -> list[str]:
  flags = [f'--config.{k}={val}' for k, val in v.overrides.items()]
  flags += [] if v.seed is None else [f'--config.seed={v.seed}']
  flags += [f'--config.train.population={v.population}'] if v.population > 1 else []
  return [sys.executable, '-m', 'experiments.main', f'--config={config_arg}', *flags,
          f'--workdir={v.workdir}']


def finished(v: Variant) -> bool:
  return workdir_lib.Run(v.workdir).finished


def member_finished(v: Variant, m: Variant, returncode: int) -> bool:
  """Whether run `m` of `v`'s process (v itself, or a member of population v) ended finished:
  its results written, and its process exited 0 (a population's member may finish while
  another one fails, exit 1)."""
  return finished(m) and (returncode == 0 or v.population > 1)


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


def check_variants(config_arg: str, variants: Sequence[Variant],
                   extra_flags: Sequence[str] = ()) -> None:
  """Each variant's config (the sweep file's get_config, its overrides and the sweep's
  --config.* flags), checked as a run would check it (train.check_fields), before any run
  starts or any folder is made: one ValueError naming the file, the variant and the field."""
  path = config_arg.partition(':')[0]
  for v in {v.name: v for v in variants}.values():   # one check per variant, not per seed
    try:
      cfg = ml_collections.ConfigDict(variant_config(config_arg, v, extra_flags))
      train.check_fields(cfg)
    except (ValueError, KeyError, AttributeError, TypeError, absl_flags.Error) as e:
      while isinstance(e, (KeyError, AttributeError)) and e.args and isinstance(
          e.args[0], BaseException):   # ml_collections wraps the KeyError in an AttributeError
        e = e.args[0]
      text = ' '.join(str(e.args[0] if e.args else e).split()) or type(e).__name__
      if isinstance(e, (KeyError, AttributeError)):
        text = f'unknown config field in {describe(v) or "its overrides"}: {text}'
      raise ValueError(f'{path}: variant {v.name!r}: {text}') from None


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


def run(config_arg: str, execute, root: str = 'runs', extra_flags: Sequence[str] = (),
        only: Sequence[str] = (), seeds: int | None = None, rerun_changed: bool = False,
        population: bool = False) -> tuple[str, dict[str, str]]:
  """Runs every unfinished run (of the variants matching `only`, if given) under `seeds`
  seeds (see load_sweep) with the executor `execute` (local_executor.local(...) or
  ray_executor.run: f(config_arg, sweep name, runs to do, sweep dir, extra flags) -> status);
  returns (sweep dir, {run label: finished|skipped|failed|changed}).

  A finished run whose saved config differs from its variant's now is 'changed': neither
  skipped nor reported (one line names the fields), unless `rerun_changed`, which sets the
  old run aside under <sweep dir>/.replaced/ and runs the variant afresh. `population`: each
  variant's unfinished seeds as populations (`populations`), into the same runs."""
  name, variants = load_sweep(config_arg, root, seeds, only)
  if population and any(v.seed is None for v in variants):
    raise ValueError('--population trains a variant\'s seeds as one program: give --seeds=N '
                     '(the sweep file sets no SEEDS)')
  check_variants(config_arg, variants, extra_flags)
  sweep_dir = os.path.join(root, name)
  with workdir_lib.WorkdirLock(sweep_dir):   # one sweep per directory at a time
    hold.point('sweep_locked', workdir=sweep_dir)   # tests only (hold.py)
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
