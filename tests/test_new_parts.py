"""A new part is one file: a throwaway encoder (tests/throwaway_encoder.py), decoder
(throwaway_decoder.py) and task (throwaway_task.py), each with a field of its own, train 2
steps through a config file with a --config. flag, a sweep variant and the Python API; a bad
value of each field is refused in one line on each route, before any work; each field is
listed by docs' generated field table (experiments/field_tables.py, docs/fields.md) and refused where the
chosen parts do not read it. With no other file edited: the parts register themselves when the
config file (or the script) imports them. Everything with the parts runs in child processes,
so this process's registries stay as the package makes them."""

import json
import os
import subprocess
import sys

import pytest

import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, 'tests')
# the three parts' fields, a good value each and a bad one, and the one line the bad one gives
FIELDS = {'model.annotation_scale': (0.25, 0.0, 'model.annotation_scale must be a finite '
                                                'number > 0, got 0.0'),
          'model.logit_temperature': (3.0, -1.0, 'model.logit_temperature must be a finite '
                                                 'number > 0, got -1.0'),
          'data.swap_alphabet': ('xyz', 'x', "data.swap_alphabet must be two or more letters, "
                                             "got 'x'")}

PARTS_FILE = f'''
import sys
sys.path.insert(0, {TESTS!r})
import throwaway_decoder, throwaway_encoder, throwaway_task
from experiments.configs import common


def get_config(arg=None):
  c = common.base_config()
  c.data.name = 'swapcase'
  c.model.update(encoder='scaled_rnn', annotation_scale=0.5, decoder='tempered',
                 logit_temperature=2.0)
  c = common.apply_arg(c, arg)
  c.train.steps = 2
  return c


def get_sweep(arg=None):
  return [('parts', {{k: good for k, (good, _, _) in VARIANT.items()}})]


VARIANT = {FIELDS!r}
'''


def saved(workdir: str) -> dict:
  """The model and data fields a run saved, flat ('model.x', 'data.y')."""
  with open(os.path.join(workdir, 'model_config.json')) as f:
    model = json.load(f)
  with open(os.path.join(workdir, 'config.json')) as f:
    data = json.load(f)['data']
  return {**{f'model.{k}': v for k, v in model.items()},
          **{f'data.{k}': v for k, v in data.items()}}


def steps_of(workdir: str) -> list[int]:
  return sorted(int(s) for s in os.listdir(os.path.join(workdir, 'checkpoints', 'latest'))
                if s.isdigit())


@pytest.fixture
def parts_file(tmp_path):
  path = tmp_path / 'parts.py'
  path.write_text(PARTS_FILE)
  return str(path)


