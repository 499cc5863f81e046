"""Ray as the sweep executor: every run of a sweep (variant x seed) is one Ray task; with
`--population`, every population (a variant's seeds as one process) is.

  bash launch.sh sweep FILE --executor=ray                        # a local Ray cluster
  bash launch.sh sweep FILE --executor=ray --ray_address=auto     # join the running cluster
  bash launch.sh sweep FILE --executor=ray --ray_address=HEAD:6379 --trial_gpus=1

The trial list, the skip rule (a finished run) and the report are the local executor's
(attention_jax/sweeps/sweep_file.py). Each task asks the cluster for --trial_cpus / --trial_gpus /
--trial_tpus and runs `python -m experiments.main ...` as a child process into its workdir,
so as many runs go at once as the cluster holds. The sweep root and the project are read and
written by every node at the same path: shared storage (NFS, a parallel filesystem), checked
at the start by a probe task on every node.

Faults. A run's process that dies by a signal (SIGKILL, the kernel's or Ray's out-of-memory
killer) or is preempted (SIGTERM: exit 143), and a worker or node that dies under it, are
retried up to --max_retries times; a retry resumes from the run's last checkpoint, so its
results are those of an uninterrupted run. A run that exits with an error (a bad config, bad
data: exit 1 or 2) is deterministic: reported once, never retried. One failed run never stops
the others. Ctrl-C cancels the tasks: each sends its run SIGTERM, which saves a checkpoint and
stops; running the sweep again resumes every run. A run's process also gets SIGTERM when its
Ray worker dies (PR_SET_PDEATHSIG), so no training outlives its task; a task started while
such a run still saves (the same command at once after a killed driver) waits for its
workdir's lock, saying so in the run's log, and resumes from the step saved. (Ray itself
SIGKILLs a dying worker's child processes unless its nodes run with
RAY_kill_child_processes_on_worker_exit=0, which the sweep's own local cluster does; on a
cluster joined with --ray_address, start the nodes so, or a run whose worker dies loses the
steps since its last checkpoint.)

This is many independent trainings on many machines. One training on many hosts is
`jax.distributed` (experiments/main.py --coordinator ...), which this does not replace.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

from attention_jax import devices
from attention_jax import workdir as workdir_lib
from attention_jax.sweeps import attempts
from attention_jax.sweeps import sweep_file as sweep_lib

# exits that say the process was killed or preempted, not that the run is wrong
RETRIED_EXITS = (128 + signal.SIGKILL, 128 + signal.SIGTERM)
# the driver's environment that a run needs on any node (the rest is the node's own)
PASS_ENV = ('PYTHONPATH', 'XLA_FLAGS', 'GLIBC_TUNABLES', 'TF_CPP_MIN_LOG_LEVEL',
            'TFDS_DATA_DIR')
PASS_ENV_PREFIXES = ('JAX_', 'ATTENTION_JAX_')
PROBE_DIR = '.ray_probe'


class TrialDied(Exception):
  """The run's process was killed (a signal, out of memory, preemption): retry it."""


def _signal_name(returncode: int) -> str:
  num = -returncode if returncode < 0 else returncode - 128
  try:
    return signal.Signals(num).name
  except ValueError:
    return f'signal {num}'


def _where() -> dict:
  import ray  # pylint: disable=g-import-not-at-top
  return {'executor': 'ray', 'host': socket.gethostname(),
          'ip': ray.util.get_node_ip_address(),
          'node_id': ray.get_runtime_context().get_node_id()}


