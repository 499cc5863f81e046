"""Shared by the end-to-end tests: an experiment's `smoke` config on a test TFDS dir, a tiny
sweep file and its command line."""

import sys


def smoke(module, data_dir, **overrides):
  """module.get_config('smoke') with data in data_dir and 'section.field' overrides."""
  c = module.get_config('smoke')
  c.data.data_dir = data_dir
  for key, value in overrides.items():   # 'seed' or 'section.field'
    *section, field = key.split('.')
    (c[section[0]] if section else c)[field] = value
  return c


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

# long enough to be killed between checkpoints (tests/test_ray_sweep.py); the same for every
# executor
SWEEP_TRAIN = ['--config.train.steps=300', '--config.train.checkpoint_every=50',
               '--config.train.eval_every=300', '--config.train.log_every=50']


def sweep_cmd(path, root, data_dir, *flags, seeds=2):
  """The command line of a smoke sweep of the sweep file `path` (SWEEP_TRAIN budget)."""
  return [sys.executable, '-m', 'experiments.sweep', f'--sweep={path}:smoke', f'--root={root}',
          f'--seeds={seeds}', *flags, '--', f'--config.data.data_dir={data_dir}', *SWEEP_TRAIN]
