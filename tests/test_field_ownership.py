"""Each architecture and encoder owns the model fields it reads, each task the data fields it
reads: a field the chosen model or task does not read, set to another value than its default,
is refused in one line on every route (Python API, config file, flag, sweep variant); runs
saved before (every field in their configs) still load, resume and compare."""

import dataclasses
import json
import os
import pickle
import runpy
import shutil

import ml_collections
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax import fields
from attention_jax.analysis import compare, saved_run
from attention_jax.data import batching, cmudict, loaders
from attention_jax.data import data_fields
from attention_jax.models import encoders
from attention_jax.models import model as model_lib
from attention_jax.models.model import ModelConfig
from attention_jax.state import templates
from attention_jax.sweeps import sweep_file
from attention_jax.training import train
from experiments.configs import dates, reverse

import helpers

# every (arch, encoder) a ModelConfig can name: '' is the arch's own token encoder
COMBINATIONS = [(arch, enc) for arch in model_lib.ARCHS for enc in ('', *encoders.ENCODERS)
                if not (arch == 'transformer' and enc and encoders.ENCODERS[enc].source == 'tokens')]
FIELDS = [f for f in ModelConfig.defaults()] + ['src_vocab', 'tgt_vocab']


def one_line(e: pytest.ExceptionInfo) -> str:
  text = str(e.value)
  assert '\n' not in text
  return text


# ---- the registries' declarations ------------------------------------------------------------
def reads(arch, encoder, **more):
  return model_lib.reads({'arch': arch, 'encoder': encoder, **more})


@pytest.mark.parametrize('arch,encoder', COMBINATIONS)
def test_every_combination_reads_the_common_fields_and_builds(arch, encoder):
  read = reads(arch, encoder)
  assert set(model_lib.EveryModel.names()) <= read <= set(FIELDS)
  cfg = ModelConfig(src_vocab=5, tgt_vocab=6, arch=arch, encoder=encoder)
  assert aj.build(cfg, rngs=nnx.Rngs(0)) is not None
  assert set(cfg.to_dict()) == read            # a config holds the fields its model reads


@pytest.mark.parametrize('name', FIELDS)
def test_every_model_field_is_read_by_some_combination(name):
  assert any(name in reads(a, e) for a, e in COMBINATIONS), name


@pytest.mark.parametrize('owner', [*model_lib.ARCHS.values(), *encoders.ENCODERS.values()],
                         ids=lambda c: c.__name__)
def test_each_registry_entry_owns_its_fields_as_a_frozen_dataclass(owner):
  names = owner.Fields.names()
  assert names and set(names) <= set(FIELDS)
  typed = owner.Fields()
  with pytest.raises(dataclasses.FrozenInstanceError):
    setattr(typed, names[0], typed.defaults()[names[0]])
  assert owner.Fields in fields.OWNERS['model'].values()


def test_a_key_shared_by_two_owners_must_have_one_default():
  @dataclasses.dataclass(frozen=True)
  class Other(fields.Fields):
    d_model: int = fields.positive(64)      # the Transformer's is 128
  with pytest.raises(ValueError) as e:
    fields.own('encoder other', Other)
  assert one_line(e).startswith('model.d_model: encoder other gives it the default 64, ')
  assert 'encoder other' not in fields.OWNERS['model']

  @dataclasses.dataclass(frozen=True)
  class Agreeing(fields.Fields):
    d_model: int = fields.positive(128)
  fields.own('encoder agreeing', Agreeing)
  del fields.OWNERS['model']['encoder agreeing']


def test_a_config_is_a_frozen_value():
  a = ModelConfig(src_vocab=5, tgt_vocab=6, score='general')
  assert a == a.replace() and hash(a) == hash(ModelConfig(src_vocab=5, tgt_vocab=6,
                                                          score='general'))
  assert a != a.replace(score='dot') and a.replace(score='dot').score == 'dot'
  with pytest.raises(dataclasses.FrozenInstanceError):
    a.score = 'dot'
  assert pickle.loads(pickle.dumps(a)) == a
  assert a.d_model == 128                        # a field no chosen part reads: its default
  with pytest.raises(AttributeError, match="ModelConfig has no field 'scor'"):
    _ = a.scor
  assert a.fields_of(model_lib.Seq2Seq).score == 'general'


@pytest.mark.parametrize('arch,encoder', COMBINATIONS)
def test_a_field_the_model_does_not_read_is_refused_in_one_line(arch, encoder):
  read, defaults = reads(arch, encoder), ModelConfig.defaults()
  unread = [k for k in defaults if k not in read]
  assert unread
  name = unread[0]
  value = {bool: lambda v: not v, int: lambda v: v + 1, float: lambda v: v / 2 + 0.25,
           str: lambda v: v + 'x'}[type(defaults[name])](defaults[name])
  with pytest.raises(ValueError) as e:
    ModelConfig(src_vocab=5, tgt_vocab=6, arch=arch, encoder=encoder, **{name: value})
  assert (f'model.arch={arch!r}, model.encoder={encoder!r} does not read model.{name}='
          in one_line(e))


