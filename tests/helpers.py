"""Shared by the end-to-end tests: an experiment's `smoke` config on a test TFDS dir."""


def smoke(module, data_dir, **overrides):
  """module.get_config('smoke') with data in data_dir and 'section.field' overrides."""
  c = module.get_config('smoke')
  c.data.data_dir = data_dir
  for key, value in overrides.items():
    section, field = key.split('.')
    c[section][field] = value
  return c
