"""Test-session settings. Unit tests compile many tiny graphs, so XLA's backend
optimisation is turned down (halves compile time; results are the same up to float
rounding). Set ATTENTION_JAX_TEST_XLA_OPT=1 to test with full optimisation.

Data fixtures: `data_cfg(name, **overrides)` gives a small `data` config section whose TFDS
data dir is one temp dir per test session (each offline task is prepared once).

`local_sweep`: one sweep of helpers.TINY_SWEEP under 2 seeds by the local executor, shared by
the sweep tests and the Ray executor's (whose runs must end with the same metrics)."""

import os
import subprocess

import pytest

from helpers import TINY_SWEEP, sweep_cmd

if os.environ.get('ATTENTION_JAX_TEST_XLA_OPT') != '1':
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             ' --xla_backend_optimization_level=0').strip()


@pytest.fixture(scope='session')
def tfds_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('tensorflow_datasets'))


@pytest.fixture
def data_cfg(tfds_dir):
  from experiments.configs import common  # pylint: disable=g-import-not-at-top
  def make(name, **overrides):
    d = common.base_config().data
    d.update(dict(name=name, data_dir=tfds_dir, num_train=300, num_valid=40, num_test=40,
                  max_len=12, test_max_len=20, batch_size=16))
    d.update(overrides)
    return d
  return make


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  """A TFDS data dir per test module (for the smoke runs of tests/helpers.smoke)."""
  return str(tmp_path_factory.mktemp('tfds'))


@pytest.fixture(scope='session')
def local_sweep(tmp_path_factory):
  """(sweep file, root, data dir, the finished process) of TINY_SWEEP, --seeds=2, two runs at
  a time, into <root>/tiny_sweep_smoke/<variant>/seed_<k> (the broken variant fails)."""
  tmp = tmp_path_factory.mktemp('local_sweep')
  path, root, data_dir = tmp / 'tiny_sweep.py', tmp / 'runs', tmp / 'tfds'
  path.write_text(TINY_SWEEP)
  proc = subprocess.run(sweep_cmd(path, root, data_dir, '--parallel=2'), cwd=ROOT,
                        capture_output=True, text=True, timeout=900)
  return path, root, data_dir, proc


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