def _trial(cmd: list[str], v, cwd: str, env: dict, progress) -> dict:
  """One attempt of one run (or of a population: one process for its members), inside a Ray
  task: the experiment process, its log appended to the run's log (a population's: the first
  member's, copied to the others'; attempts.open_log). Raises TrialDied (Ray retries) when the
  process was killed."""
  where = _where()
  progress.started.remote(v.label, where)
  nice = os.getpriority(os.PRIO_PROCESS, 0)
  members = v.members
  for m in members:
    os.makedirs(m.workdir, exist_ok=True)
  attempt = 1 + len(workdir_lib.Run(members[0].workdir).attempts())
  t0 = time.time()

  def record(returncode: int) -> float:
    seconds = time.time() - t0
    attempts.copy_log(v, offset)
    for m in members:
      attempts.record_attempt(m.workdir, seconds, returncode, share=len(members), **where)
    return seconds

  log, offset = attempts.open_log(v)
  with log:
    log.write(f'== {v.label}: attempt {attempt} on {where["host"]} ({where["ip"]}, Ray node '
              f'{where["node_id"][:8]}; worker niceness {nice}) ==\n')
    log.flush()
    for m in members:   # the attempt of a killed driver may still be saving (SIGTERM): waited for
      attempts.wait_for_workdir(m, say=lambda line: (log.write(line + '\n'), log.flush()))
    # a session of its own: Ray kills its worker's process group as the worker goes (SIGKILL:
    # no checkpoint at the step it was at); out of that group the run gets SIGTERM when the
    # worker dies (die_with_parent), saves and exits
    proc = subprocess.Popen([sys.executable, *cmd[1:]], cwd=cwd, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **env},
                            preexec_fn=_preexec, start_new_session=True)
    try:   # polled, not proc.wait(): ray.cancel's KeyboardInterrupt reaches Python code
      while (returncode := proc.poll()) is None:   # only between bytecodes
        time.sleep(0.2)
    except KeyboardInterrupt:   # ray.cancel: the run saves a checkpoint and stops
      proc.send_signal(signal.SIGTERM)
      try:
        proc.wait(timeout=300)
      except subprocess.TimeoutExpired:
        proc.kill()
      returncode = proc.wait()
      log.close()
      record(returncode)
      raise
  seconds = record(returncode)
  if returncode < 0 or returncode in RETRIED_EXITS:
    raise TrialDied(f'{v.label}: its process died by {_signal_name(returncode)} on '
                    f'{where["host"]} after {seconds:.0f} s')
  return {'returncode': returncode, 'seconds': seconds, **where}


def _preexec() -> None:
  """The run's process: dies with its worker, and runs at niceness 0 where it may. (Ray
  starts workers at niceness 15; on a shared machine a run would then crawl beside anyone
  else's work. Lowering niceness needs CAP_SYS_NICE: without it the run keeps the worker's,
  and the attempt's header in the run's log says which.)"""
  attempts.die_with_parent()
  try:
    os.setpriority(os.PRIO_PROCESS, 0, 0)
  except PermissionError:
    pass


def _probe(sweep_dir: str, cwd: str, token: str) -> tuple[str, str | None]:
  """On one node: can it read what the driver wrote in the sweep root, write there, and
  find the project? -> (host, problem or None)."""
  host = socket.gethostname()
  if not os.path.isfile(os.path.join(cwd, 'experiments', 'main.py')):
    return host, f'has no project at {cwd} (experiments/main.py)'
  probe = os.path.join(sweep_dir, PROBE_DIR)
  try:
    with open(os.path.join(probe, 'driver')) as f:
      if f.read() != token:
        return host, f'sees another {probe} than the driver'
    with open(os.path.join(probe, _where()['node_id']), 'w') as f:
      f.write(token)
  except OSError as e:
    return host, f'cannot use {sweep_dir}: {e.strerror or e}'
  return host, None


class _Progress:
  """A Ray actor the tasks report their start to: which runs are running, and where."""

  def __init__(self):
    self.running = {}

  def started(self, label: str, where: dict) -> None:
    self.running[label] = where

  def get(self) -> dict:
    return self.running


def _nodes(ray) -> list[dict]:
  return [n for n in ray.nodes() if n.get('Alive')]


def check_resources(ray, request: dict) -> None:
  """Fails at once if no node can ever run a trial (Ray would wait forever)."""
  nodes = _nodes(ray)
  if not any(all(n['Resources'].get(k, 0) >= v for k, v in request.items() if v)
             for n in nodes):
    have = '; '.join(', '.join(f'{k}={v:g}' for k, v in sorted(n['Resources'].items())
                               if k in ('CPU', 'GPU', 'TPU'))
                     for n in nodes)
    raise ValueError(f'no node of the Ray cluster offers what one run asks for '
                     f'({", ".join(f"{k}={v:g}" for k, v in request.items() if v)}); nodes '
                     f'have: {have}; lower --trial_cpus/--trial_gpus/--trial_tpus')


