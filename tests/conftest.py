"""Test-session settings. Unit tests compile many tiny graphs, so XLA's backend
optimisation is turned down and its older CPU emitters are used (TEST_XLA_FLAGS: compiles
2-5x faster; results are the same up to float rounding; a jaxlib that does not know them is
tested without them, and says so). Set ATTENTION_JAX_TEST_XLA_OPT=1 to test with full
optimisation. Float32 matmuls run at full precision (JAX_DEFAULT_MATMUL_PRECISION=highest:
the NumPy comparisons then hold on a GPU too, where the default is TF32). The programs
compiled by the session (its pytest-xdist workers and the experiments they start as
subprocesses: the same smoke models again and again) go to one JAX compilation cache per
session, removed at its end. Rank promotion raises (JAX_NUMPY_RANK_PROMOTION=raise).

Data fixtures: `data_cfg(name, **overrides)` gives a small `data` config section whose TFDS
data dir is one temp dir per test session (each offline task is prepared once).

`local_sweep`: one sweep of helpers.TINY_SWEEP under 2 seeds by the local executor, shared by
the sweep tests and the Ray executor's (whose runs must end with the same metrics)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import filelock
import pytest

# -O0, and XLA:CPU's older elemental emitters instead of its fusion emitters: a small model's
# gradient compiled in 1.0 s instead of 2.5 s here (jaxlib 0.10.2); the LLVM module compiled
# as one piece, not split across threads (test_model.py's gradient tests in one process: XLA's
# compile time 36.2 -> 32.3 s; under two pytest-xdist workers test_model + test_modes took the
# same time either way, 126 vs 129 s, 2026-11-27)
TEST_XLA_FLAGS = ('--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false '
                  '--xla_cpu_parallel_codegen_split_count=1')


def _xla_knows(flags: str) -> bool:
  """Whether the installed XLA accepts `flags`: it exits the process on an unknown flag (and
  under pytest's capture that exit is silent: "no tests ran"); jaxlib 0.11 dropped
  --xla_cpu_use_fusion_emitters. One subprocess, about a second."""
  env = {**os.environ, 'XLA_FLAGS': flags, 'JAX_PLATFORMS': 'cpu'}
  probe = 'import jax; jax.jit(lambda x: x + 1)(1)'
  return subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True,
                        check=False).returncode == 0


# XLA:CPU aborts the process when a collective's threads do not all arrive within 40 s
# (--xla_cpu_collective_call_terminate_timeout_seconds): the 8 simulated devices of the
# parallel tests on a loaded 2-core machine can take longer, so a test would race the clock
COLLECTIVE_FLAGS = ('--xla_cpu_collective_call_terminate_timeout_seconds=3600 '
                    '--xla_cpu_collective_call_warn_stuck_timeout_seconds=600')
_wanted = []      # (flags, what is said where this XLA does not take them, or None)
if (os.environ.get('ATTENTION_JAX_TEST_XLA_OPT') != '1'
    and '--xla_backend_optimization_level' not in os.environ.get('XLA_FLAGS', '')):
  # said, not silent: the tests then compile at full optimisation (slower)
  _wanted.append((TEST_XLA_FLAGS, f'conftest: this jaxlib does not accept {TEST_XLA_FLAGS!r}; '
                                  'testing without them'))
if COLLECTIVE_FLAGS.split('=')[0] not in os.environ.get('XLA_FLAGS', ''):
  _wanted.append((COLLECTIVE_FLAGS, None))
# one probe for all of them (the usual case: a second less at the session's start), else one each
_all = ' '.join([os.environ.get('XLA_FLAGS', ''), *(f for f, _ in _wanted)]).strip()
if _wanted and _xla_knows(_all):
  os.environ['XLA_FLAGS'] = _all
else:
  for _add, _said in _wanted:
    _flags = (os.environ.get('XLA_FLAGS', '') + ' ' + _add).strip()
    if _xla_knows(_flags):
      os.environ['XLA_FLAGS'] = _flags
    elif _said:
      print(_said, file=sys.stderr)
# the tests compare with NumPy in float32 (1e-5): on a GPU JAX's default matmul
# precision is lower (TF32 on NVIDIA GPUs); on the CPU this changes nothing
os.environ.setdefault('JAX_DEFAULT_MATMUL_PRECISION', 'highest')
# implicit broadcasting between arrays of different ranks ([B, T, D] + [D]) is an error in
# the tests (as in nanodo): a shape bug cannot hide behind it; the code broadcasts explicitly.
# Set before jax is imported: workers and the experiments the tests start inherit it
os.environ.setdefault('JAX_NUMPY_RANK_PROMOTION', 'raise')
# set before jax is imported; pytest-xdist workers inherit it from the controller
_OWN_CACHE = 'JAX_COMPILATION_CACHE_DIR' not in os.environ
if _OWN_CACHE:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='attention_jax_test_jit_')
  # every program, however quick to compile: tests build the same tiny models again and again
  # (across tests, workers and subprocesses), and at -O0 most compile in under 0.3 s
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')

from helpers import TINY_SWEEP, sweep_cmd  # pylint: disable=g-import-not-at-top,wrong-import-position


def pytest_sessionfinish(session):
  if _OWN_CACHE:        # the process that made it (the controller, after every worker)
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


# the longest modules first (worker-seconds in a run of 2026-11-27 with --durations=0:
# test_attribution ~230, test_transformer ~210, test_images ~195, test_sweep ~135 with the
# shared sweep it starts, test_model ~125, test_translate ~120, test_benchmark ~100, ...):
# launch.sh runs pytest-xdist with --no-loadscope-reorder, so modules are handed out in this
# order and no long one starts last while the other worker idles (xdist's default reorders by
# the number of tests, which put the sweep modules, few tests of a minute each, last).
# test_explorer (the browser tier only, selected by CI's second command) takes ~200 s.
# test_guard_list (extended: every guard of tests/guards.toml removed in turn) takes minutes.
FIRST = ('test_guard_list.py', 'test_explorer.py', 'test_sweep.py', 'test_attribution.py', 'test_transformer.py',
         'test_images.py',
         'test_model.py', 'test_translate.py', 'test_benchmark.py', 'test_train.py',
         'test_population.py', 'test_reliability.py', 'test_modes.py', 'test_cmudict.py',
         'test_parallel.py', 'test_ensemble.py', 'test_guided_alignment.py', 'test_align.py')


def pytest_collection_modifyitems(items):
  """Modules in FIRST's order, then the rest as collected."""
  rank = {name: i for i, name in enumerate(FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


@pytest.fixture(scope='session')
def tfds_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('tensorflow_datasets'))


@pytest.fixture
def data_cfg(tfds_dir):
  from experiments.configs import common  # pylint: disable=g-import-not-at-top
  def make(name, **overrides):
    from attention_jax.data import data_fields as fields  # pylint: disable=g-import-not-at-top
    d = common.base_config().data
    small = dict(name=name, data_dir=tfds_dir, num_train=300, num_valid=40, num_test=40,
                 max_len=12, test_max_len=20, batch_size=16)
    read = fields.reads(name)   # small sizes of the fields the task reads
    d.update({k: v for k, v in small.items() if read is None or k in read})
    d.update(overrides)
    return d
  return make


def _shared(tmp_path_factory):
  """The temp dir every pytest-xdist worker of this session shares (the base temp dir when
  there are no workers)."""
  base = tmp_path_factory.getbasetemp()
  return base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """One TFDS data dir for the whole session, all workers (each offline task is prepared once,
  under builders.make's lock), for the smoke runs of tests/helpers.smoke. Tests that check a
  preparation itself make their own."""
  path = _shared(tmp_path_factory) / 'shared_tfds'
  path.mkdir(exist_ok=True)
  return str(path)


@pytest.fixture(scope='session')
def smoke_run(tmp_path_factory, data_dir):
  """(config, workdir, summary) of `dates:smoke` (8 steps, checkpoints at 4 and 8, 3
  heatmaps) trained once per session: the first worker to ask trains it, under a file lock,
  the others read it. Read-only: a test that changes or resumes the run copies it first.
  summary is the run's results.json."""
  from attention_jax.training import train  # pylint: disable=g-import-not-at-top
  from experiments.configs import dates  # pylint: disable=g-import-not-at-top
  from helpers import smoke  # pylint: disable=g-import-not-at-top
  base = _shared(tmp_path_factory)
  workdir = base / 'smoke_run'
  cfg = smoke(dates, data_dir, **{'eval.heatmaps': 3})
  with filelock.FileLock(str(base / 'smoke_run.lock')):
    if not (workdir / 'results.json').exists():
      shutil.rmtree(workdir, ignore_errors=True)      # a worker that died while training it
      train.train_and_evaluate(cfg, str(workdir))
  with open(workdir / 'results.json') as f:
    return cfg, str(workdir), json.load(f)


@pytest.fixture(scope='session')
def local_sweep(tmp_path_factory):
  """(sweep file, root, data dir, the finished process) of TINY_SWEEP, --seeds=2, two runs at
  a time, into <root>/tiny_sweep_smoke/<variant>/seed_<k> (the broken variant fails). Run
  once per test session: under pytest-xdist the first worker to ask runs it, under a file
  lock, and the others read its outcome."""
  base = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    base = base.parent                      # the temp dir all workers of this session share
  tmp = base / 'local_sweep'
  path, root, data_dir = tmp / 'tiny_sweep.py', tmp / 'runs', tmp / 'tfds'
  with filelock.FileLock(str(base / 'local_sweep.lock')):
    done = tmp / 'process.json'
    if not done.exists():
      tmp.mkdir(exist_ok=True)
      path.write_text(TINY_SWEEP)
      proc = subprocess.run(sweep_cmd(path, root, data_dir, '--parallel=2'), cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
      done.write_text(json.dumps([[str(a) for a in proc.args], proc.returncode, proc.stdout,
                                  proc.stderr]))
    proc = subprocess.CompletedProcess(*json.loads(done.read_text()))
  return path, root, data_dir, proc


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
