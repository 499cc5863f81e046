"""Shared by the end-to-end tests: an experiment's `smoke` config on a test TFDS dir, a
training in a subprocess at XLA's full optimisation, a tiny sweep file and its command line."""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# NumPy references of scores registered at test time (tests/throwaway_score.py), by name
EXTRA_NUMPY_REFERENCES = {}


def smoke(module, data_dir, **overrides):
  """module.get_config('smoke') with data in data_dir and 'section.field' overrides."""
  c = module.get_config('smoke')
  c.data.data_dir = data_dir
  for key, value in overrides.items():   # 'seed' or 'section.field'
    *section, field = key.split('.')
    (c[section[0]] if section else c)[field] = value
  return c


def optimised_env() -> dict:
  """os.environ without the tests' XLA flags (conftest.TEST_XLA_FLAGS): for a subprocess
  whose run time is its computation, not its compilations (a 600-step Transformer trained in
  30 s instead of 82 s)."""
  flags = ' '.join(f for f in os.environ.get('XLA_FLAGS', '').split()
                   if not f.startswith(('--xla_backend_optimization_level',
                                        '--xla_cpu_use_fusion_emitters')))
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  return {**env, 'XLA_FLAGS': flags} if flags else env


def train_optimised(config: str, workdir, **overrides) -> dict:
  """`python -m experiments.main --config=config --workdir=workdir --config.<key>=<value>...`
  at XLA's full optimisation -> its results.json."""
  proc = subprocess.run(
      [sys.executable, '-m', 'experiments.main', f'--config={config}', f'--workdir={workdir}',
       *(f'--config.{k}={v}' for k, v in overrides.items())],
      cwd=ROOT, capture_output=True, text=True, timeout=600, env=optimised_env())
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(workdir, 'results.json')) as f:
    return json.load(f)


# a sweep file of two variants and one whose config is invalid (model.attn_dim < 1)
TINY_SWEEP = """
from experiments.configs import dates

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'}),
          ('broken', {'model.attn_dim': -3}),
          ('general', {'model.score': 'general', 'model.decoder': 'luong'})]
"""

# long enough to be held and killed after a checkpoint (step 50 of 25-step checkpoints:
# tests/test_sweep.py, tests/test_ray_sweep.py) and resume for one more; the same for every
# executor
SWEEP_STEPS = 75
SWEEP_TRAIN = [f'--config.train.steps={SWEEP_STEPS}', '--config.train.checkpoint_every=25',
               f'--config.train.eval_every={SWEEP_STEPS}', '--config.train.log_every=25',
               '--config.eval.heatmaps=0']


def sweep_cmd(path, root, data_dir, *flags, seeds=2):
  """The command line of a smoke sweep of the sweep file `path` (SWEEP_TRAIN budget)."""
  return [sys.executable, '-m', 'experiments.sweep', f'--sweep={path}:smoke', f'--root={root}',
          f'--seeds={seeds}', *flags, '--', f'--config.data.data_dir={data_dir}', *SWEEP_TRAIN]


def hold_env(file, at: str = 'train_step', **where) -> dict:
  """os.environ plus ATTENTION_JAX_HOLD (attention_jax/hold.py): the process that reaches
  point `at` with `where` (e.g. step=50, workdir=W) writes `file` and waits there until the
  test removes it or stops the process. Tests interrupt runs at such a point, never by
  racing the machine's speed."""
  spec = {'at': at, 'file': str(file), **{k: str(v) if k == 'workdir' else v
                                          for k, v in where.items()}}
  return {**os.environ, 'ATTENTION_JAX_HOLD': json.dumps(spec)}


def wait_held(file, proc, patience: float = 1800) -> dict:
  """Waits for the event: `file` written by a held process (hold_env); returns what it says
  (pid, point). Fails at once if `proc` ends first; `patience` only guards against a hang."""
  deadline = time.time() + patience
  while not os.path.exists(file):
    if proc.poll() is not None:
      said = proc.stdout.read()[-3000:] if proc.stdout else ''
      raise AssertionError(f'the process ended (exit {proc.returncode}) before it held: {said}')
    assert time.time() < deadline, f'nothing held in {patience:.0f} s'
    time.sleep(0.05)
  with open(file) as f:
    return json.load(f)
