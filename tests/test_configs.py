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

from attention_jax import fields
from attention_jax.data import data_fields
from attention_jax.evaluation import evaluators
from attention_jax.models.model import ModelConfig
from attention_jax.sweeps import sweep_file
from attention_jax.training import loop, train, update
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


def test_every_section_is_its_owners_defaults_and_nothing_else():
  """The data, train and eval sections are made from the parts that own their fields (each
  task, the trainer, the optimiser, the loss, each evaluator): each default is declared once."""
  c = common.base_config()
  assert dict(c.data) == data_fields.defaults()
  owners = fields.OWNERS['train']
  assert set(owners) == {'the trainer', 'the optimiser', 'the loss'}
  assert dict(c.train) == {**{k: v for cls in owners.values() for k, v in cls.defaults().items()},
                           **common.OBJECTIVE_OVERRIDES}
  assert dict(c.eval) == {**evaluators.Scoring.defaults(), **evaluators.defaults()}
  for cls in evaluators.EVALUATORS.values():
    own = cls.field_defaults()
    assert {k: c.eval[k] for k in own} == own, cls
  assert {'evaluator by_length', 'evaluator heatmaps', 'every evaluation'} <= set(
      fields.OWNERS['eval'])


def test_the_trainer_refuses_a_bad_value_of_its_fields_in_one_line():
  t = common.base_config().train
  assert loop.Loop.of(t).steps == 3000
  for name, value, line in (
      ('steps', 0, 'train.steps must be a positive integer, got 0'),
      ('population', 0, 'train.population must be a positive integer (the seeds trained as one '
                        'program; 1: a run alone), got 0'),
      ('max_decode_factor', 0.0, 'train.max_decode_factor must be a finite number > 0, got 0.0'),
      ('decay', 'linear', "unknown train.decay 'linear'; valid: constant, cosine, rsqrt"),
      ('lr', -1.0, 'train.lr must be a finite number > 0, got -1.0')):
    bad = common.base_config().train
    bad[name] = value
    with pytest.raises(ValueError) as e:
      loop.Loop.of(bad), update.OptimizerConfig.of(bad)
    assert str(e.value) == line


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


# command lines of the docs and of earlier sessions' studies, as they were written before the
# fields had owners (config file argument, then --config.<section>.<field>=value flags)
OLD_COMMAND_LINES = [
    ('reverse.py:smoke', {'model.score': 'general', 'model.decoder': 'luong'}),
    ('dates.py:smoke', {'model.arch': 'transformer', 'model.d_model': 16, 'model.ff_dim': 32,
                        'model.heads': 2, 'model.transformer_layers': 1}),
    ('image_dates.py:vit,smoke', {'model.vit_stem': 1, 'data.image_augment_p': 0.5}),
    ('reverse.py', {'data.num_symbols': 8, 'model.attention_mode': 'local_p',
                    'model.window': 3, 'train.decay': 'rsqrt', 'eval.heatmaps': 0}),
    ('cmudict.py:smoke', {'data.split': 'standard', 'model.cell': 'lstm',
                          'train.label_smoothing': 0.1}),
    ('greek_english.py:smoke', {'train.guided_alignment_weight': 1.0,
                                'eval.word_alignment_num': 4}),
]


@pytest.mark.parametrize('config, flags', OLD_COMMAND_LINES, ids=[c for c, _ in OLD_COMMAND_LINES])
def test_old_command_lines_give_the_configs_they_gave(config, flags):
  path, _, arg = config.partition(':')
  cfg = runpy.run_path(os.path.join(os.path.dirname(common.__file__), path))['get_config'](
      arg or None)
  cfg.update_from_flattened_dict(flags)
  train.check_config(cfg)
  mcfg = train.model_config(cfg, 9, 9)
  for key, value in flags.items():
    section, name = key.split('.')
    assert cfg[section][name] == value
    if section == 'model':
      assert getattr(mcfg, name) == value and mcfg.to_dict()[name] == value