# ---- every route -------------------------------------------------------------------------
def test_the_python_api_refuses_what_a_transformer_does_not_read():
  with pytest.raises(ValueError) as e:
    aj.build(aj.ModelConfig(src_vocab=20, tgt_vocab=20, arch='transformer', enc_hidden=777,
                            score='general'), rngs=nnx.Rngs(0))
  assert one_line(e).startswith(
      "model.arch='transformer', model.encoder='' does not read model.enc_hidden=777, "
      "model.score='general' (model.cross_attention_score in place of model.score); leave "
      'them at their defaults. It reads: src_vocab, tgt_vocab, arch, encoder, ')


CONFIG_FILE = '''
from experiments.configs import common


def get_config(arg=None):
  c = common.base_config()
  c.model.arch = 'transformer'
  c.model.score = 'general'
  c.model.enc_hidden = 512
  return common.apply_arg(c, arg)
'''


def test_a_config_file_setting_fields_its_model_does_not_read_is_refused(tmp_path):
  path = tmp_path / 'mine.py'
  path.write_text(CONFIG_FILE)
  get_config = runpy.run_path(str(path))['get_config']
  with pytest.raises(ValueError) as e:
    train.check_config(get_config())
  assert "does not read model.enc_hidden=512, model.score='general' (" in one_line(e)
  with pytest.raises(ValueError) as e:   # (the smoke variant sets the sizes it shrinks)
    train.check_config(get_config('smoke'))
  assert "does not read model.score='general' (" in one_line(e)


def test_a_flag_the_model_does_not_read_is_one_line_with_status_2(tmp_path):
  proc = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                            '--config.model.arch=transformer', '--config.model.score=general',
                            f'--workdir={tmp_path / "run"}')
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: model.arch='transformer', model.encoder='' does not read "
      "model.score='general' (model.cross_attention_score in place of model.score)")
  assert not (tmp_path / 'run').exists()


SWEEP_FILE = '''
from experiments.configs import dates


def get_config(arg=None):
  return dates.get_config(arg)


def get_sweep(arg=None):
  return [('rnn_general', {'model.score': 'general'}),
          ('transformer_general', {'model.arch': 'transformer', 'model.score': 'general'})]
'''


def test_a_sweep_variant_the_model_does_not_read_is_refused(tmp_path):
  path = tmp_path / 'mine_sweep.py'
  path.write_text(SWEEP_FILE)
  _, variants = sweep_file.load_sweep(f'{path}:smoke', root=str(tmp_path / 'runs'))
  ok, bad = variants
  train.check_config(ml_collections.ConfigDict(sweep_file.variant_config(f'{path}:smoke', ok)))
  with pytest.raises(ValueError) as e:
    train.check_config(ml_collections.ConfigDict(sweep_file.variant_config(f'{path}:smoke', bad)))
  assert "does not read model.score='general'" in one_line(e)


# ---- the smoke variant -------------------------------------------------------------------
def test_the_smoke_variant_sizes_only_the_fields_the_model_reads():
  rnn = train.model_config(dates.get_config('smoke'), 7, 7)
  assert (rnn.emb_dim, rnn.enc_hidden, rnn.attn_dim, rnn.dec_hidden) == (16, 16, 16, 32)
  cfg = dates.get_config('smoke')
  cfg.model.arch = 'transformer'
  assert train.model_config(cfg, 7, 7) == ModelConfig(
      src_vocab=7, tgt_vocab=7, arch='transformer', dropout=cfg.model.dropout)
  cfg = dates.get_config('smoke')
  cfg.model.update(encoder='cnn', image_dim=16)
  cnn = train.model_config(cfg, 7, 7)
  assert (cnn.emb_dim, cnn.attn_dim, cnn.dec_hidden, cnn.image_dim) == (16, 16, 32, 16)
  cfg = dates.get_config('smoke')
  cfg.model.emb_dim = 24        # a flag after the smoke variant keeps its value
  assert train.model_config(cfg, 7, 7).emb_dim == 24


def test_a_config_variant_switches_the_encoder_and_resets_what_it_does_not_read():
  from experiments.configs import image_dates
  cfg = image_dates.get_config('vit,smoke')
  mcfg = train.model_config(cfg, 1, 15)
  assert (mcfg.encoder, mcfg.patch_size, mcfg.transformer_layers) == ('vit', 8, 2)
  assert cfg.model.cnn_width == ModelConfig.defaults()['cnn_width']
  with pytest.raises(ValueError, match="unknown config argument 'vitt'; valid: 'smoke', 'vit'"):
    image_dates.get_config('vitt')
  # a variant's dotted keys set another section's fields: digit_strips.py:vit_stem's lr and
  # steps (smoke, applied after the variants, still shrinks the steps)
  from experiments.configs import digit_strips
  trains = [digit_strips.get_config(a).train for a in ('vit_stem', 'vit_stem,smoke', 'vit', None)]
  assert [(t.lr, t.steps) for t in trains] == [
      (1e-3, 7500), (1e-3, 8), (3e-3, 5000), (3e-3, 5000)]


