"""The training loop: the one loop over train steps, for a run alone and for a population.

A run is a population of one. The loop drives a list of sessions (session.Session: one run
each, its directory, data iterator, checkpoints and evaluation) and a stepper, which owns
the train state(s) and decides how a step runs:

  train.Single          one run: jax.jit on one device, shard_map or pmap over several
  population.Members    N seeds of one config as one vmapped step (on a members x data mesh)

  stepper.members                  N (1 for a run alone)
  stepper.templates()              the N members' initial states (to restore into)
  stepper.load(states)             the N members' states to train from
  stepper.step(batches)            one step of every member on its batch -> metrics
  stepper.metrics_of(m, k)         member k's metrics {'finite', 'loss', 'grad_norm', ...}
  stepper.state_of(k)              member k's state now, as a run alone holds it

One place decides, for every member alike: the stop signal (SIGTERM / SIGINT: the latest
checkpoint at the next step, then preemption.Interrupted), the finiteness of each step (read
one step late, so that the device never waits on the host), validation and the best
checkpoint, the latest checkpoints, the test hold points, and the final evaluation.

A member whose step is non-finite keeps its state (the step leaves it unchanged). With
train.skip_nonfinite the step is counted and training goes on; without it that member stops
where it is (its last checkpoint untouched, no results), the others train on, and the loop
raises FloatingPointError naming it once they have finished (a run alone: at once).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Protocol, Sequence

import jax
import numpy as np

from attention_jax import fields, hold
from attention_jax.training import preemption
from attention_jax.training import session as session_lib
from attention_jax.training.session import log


def _check_population(name, value):
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ValueError(f'{name} must be a positive integer (the seeds trained as one program; 1: '
                     f'a run alone), got {value!r}')


def _check_ema(name, value):
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
    raise ValueError(f'{name} must be in [0, 1) (0: no EMA), got {value!r}')


@dataclasses.dataclass(frozen=True)
class Loop(fields.Fields):
  """The trainer's fields (the `train` section's; the optimiser's and the loss's are
  update.Optimizer's and objective.Objective's): how long, how often, what is kept."""
  SECTION = 'train'
  SMOKE = {'steps': 8, 'eval_every': 4, 'checkpoint_every': 4, 'log_every': 2}
  steps: int = fields.positive(3000, 'training steps')
  eval_every: int = fields.positive(500, 'steps between validations (and at the end)')
  log_every: int = fields.positive(50, 'steps between log lines')
  checkpoint_every: int = fields.positive(500, 'steps between checkpoints (and at the end)')
  keep_checkpoints: int = fields.positive(2, 'latest checkpoints kept (and the best one)')
  resume: bool = fields.field(True, 'resume from the workdir\'s latest checkpoint')
  skip_nonfinite: bool = fields.field(False, 'skip a batch with a non-finite loss or gradient '
                                      '(counted); False: stop')
  population: int = fields.field(1, 'N > 1: seeds seed..seed+N-1 trained as one vmapped '
                                 'program, each into <workdir>/seed_<k>', _check_population,
                                 '>= 1')
  ema_decay: float = fields.field(0.0, 'evaluate and save an EMA of the parameters (e.g. '
                                  '0.999; 0: off)', _check_ema, '[0, 1)')
  max_decode_factor: float = fields.number(2.0, 'greedy/beam output length limit = factor x '
                                           'source length + 10', strict=True)


fields.own('the trainer', Loop)


class Stepper(Protocol):
  members: int

  def templates(self) -> list: ...
  def load(self, states: list) -> None: ...
  def step(self, batches: list[dict]) -> dict: ...
  def metrics_of(self, m: dict, k: int) -> dict: ...
  def state_of(self, k: int): ...


class Progress:
  """A progress line every `every` steps: step, loss (each member's), steps/s, target
  tokens/s (all members'), ETA; each member's training curves in its own TensorBoard."""

  def __init__(self, total: int, start: int, every: int, writers: Sequence):
    self.total, self.every, self.writers = total, every, list(writers)
    self.t0, self.s0, self.loss, self.tokens, self.n = time.time(), start, 0.0, 0.0, 0

  def tick(self, step: int, m: dict) -> tuple[float, float, float] | None:
    """Adds the step's loss and tokens (m['loss'] a scalar, or [N] for a population) ->
    (seconds, steps/s, ETA seconds) since the last line when a line is due, else None."""
    # sums stay on the device until a line is printed: no host sync per step (an accelerator
    # then runs ahead of the host instead of waiting for it between steps)
    self.loss = self.loss + m['loss']
    self.tokens = self.tokens + m['tokens']
    self.n += 1
    if step % self.every and step != self.total:
      return None
    dt = max(time.time() - self.t0, 1e-9)
    rate = (step - self.s0) / dt
    return dt, rate, (self.total - step) / max(rate, 1e-9)

  def restart(self, step: int) -> None:
    """A new window of sums after a line at `step`."""
    self.t0, self.s0, self.loss, self.tokens, self.n = time.time(), step, 0.0, 0.0, 0

  def update(self, step: int, m: dict, live: Sequence[int]) -> None:
    due = self.tick(step, m)
    if due is None:
      return
    dt, rate, eta = due
    losses = np.atleast_1d(np.asarray(self.loss)) / max(self.n, 1)     # [N]
    grad_norms = np.atleast_1d(np.asarray(m['grad_norm']))            # [N]
    log(f'step {step:>6}/{self.total}  loss {" ".join(f"{x:.4f}" for x in losses)}  '
        f'{rate:.2f} steps/s  {float(np.sum(self.tokens)) / dt:,.0f} tok/s  '
        f'ETA {eta / 60:.1f} min')
    for k in live:
      self.writers[k].add_scalar('train/loss', float(losses[k]), step)
      self.writers[k].add_scalar('train/steps_per_sec', rate, step)
      self.writers[k].add_scalar('train/grad_norm', float(grad_norms[k]), step)
    self.restart(step)


def resume(sessions: Sequence[session_lib.Session], templates: list) -> list:
  """The members' states to start from: each restored at the newest latest step that every
  member holds (all fresh: `templates` as they are). Members are saved together at the same
  steps, and each keeps at least 2 latest steps when there are several, so a kill between
  two members' saves leaves the step before it common."""
  restored = [s.restore_newest(tpl) for s, tpl in zip(sessions, templates)]
  if all(r is None for r in restored):
    return templates
  at = [0 if r is None else r[2] for r in restored]
  step = min(at)
  for k, (s, tpl) in enumerate(zip(sessions, templates)):
    if at[k] == step:
      continue
    if step not in s.ckpts.latest.all_steps(read=True):
      where = ', '.join(f'{os.path.basename(x.workdir)}: {a or "none"}'
                        for x, a in zip(sessions, at))
      raise ValueError(f'the members\' newest checkpoints are at different steps ({where}) and '
                       f'{os.path.basename(s.workdir)} holds no step {step} to start with the '
                       'others: resume the members alone (without train.population), or start '
                       'afresh elsewhere')
    log(f'{os.path.basename(s.workdir)}: from step {step}, the newest step all members hold '
        f'(its newest is {at[k]})')
    restored[k] = s.restore_at(tpl, step)
  return [tpl if r is None else s.resume_from(r)
          for s, tpl, r in zip(sessions, templates, restored)]


def run(t: Loop, workdir: str, sessions: list[session_lib.Session],
        stepper: Stepper, graphdef, names: Sequence[str] | None = None,
        extra: Sequence[dict] | None = None) -> list[dict]:
  """Trains every member of `stepper` (sessions[k] its run) to train.steps from where they
  are, then evaluates each: -> each finished member's results (as written to its run
  directory), in order. `names` prefix a member's log lines (a population's 'seed_<k>');
  `extra[k]` goes into member k's results. `t`: the trainer's fields (Loop.of(cfg.train))."""
  n = stepper.members
  names = list(names) if names else [''] * n
  step = int(np.asarray(jax.device_get(stepper.state_of(0)['step'])))
  live = list(range(n))
  stopped: dict[int, BaseException] = {}   # member -> why it stopped (non-finite)
  progress = Progress(t.steps, step, t.log_every, [s.writer for s in sessions])

  def check_finite(pending) -> None:
    """Each live member's finiteness of the step in `pending` (step, metrics, batches):
    counted (train.skip_nonfinite), or that member stops."""
    if pending is None:
      return
    at, m, batches = pending
    for k in np.flatnonzero(~np.atleast_1d(np.asarray(m['finite']))):
      k = int(k)
      if k in stopped:
        continue
      try:
        sessions[k].check_finite((at, stepper.metrics_of(m, k), batches[k]))
      except FloatingPointError as e:
        stopped[k] = e
        live.remove(k)
        if n > 1:
          log(f'  {names[k]} stopped, the others train on: {e}')

  pending = None   # the last step whose finiteness is not yet read
  stop = preemption.StopRequest()
  with stop.installed():
    while step < t.steps and live:
      if stop.signum is not None:   # SIGTERM / SIGINT: save every member here, then exit
        check_finite(pending)
        for k, s in enumerate(sessions):
          if k in live:
            s.stop(step, stepper.state_of(k))
          else:
            s.close()
        raise preemption.Interrupted(stop.signum, step, ', '.join(
            sessions[k].latest_dir for k in live) or workdir)
      t_step = time.time()
      batches = [next(s.it) for s in sessions]
      m = stepper.step(batches)
      step += 1
      # the previous step's finiteness is read once this one is dispatched, so the device
      # never idles on the host between steps; a non-finite step leaves the state unchanged
      check_finite(pending)
      pending = (step, m, batches)
      seconds = time.time() - t_step
      for s in sessions:   # each member trained for all of it, side by side with the others
        s.train_time += seconds
      progress.update(step, m, live)
      evaluating = step % t.eval_every == 0 or step == t.steps
      saving = step % t.checkpoint_every == 0 or step == t.steps
      if evaluating or saving:
        check_finite(pending)   # before anything is evaluated or saved
        pending = None
      if evaluating:
        t_eval = time.time()
        for k in live:
          sessions[k].validate(step, stepper.state_of(k), prefix=f'{names[k]} ' if n > 1 else '')
        progress.t0 += time.time() - t_eval  # rates and ETA count training time only
      if saving:
        for k in live:
          sessions[k].save_latest(step, stepper.state_of(k))
      hold.point('train_step', lambda: stop.signum is not None, step=step, workdir=workdir)

  summaries = []
  for k, s in enumerate(sessions):
    if k in stopped:
      s.close()
      continue
    if n > 1:
      log(f'\n{names[k]} ({s.workdir}):')
    summaries.append(s.finish(graphdef, stepper.state_of(k), step,
                              extra=extra[k] if extra else None))
  if stopped and n == 1:
    raise stopped[0]
  if stopped:
    raise FloatingPointError(f'{len(stopped)} of {n} members stopped on a non-finite '
                             f'step (the others finished): ' + '; '.join(
                                 f'{names[k]}: {e}' for k, e in sorted(stopped.items())))
  return summaries