def check_shared_storage(ray, sweep_dir: str, cwd: str, timeout: float = 600.0) -> list[str]:
  """Every alive node must see the driver's sweep root and project: one probe task per node
  (scheduled on it, no resources). Raises OSError naming the first node that cannot;
  returns the nodes' hosts. `timeout` is generous: a probe's worker imports the package
  (JAX among it), which takes minutes on a heavily loaded core."""
  from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top
  probe_dir = os.path.join(sweep_dir, PROBE_DIR)
  os.makedirs(probe_dir, exist_ok=True)
  token = uuid.uuid4().hex
  with open(os.path.join(probe_dir, 'driver'), 'w') as f:
    f.write(token)
  remote = ray.remote(num_cpus=0, max_retries=0)(_probe)
  nodes = _nodes(ray)
  refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
      n['NodeID'], soft=False)).remote(os.path.abspath(sweep_dir), cwd, token) for n in nodes]
  ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
  try:
    for n, ref in zip(nodes, refs):
      where = f'Ray node {n["NodeID"][:8]} ({n.get("NodeManagerAddress", "?")})'
      if ref not in ready:
        raise OSError(f'{where} did not answer a storage probe within {timeout:.0f} s')
      host, problem = ray.get(ref)
      if problem is None and not os.path.exists(os.path.join(probe_dir, n['NodeID'])):
        problem = f'wrote a file the driver cannot see in {sweep_dir}'
      if problem:
        raise OSError(f'the sweep root must be storage every node sees: {where} on {host} '
                      f'{problem}; put --root and the project on a shared filesystem')
  finally:
    for f in os.listdir(probe_dir):
      os.remove(os.path.join(probe_dir, f))
    os.rmdir(probe_dir)
  return [ray.get(r)[0] for r in refs]


def _env() -> dict:
  env = {k: v for k, v in os.environ.items()
         if k in PASS_ENV or k.startswith(PASS_ENV_PREFIXES)}
  env['PYTHONPATH'] = os.pathsep.join(p for p in (os.getcwd(), env.get('PYTHONPATH')) if p)
  return env


def _line(counts: dict, eta: float | None) -> str:
  return (f'{counts["done"]} done, {counts["running"]} running, {counts["failed"]} failed, '
          f'{counts["queued"]} queued' + ('' if eta is None else f', ETA {eta / 60:.1f} min'))


def run(config_arg: str, name: str, queue: list, sweep_dir: str, extra_flags=(), *,
        address: str | None = None, trial_cpus: float = 1.0, trial_gpus: float = 0.0,
        trial_tpus: float = 0.0, max_retries: int = 3,
        num_cpus: int | None = None, quiet: bool = True) -> dict[str, str]:
  """Runs `queue` (sweep.Variant, unfinished) as Ray tasks; {label: finished|failed}.
  quiet: Ray's own notices (its logger below ERROR) are not printed.

  address: None starts a local Ray cluster for the sweep (num_cpus: its CPUs, default all);
  'auto' or 'HOST:PORT' joins a running one.
  """
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ValueError('--executor=ray needs the ray package: pip install "ray>=2.55,<3"') from e
  if quiet:   # (ray sets its logger's level when imported)
    logging.getLogger('ray').setLevel(logging.ERROR)
  if not queue:
    return {}
  if max_retries < 0 or min(trial_cpus, trial_gpus, trial_tpus) < 0:
    raise ValueError(f'--max_retries and --trial_* must be >= 0, got max_retries={max_retries}, '
                     f'trial_cpus={trial_cpus}, trial_gpus={trial_gpus}, trial_tpus={trial_tpus}')
  if not address:   # our own cluster: workers at niceness 0, like the local executor's runs
    os.environ.setdefault('RAY_worker_niceness', '0')
    # and a worker that exits leaves its run to die_with_parent's SIGTERM (the run saves and
    # exits) rather than Ray's SIGKILL of a worker's child processes (no save)
    os.environ.setdefault('RAY_kill_child_processes_on_worker_exit', '0')
  ray.init(address=address or 'local', num_cpus=None if address else num_cpus,
           include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
           configure_logging=False)
  try:
    request = {'CPU': trial_cpus, 'GPU': trial_gpus, 'TPU': trial_tpus}
    check_resources(ray, request)
    hosts = check_shared_storage(ray, sweep_dir, os.getcwd())
    print(f'sweep {name}: {len(queue)} runs to do -> {sweep_dir}/ on Ray '
          f'({len(hosts)} nodes, {ray.cluster_resources().get("CPU", 0):g} CPUs, '
          f'{ray.cluster_resources().get("GPU", 0):g} GPUs; each run asks '
          f'{", ".join(f"{k}={v:g}" for k, v in request.items() if v)}; up to {max_retries} '
          'retries of a killed run)', flush=True)
    return _schedule(ray, config_arg, queue, extra_flags, request, max_retries)
  finally:
    ray.shutdown()


