"""Shared by the end-to-end tests: an experiment's `smoke` config on a test TFDS dir."""


def smoke(module, data_dir, **overrides):
  """module.get_config('smoke') with data in data_dir and 'section.field' overrides."""
  c = module.get_config('smoke')
  c.data.data_dir = data_dir
  for key, value in overrides.items():
    section, field = key.split('.')
    c[section][field] = value
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