# ---- data fields -------------------------------------------------------------------------
def test_every_built_in_task_declares_its_data_fields():
  assert set(loaders.LOADERS) <= set(data_fields.TASK_FIELDS)
  declared = set(data_fields.EveryTask.names()).union(
      *(f.names() for f in data_fields.TASK_FIELDS.values() if f))
  assert declared == set(data_fields.defaults())
  assert data_fields.defaults()['split'] == cmudict.DEFAULT_SPLIT
  split = {f.name: f for f in dataclasses.fields(data_fields.Cmudict)}['split']
  assert split.metadata['valid']() == list(cmudict.SPLIT_RULES)
  assert data_fields.defaults()['bucket_multiple'] == batching.MULTIPLE


@pytest.mark.parametrize('task,field,value', [('dates', 'max_len', 12),
                                              ('copy', 'max_digits', 5),
                                              ('addition', 'num_symbols', 8),
                                              ('textfiles', 'num_train', 256)])
def test_a_data_field_the_task_does_not_read_is_refused_in_one_line(task, field, value):
  cfg = dates.get_config()
  cfg.data.name = task
  cfg.data[field] = value
  with pytest.raises(ValueError) as e:
    train.check_config(cfg)
  assert one_line(e).startswith(f'data.name={task!r} does not read data.{field}={value!r}; '
                                'leave it at its default. It reads: name, data_dir, ')
  with pytest.raises(ValueError, match=f'does not read data.{field}='):
    aj.data.load_task(cfg.data)


def test_the_smoke_variant_shrinks_only_the_data_fields_the_task_reads():
  d = dates.get_config('smoke').data
  assert (d.num_train, d.max_len) == (256, data_fields.defaults()['max_len'])
  d = reverse.get_config('smoke').data
  assert (d.num_train, d.max_len, d.test_max_len) == (256, 12, 16)


# ---- runs saved before: load, resume, compare --------------------------------------------
SAVED_RUN = os.path.join(os.path.dirname(__file__), 'data', 'run_transformer_7991a84')
# the command that made it (the code of 7991a84, data in /tmp/oldrun_tfds):
#   python -m experiments.main --config=experiments/configs/dates.py:smoke
#     --config.model.arch=transformer --config.train.steps=4 --config.model.d_model=16
#     --config.model.ff_dim=32 --config.model.heads=2 --config.model.transformer_layers=1
FLAGS = {'model.arch': 'transformer', 'model.d_model': 16, 'model.ff_dim': 32,
         'model.heads': 2, 'model.transformer_layers': 1}


@pytest.mark.extended   # a saved run decoded and resumed (8 s): after the suite, in CI
def test_a_transformer_saved_with_every_field_loads_resumes_and_compares(data_dir, tmp_path,
                                                                         capsys):
  """tests/data/run_transformer_7991a84: a transformer saved by the code before each model
  owned its fields; its model_config.json and config.json hold the RNN sizes the smoke variant
  wrote then (enc_hidden=16 ...). Today's code loads it and decodes its test sentences as its
  final evaluation did, finds the same command's config the same run, and resumes it."""
  workdir = str(tmp_path / 'run')
  shutil.copytree(SAVED_RUN, workdir)
  with open(os.path.join(workdir, 'model_config.json')) as f:
    assert json.load(f)['enc_hidden'] == 16      # what the migration is for
  with open(os.path.join(workdir, 'config.json')) as f:
    saved = json.load(f)
  saved['data']['data_dir'] = data_dir           # its data set's place on this machine
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump(saved, f)
  cfg = helpers.smoke(dates, data_dir, **FLAGS, **{'train.steps': 6})
  with open(os.path.join(workdir, 'sentences_test.jsonl')) as f:
    hyps = [r['hyp'] for r in map(json.loads, f.readlines()[1:])]
  sources = [src for src, _ in aj.data.load_task(cfg.data, seed=cfg.seed).texts('test')]
  t = aj.load(workdir)
  assert t.step == 4 and t.config.arch == 'transformer' and t.config.enc_hidden == 64
  assert t.translate(sources) == hyps            # greedy, as the final evaluation decoded
  train.check_config(ml_collections.ConfigDict(templates.migrate_config(saved)))   # as a config
  now = json.loads(cfg.to_json())
  assert train.config_differences(saved, now) == []   # a sweep's "changed" compares so too
  now['model']['d_model'] = 32
  assert train.config_differences(saved, now) == ['model.d_model: saved 16, now 32']
  report = saved_run.evaluate_run(workdir, split='test', beam=1, num_heatmaps=0, verbose=False)
  assert report['sentences'] == 32          # evaluated on the data its saved config names
  new = str(tmp_path / 'new')              # a run of today's smoke config: the same data
  os.makedirs(new)
  with open(os.path.join(new, 'config.json'), 'w') as f:
    f.write(cfg.to_json())
  assert compare._data_diffs(compare.Evaluated(workdir, {}, {}),
                             compare.Evaluated(new, {}, {})) == []
  capsys.readouterr()
  assert train.train_and_evaluate(cfg, workdir)['step'] == 6
  assert f'resumed from {os.path.join(workdir, "checkpoints", "latest")} step 4' in (
      capsys.readouterr().out)
  assert aj.load(workdir).step in (4, 6)