def _schedule(ray, config_arg, queue, extra_flags, request, max_retries) -> dict[str, str]:
  progress = ray.remote(num_cpus=0)(_Progress).remote()
  env = _env()
  if not request['GPU']:
    env['CUDA_VISIBLE_DEVICES'] = ''     # a run that asked for no GPU gets none
  elif request['GPU'] < 1:               # a share of one GPU: that share of its memory
    env.update(devices.memory_env(request['GPU']))
  options = dict(num_cpus=request['CPU'], num_gpus=request['GPU'], max_retries=max_retries,
                 retry_exceptions=[TrialDied])
  if request['TPU']:
    options['resources'] = {'TPU': request['TPU']}
  remote = ray.remote(_trial)
  refs = {}
  for v in queue:
    os.makedirs(v.workdir, exist_ok=True)
    how = ('resuming' if any(workdir_lib.Run(m.workdir).has_checkpoints for m in v.members)
           else 'starting')
    print(f'[{v.label}] queued ({how}): {sweep_lib.describe(v)}', flush=True)
    cmd = sweep_lib.command(config_arg, v) + list(extra_flags)
    refs[remote.options(name=v.label, **options).remote(
        cmd, v, os.getcwd(), env, progress)] = v
  # status: of each run (a population's members each); done: of each task
  status, done_tasks, ran_on, pending, durations = {}, {}, {}, list(refs), []
  tty, last, t_start = sys.stdout.isatty(), None, time.time()
  try:
    while pending:
      done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
      for ref in done:
        v = refs[ref]
        try:
          out = ray.get(ref)
          why = f'exit {out["returncode"]}'
          durations.append(out['seconds'])
        except (ray.exceptions.RayTaskError, ray.exceptions.RayError) as e:
          cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
          out, why = None, (str(cause).strip().splitlines() or [type(cause).__name__])[-1]
        for m in v.members:
          ok = out is not None and sweep_lib.member_finished(v, m, out['returncode'])
          status[m.label] = 'finished' if ok else 'failed'
          if out is not None:
            ran_on[m.label] = out
          print(('\r' if tty else '') + f'[{m.label}] ' + (
              f'finished in {out["seconds"]:.0f} s on {out["host"]} (Ray node '
              f'{out["node_id"][:8]})' if ok else
              f'FAILED ({why}); see {workdir_lib.Run(m.workdir).train_log_path}'), flush=True)
        done_tasks[v.label] = all(status[m.label] == 'finished' for m in v.members)
      running = ray.get(progress.get.remote())
      counts = {'done': sum(done_tasks.values()),
                'failed': sum(not ok for ok in done_tasks.values()),
                'running': sum(1 for label in running if label not in done_tasks)}
      counts['queued'] = len(refs) - len(done_tasks) - counts['running']
      eta = None
      if durations and counts['running']:
        eta = sum(durations) / len(durations) * (counts['running'] + counts['queued']) / (
            counts['running'])
      line = _line(counts, eta)
      if tty:
        print(f'\r{line} ({time.time() - t_start:.0f} s)\033[K', end='', flush=True)
      elif line.split(', ETA')[0] != last:
        print(line, flush=True)
        last = line.split(', ETA')[0]
  except KeyboardInterrupt:
    print(f'\nstopping: cancelling {len(pending)} runs; each saves a checkpoint, and running '
          'the sweep again resumes them', flush=True)
    for ref in pending:
      ray.cancel(ref)
    ray.wait(pending, num_returns=len(pending), timeout=330)
    raise
  if tty:
    print()
  started = ray.get(progress.get.remote())
  _print_where(ran_on, {m.label: started[v.label] for v in queue for m in v.members
                        if v.label in started}, status)
  return status


def _print_where(ran_on: dict, started: dict, status: dict) -> None:
  """Where each run ran, grouped by node (the last attempt's node for a retried run)."""
  nodes = {}
  for label in status:
    where = ran_on.get(label) or started.get(label)
    key = (f'{where["host"]} ({where["ip"]}, Ray node {where["node_id"][:8]})' if where
           else 'never started')
    nodes.setdefault(key, []).append(label)
  print('where each run ran:', flush=True)
  for key, labels in sorted(nodes.items()):
    print(f'  {key}: {", ".join(labels)}', flush=True)