@pytest.mark.extended   # three short trainings in child processes (about a minute)
def test_the_new_parts_train_through_a_config_file_flags_a_sweep_and_the_python_api(
    parts_file, tmp_path):
  flags = [f'--config.{k}={good}' for k, (good, _, _) in FIELDS.items()]
  run = tmp_path / 'flags'
  proc = helpers.run_module('experiments.main', f'--config={parts_file}:smoke', *flags,
                            f'--workdir={run}', timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert steps_of(str(run))[-1] == 2
  assert {k: saved(str(run))[k] for k in FIELDS} == {k: v[0] for k, v in FIELDS.items()}

  root = tmp_path / 'sweep'
  proc = helpers.run_module('experiments.sweep', f'--sweep={parts_file}:smoke', f'--root={root}',
                            timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (variant,) = [os.path.join(dirpath) for dirpath, _, files in os.walk(root)
                if 'model_config.json' in files]
  assert steps_of(variant)[-1] == 2
  assert {k: saved(variant)[k] for k in FIELDS} == {k: v[0] for k, v in FIELDS.items()}

  script = f'''
import json, runpy, sys
get_config = runpy.run_path({parts_file!r})['get_config']
from attention_jax.training import train
cfg = get_config('smoke')
cfg.model.annotation_scale, cfg.model.logit_temperature = 0.75, 1.5
cfg.data.swap_alphabet = 'pqr'
print(json.dumps(train.train_and_evaluate(cfg, {str(tmp_path / 'api')!r})['step']))
'''
  proc = subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.strip().splitlines()[-1]) == 2
  assert {k: saved(str(tmp_path / 'api'))[k] for k in FIELDS} == {
      'model.annotation_scale': 0.75, 'model.logit_temperature': 1.5, 'data.swap_alphabet': 'pqr'}


REFUSALS = '''
import json, runpy, sys
import ml_collections
get_config = runpy.run_path(sys.argv[1])['get_config']
import attention_jax as aj
from attention_jax.sweeps import sweep_file
from attention_jax.training import train
from experiments.configs import common
FIELDS = json.loads(sys.argv[2])
out = {}


def refused(route, name, call):
  try:
    call()
  except ValueError as e:
    out[f'{route} {name}'] = str(e)
  else:
    out[f'{route} {name}'] = None


for name, (good, bad, line) in FIELDS.items():
  section, field = name.split('.')
  def from_file(field=field, section=section, bad=bad):
    cfg = get_config('smoke')
    cfg[section][field] = bad
    train.check_config(cfg)
  refused('config file', name, from_file)
  with open('bad_sweep.py', 'w') as f:
    f.write(open(sys.argv[1]).read().replace('good for k, (good, _, _)', 'bad for k, (_, bad, _)')
            .replace('VARIANT.items()', f'VARIANT.items() if k == {name!r}'))
  def from_sweep():
    _, (variant,) = sweep_file.load_sweep('bad_sweep.py:smoke', root='sweep_root')
    train.check_config(ml_collections.ConfigDict(
        sweep_file.variant_config('bad_sweep.py:smoke', variant)))
  refused('sweep variant', name, from_sweep)
  if section == 'model':
    cfg = get_config('smoke')
    values = {**cfg.model.to_dict(), field: bad}
    refused('python api', name, lambda: aj.ModelConfig(src_vocab=5, tgt_vocab=6, **values))
  else:
    d = get_config('smoke').data
    d[field] = bad
    refused('python api', name, lambda: aj.data.load_task(d))
# set where the chosen parts do not read it
refused('unread', 'model.annotation_scale', lambda: aj.ModelConfig(
    src_vocab=5, tgt_vocab=6, arch='transformer', annotation_scale=0.25))
refused('unread', 'model.logit_temperature', lambda: aj.ModelConfig(
    src_vocab=5, tgt_vocab=6, logit_temperature=3.0))   # (the bahdanau decoder)
def dates_with_alphabet():
  cfg = get_config()
  cfg.data.name, cfg.data.swap_alphabet = 'dates', 'xyz'
  train.check_config(cfg)
refused('unread', 'data.swap_alphabet', dates_with_alphabet)
out['table'] = common.field_tables()
print(json.dumps(out))
'''


@pytest.mark.extended   # child processes: a script over every route, and the command lines
def test_a_bad_value_of_a_new_part_s_field_is_refused_in_one_line_on_every_route(parts_file,
                                                                                  tmp_path):
  proc = subprocess.run([sys.executable, '-c', REFUSALS, parts_file, json.dumps(FIELDS)],
                        cwd=tmp_path, capture_output=True, text=True, timeout=600,
                        env={**os.environ, 'PYTHONPATH': ROOT})
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  for name, (_, _, line) in FIELDS.items():
    for route in ('config file', 'sweep variant', 'python api'):
      assert out[f'{route} {name}'] == line, (route, name)
  assert out['unread model.annotation_scale'].startswith(
      "model.arch='transformer', model.encoder='' does not read model.annotation_scale=0.25; ")
  assert out['unread model.logit_temperature'].startswith(
      "model.arch='rnn', model.encoder='' does not read model.logit_temperature=3.0; ")
  assert out['unread data.swap_alphabet'].startswith(
      "data.name='dates' does not read data.swap_alphabet='xyz'; ")
  # listed by the generated field table, with the part that reads it
  table = out['table']
  for row in ("| `model.annotation_scale` | `1.0` | > 0 | encoder scaled_rnn |",
              "| `model.logit_temperature` | `1.0` | > 0 | decoder tempered |",
              "| `data.swap_alphabet` | `'abcdefgh'` | two or more letters | task swapcase |"):
    assert row in table, row
  # the command line: one line, exit status 2, no workdir
  runs = helpers.run_modules('experiments.main', [
      [f'--config={parts_file}:smoke', f'--config.{name}={bad}', f'--workdir={tmp_path / name}']
      for name, (_, bad, _) in FIELDS.items()])
  for (name, (_, _, line)), proc in zip(FIELDS.items(), runs):
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == f'error: {line}'
    assert not (tmp_path / name).exists()


def test_the_field_table_in_the_docs_is_the_one_the_parts_generate(tmp_path):
  """(in a process of its own: tests register parts of their own in this one)"""
  out = tmp_path / 'fields.md'
  proc = subprocess.run([sys.executable, '-m', 'experiments.field_tables', f'--out={out}'],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  with open(os.path.join(ROOT, 'docs', 'fields.md')) as f:
    assert f.read() == out.read_text(), (
        'docs/fields.md is stale: python -m experiments.field_tables --out=docs/fields.md')
