"""The experiment configs take the library's defaults from one source: the model section is
ModelConfig's fields and defaults, the loss's coefficients Objective's, and where the
experiments choose otherwise it is said once, in common.py's overrides."""

import dataclasses

from attention_jax.model import ModelConfig
from attention_jax.objective import Objective
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
