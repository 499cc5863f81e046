"""The experiment configs take the library's defaults from one source: the model section is
ModelConfig's fields and defaults, the loss's coefficients Objective's, and where the
experiments choose otherwise it is said once, in common.py's overrides."""

import ast
import dataclasses
import glob
import os
import re
import runpy

import ml_collections
import pytest

from attention_jax.models.model import ModelConfig
from attention_jax.sweeps import sweep_file
from attention_jax.training import train
from attention_jax.training.objective import Objective
from experiments.configs import common


def test_the_model_section_is_model_configs_defaults_but_the_named_overrides():
  model = dict(common.base_config().model)
  assert model == {**ModelConfig.defaults(), **common.MODEL_OVERRIDES}
  for name, value in common.MODEL_OVERRIDES.items():   # an override is a choice, not a copy
    assert ModelConfig.defaults()[name] != value, name


def test_the_losss_coefficients_are_objectives_defaults_but_the_named_overrides():
  train = common.base_config().train
  for f in dataclasses.fields(Objective):
    assert train[f.name] == common.OBJECTIVE_OVERRIDES.get(f.name, f.default), f.name
  for name, value in common.OBJECTIVE_OVERRIDES.items():
    assert getattr(Objective(), name) != value, name
  assert Objective.of(train) == Objective(**{**dataclasses.asdict(Objective()),
                                             **common.OBJECTIVE_OVERRIDES})


def test_an_older_runs_train_section_without_a_coefficient_gets_its_default():
  train = common.base_config().train
  del train['baseline_decay']
  assert Objective.of(train).baseline_decay == Objective().baseline_decay


CONFIG_FILES = sorted(p for p in glob.glob(os.path.join(
    os.path.dirname(common.__file__), '*.py')) if not p.endswith(('__init__.py', 'common.py')))


def _variant_args(path: str) -> list[str]:
  """'smoke' and every `<file>.py:<arg>` the config file's docstring shows (its variants)."""
  doc = ast.get_docstring(ast.parse(open(path).read())) or ''
  name = re.escape(os.path.basename(path))
  return ['smoke'] + sorted(set(re.findall(rf'{name}:([\w,]+)', doc)) - {'smoke'})


CASES = [(p, a) for p in CONFIG_FILES for a in _variant_args(p)]


@pytest.mark.parametrize('path, arg', CASES,
                         ids=[f'{os.path.basename(p)}:{a}' for p, a in CASES])
def test_every_config_file_and_sweep_variant_is_a_valid_experiment(path, arg):
  """Every file of experiments/configs (found, not listed: a new one is checked with no edit
  here), at its smoke variant and every variant its docstring shows (`file.py:arg`), gives a
  config that train.check_config accepts (its fields, its model's sizes and names), and so
  does every variant of a sweep file, with its overrides applied as a run of the sweep gets
  them (sweep_file.check_variants, which the sweep command runs before any run)."""
  module = runpy.run_path(path)
  train.check_config(module['get_config'](arg))
  if 'get_sweep' in module:
    name, variants = sweep_file.load_sweep(f'{path}:{arg}', root='/nonexistent')
    assert variants, name
    sweep_file.check_variants(f'{path}:{arg}', variants)
    for v in variants:
      cfg = ml_collections.ConfigDict(sweep_file.variant_config(f'{path}:{arg}', v))
      train.check_config(cfg)   # fields the variant's model or task does not read: refused here
