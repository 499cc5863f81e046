"""Ray as the sweep executor: on a simulated two-node cluster (ray.cluster_utils.Cluster, as
Ray's own tests do), a sweep of 2 good variants gives every run the final metrics of the
local executor's, bit for bit, though one run's process is SIGKILLed mid-training (it is
retried and resumes from its checkpoint); runs land on both nodes and the sweep says where; a
run with a bad config fails once, unretried, and the others finish. Requests no node can meet
and storage a node cannot see are refused before anything runs (the CLI prints such errors in
one line, exit 2, as every expected failure: experiments/cli.py)."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest
import ray
from ray.cluster_utils import Cluster

from attention_jax.sweeps import ray_executor
from helpers import hold_env, sweep_cmd, wait_held

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = [f'{v}/seed_{k}' for v in ('additive', 'general') for k in (1, 2)]


def metrics(sweep_dir, run):
  with open(os.path.join(sweep_dir, run, 'results.json')) as f:
    return json.load(f)['results']


def attempts(sweep_dir, run):
  with open(os.path.join(sweep_dir, run, 'wall_time.json')) as f:
    return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope='module')
def setup(local_sweep):
  """The sweep file, its data dir, and the local executor's results of the 4 good runs
  (conftest.local_sweep)."""
  path, root, data_dir, proc = local_sweep
  local = root / 'tiny_sweep_smoke'
  assert all((local / run / 'results.json').exists() for run in RUNS), proc.stdout + proc.stderr
  return path, data_dir, {run: metrics(local, run) for run in RUNS}


def descendants(pid: int) -> dict[int, str]:
  """The processes below `pid` now ({pid: command line}), from /proc."""
  children: dict[int, list[int]] = {}
  for d in os.listdir('/proc'):
    try:
      with open(f'/proc/{d}/stat') as f:
        ppid = int(f.read().rsplit(')', 1)[1].split()[1])
      children.setdefault(ppid, []).append(int(d))
    except (OSError, ValueError, IndexError):
      continue
  out, todo = {}, list(children.get(pid, []))
  while todo:
    p = todo.pop()
    try:
      with open(f'/proc/{p}/cmdline', 'rb') as f:
        out[p] = f.read().replace(b'\0', b' ').decode(errors='replace').strip()
    except OSError:
      continue
    todo += children.get(p, [])
  return out


def alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'   # a zombie is gone but unreaped
  except OSError:
    return False


def wait_gone(pids: dict[int, str], patience: float = 300) -> dict[int, str]:
  """Waits until every process of `pids` has exited; returns those still alive after
  `patience` seconds (a bound against a hang only: each exits on its own)."""
  deadline = time.time() + patience
  while (left := {p: c for p, c in pids.items() if alive(p)}) and time.time() < deadline:
    time.sleep(0.2)
  return left


@pytest.fixture(scope='module')
def killed_driver(setup, tmp_path_factory):
  """The sweep's driver (with its own local Ray cluster) SIGKILLed while its run is at step
  60 (checkpoints at 25, 50, 75; hold.py, held through the signal), then, once its own
  processes have gone but the run, which still holds its workdir (it got SIGTERM and is about
  to save step 60), the same command at once; the run is released when the rerun's task says
  in the run's log that it waits -> what the tests below check: the processes the driver had
  started, those of them left behind (Ray's agents aside), the rerun. Ray's agents of the
  killed cluster exit by themselves about 60 s later (a GCS call's timeout): their test comes
  last in this module, so the wait overlaps the other tests."""
  path, data_dir, _ = setup
  tmp_path = tmp_path_factory.mktemp('killed_driver')
  cmd = sweep_cmd(path, tmp_path, data_dir, '--executor=ray', '--ray_cpus=1', '--only=additive',
                  seeds=1)
  victim = tmp_path / 'tiny_sweep_smoke' / 'additive' / 'seed_1'
  held_file = tmp_path / 'held'
  env = hold_env(held_file, step=60, workdir=victim)
  env['ATTENTION_JAX_HOLD'] = json.dumps({**json.loads(env['ATTENTION_JAX_HOLD']),
                                          'through_signals': True})
  driver = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
  try:
    run_pid = wait_held(held_file, driver)['pid']
    started = descendants(driver.pid)
  finally:
    driver.kill()
  driver.communicate(timeout=300)
  agents = {p: c for p, c in started.items() if 'Agent' in c}
  left = wait_gone({p: c for p, c in started.items() if p not in agents and p != run_pid})
  again = waited = None
  if not left:                                  # (else the test below says what stayed)
    deadline = time.time() + 600   # a hang guard: the run's SIGTERM comes as its worker dies
    while not json.loads(held_file.read_text()).get('signalled'):
      assert alive(run_pid) and time.time() < deadline, 'the run got no SIGTERM'
      time.sleep(0.05)
    rerun = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
      log = victim / 'train.log'
      while '[additive/seed_1] waiting: ' not in (waited := log.read_text()):
        assert rerun.poll() is None, rerun.communicate()[0][-3000:]
        assert time.time() < deadline + 600, 'the rerun did not wait for the run'
        time.sleep(0.05)
      held_file.unlink()                          # released: it saves step 60 and exits
      out = rerun.communicate(timeout=1800)[0]
    finally:
      if rerun.poll() is None:
        rerun.kill()
        rerun.wait()
    again = subprocess.CompletedProcess(cmd, rerun.returncode, out, '')
    left = wait_gone({run_pid: started[run_pid]})
  return dict(run_pid=run_pid, started=started, agents=agents, left=left, again=again,
              waited=waited, victim=victim, sweep_dir=tmp_path / 'tiny_sweep_smoke')


@pytest.mark.scenario
def test_a_sigkilled_driver_leaves_nothing_behind_and_a_rerun_resumes_its_runs(setup,
                                                                              killed_driver):
  """The sweep's driver SIGKILLed while a run is at step 60 (killed_driver): the run gets
  SIGTERM, saves step 60 and exits, and the Ray workers go; the same command at once waits
  for the run (its task says so in the run's log) and resumes it from step 60, and the report
  has it once."""
  _, _, local = setup
  k = killed_driver
  assert k['run_pid'] in k['started'], k['started']
  assert not k['left'], f'left behind by the killed driver: {k["left"]}'
  out = k['again'].stdout + k['again'].stderr
  assert k['again'].returncode == 0, out
  assert '1 finished, 0 skipped, 0 failed' in out, out
  victim, sweep_dir = k['victim'], k['sweep_dir']
  assert f'is in use by process {k["run_pid"]} on ' in k['waited'], k['waited'][-3000:]
  log = (victim / 'train.log').read_text()
  assert 'stopped by SIGTERM at step 60' in log and (
      f'resumed from {victim}/checkpoints/latest step 60') in log, log[-3000:]
  assert metrics(sweep_dir, 'additive/seed_1') == local['additive/seed_1']   # as if unbroken
  runs_csv = (sweep_dir / 'runs.csv').read_text().splitlines()
  assert [line.split(',')[1] for line in runs_csv[1:]] == ['additive/seed_1'], runs_csv
  assert '| additive | 1 |' in (sweep_dir / 'summary.md').read_text()


@pytest.mark.scenario
def test_two_nodes_a_killed_run_and_a_bad_config(setup, tmp_path):
  """On a simulated two-node cluster (1 CPU each), one seed of each variant: the runs land on
  both nodes and the sweep says where; a run's process SIGKILLed mid-training is retried and
  resumes; the bad config fails once, unretried; every good run ends with the local
  executor's metrics, bit for bit. (One seed: the runs of a second seed took the same paths.)
  The victim, additive/seed_1, is killed once general/seed_1 has started (after the broken
  run failed): general holds the other node, so the retry runs where the victim did."""
  path, data_dir, local = setup
  cluster = Cluster(initialize_head=True, head_node_args={'num_cpus': 1})
  sweep_dir = tmp_path / 'tiny_sweep_smoke'
  try:
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    victim = sweep_dir / 'additive' / 'seed_1'
    held_file = tmp_path / 'held'      # the victim holds at step 50 (hold.py): no race
    proc = subprocess.Popen(sweep_cmd(path, tmp_path, data_dir, '--executor=ray',
                                      f'--ray_address={cluster.address}', seeds=1),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=hold_env(held_file, step=50, workdir=victim))
    try:
      killed = wait_held(held_file, proc)['pid']
      wait_started(sweep_dir / 'general' / 'seed_1', proc)
      os.kill(killed, signal.SIGKILL)      # the run's training process, mid-training
    finally:
      text, _ = proc.communicate(timeout=1800)
  finally:
    cluster.shutdown()
  assert proc.returncode == 1, text                 # the broken variant failed ...
  assert '2 finished, 0 skipped, 1 failed (broken/seed_1)' in text
  # ... once: exit 2, not retried
  assert [a['returncode'] for a in attempts(sweep_dir, 'broken/seed_1')] == [2]
  first, second = attempts(sweep_dir, 'additive/seed_1')
  assert first['returncode'] == -signal.SIGKILL and second['returncode'] == 0
  log = (victim / 'train.log').read_text()
  assert 'attempt 2 on' in log and 'resum' in log.split('attempt 2 on')[1].lower(), log[-3000:]
  runs = [run for run in RUNS if run.endswith('seed_1')]
  for run in runs:
    assert metrics(sweep_dir, run) == local[run], run   # bit-identical final metrics
  nodes = {attempts(sweep_dir, run)[-1]['node_id'] for run in runs}
  assert len(nodes) == 2, nodes                     # both nodes ran some
  where = text.split('where each run ran:')[1]
  assert sum('Ray node' in line for line in where.splitlines()) == 2, where
  runs_csv = (sweep_dir / 'runs.csv').read_text()
  assert all(n[:8] in runs_csv for n in nodes)      # the report says where each ran


def wait_started(workdir, proc, patience: float = 1800):
  """Waits for the event: the run's first attempt started (its log's header, written by the
  Ray task before the run's process starts). Fails at once if the sweep `proc` ends first."""
  deadline = time.time() + patience
  while not (workdir / 'train.log').exists():
    assert proc.poll() is None, f'the sweep ended (exit {proc.returncode}) before {workdir} ran'
    assert time.time() < deadline, f'{workdir} did not start in {patience:.0f} s'
    time.sleep(0.05)


@pytest.mark.extended   # a Ray cluster started (7 s): after the suite, in CI
def test_a_trial_no_node_can_run_and_storage_a_node_cannot_see_are_refused(tmp_path,
                                                                         monkeypatch):
  monkeypatch.setenv('RAY_worker_niceness', '0')   # as the sweep's own local cluster does
  ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
  try:
    with pytest.raises(ValueError, match=r'no node of the Ray cluster offers what one run asks '
                       r'for \(CPU=1, GPU=1\); nodes have: CPU=1'):
      ray_executor.check_resources(ray, {'CPU': 1, 'GPU': 1, 'TPU': 0})
    ray_executor.check_resources(ray, {'CPU': 1, 'GPU': 0, 'TPU': 0})
    # a node whose view of the project differs from the driver's (here: none there)
    with pytest.raises(OSError, match='storage every node sees: Ray node .* has no project'):
      ray_executor.check_shared_storage(ray, str(tmp_path / 'sweep'), str(tmp_path))
    assert ray_executor.check_shared_storage(ray, str(tmp_path / 'sweep'), ROOT) == [
        socket.gethostname()]                        # one node, this host
    assert os.listdir(tmp_path / 'sweep') == []     # the probe files are removed
  finally:
    ray.shutdown()


@pytest.mark.scenario
def test_the_ray_agents_of_a_sigkilled_driver_s_cluster_exit_by_themselves(killed_driver):
  """(Last in the module: the agents take about 60 s, see killed_driver.)"""
  assert not (left := wait_gone(killed_driver['agents'])), (
      f'Ray agents of the killed cluster stayed: {left}')
