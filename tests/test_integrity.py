"""Checkpoint integrity: flipped bits are caught by the checksums saved with each step, and a
readable checkpoint of another model (config or tokenizers) is a clear mismatch that moves
nothing."""

import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings

import jax
import ml_collections
import numpy as np
import pytest

import attention_jax as aj
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.state import templates
from attention_jax.training import train
from experiments.configs import dates

import helpers

smoke = functools.partial(helpers.smoke, dates)






@pytest.fixture
def run(smoke_run):
  """(workdir, results) of the session's dates:smoke run (conftest.smoke_run): read-only, the
  tests change copies."""
  return smoke_run[1], smoke_run[2]


def copy(run, tmp_path):
  workdir = str(tmp_path / 'copy')
  shutil.copytree(run[0], workdir)
  return workdir


def flip(step_dir, nbytes=64, at=(0.5,), every_file=False):
  """Inverts `nbytes` bytes at each fraction `at` of the largest array data file of a step
  (the middle by default), or of every data file of the step (`every_file`)."""
  files = [f for f in glob.glob(os.path.join(step_dir, 'state', '**', '*'), recursive=True)
           if os.path.isfile(f) and '/d/' in f]
  for path in files if every_file else [max(files, key=os.path.getsize)]:
    with open(path, 'r+b') as f:
      for fraction in at:
        f.seek(int(os.path.getsize(path) * fraction))
        data = f.read(nbytes)
        f.seek(int(os.path.getsize(path) * fraction))
        f.write(bytes(b ^ 0xff for b in data))


def listing(directory):
  return sorted(os.path.relpath(os.path.join(r, f), directory)
                for r, _, fs in os.walk(directory) for f in fs)


def test_checksums_are_saved_with_each_step_and_detect_a_changed_array(run):
  workdir, _ = run
  ckpts = ckpt_lib.Checkpoints(workdir)
  try:
    _, meta = ckpt_lib.restore(ckpts.latest, 8, train.init_state(
        aj.ModelConfig.from_dict(json.load(open(os.path.join(workdir, 'model_config.json')))),
        train.make_optimizer(smoke('').train), 0)[1])
  finally:
    ckpts.close()
  assert meta['checksums'] and all(len(v) == 16 for v in meta['checksums'].values())
  state = {'a': np.arange(4.0), 'b': np.ones(3)}
  before = ckpt_lib.checksums(state)
  state['a'][2] = np.nextafter(2.0, 3.0)     # one bit
  after = ckpt_lib.checksums(state)
  assert [k for k in before if before[k] != after[k]] == ["['a']"]


def test_flipped_bytes_make_resume_fall_back_and_load_fail(run, data_dir, tmp_path):
  workdir = copy(run, tmp_path)
  flip(os.path.join(workdir, 'checkpoints', 'latest', '8'))
  os.remove(os.path.join(workdir, 'results.json'))
  with pytest.warns(RuntimeWarning, match=r'skipped unreadable checkpoint step 8 in .*latest'):
    again = train.train_and_evaluate(smoke(data_dir), workdir)     # resumes from step 4
  assert helpers.metrics(again['results']) == helpers.metrics(run[1]['results'])
  assert glob.glob(os.path.join(workdir, 'checkpoints', 'corrupt', 'latest_8_*'))
  best = str(run[1]['best_step'])
  # loading reads only the parameters (a third of the arrays, placed in any of the step's data
  # files: Orbax writes the arrays in parallel): corrupt every data file throughout, every 2.5%
  flip(os.path.join(workdir, 'checkpoints', 'best', best), at=[i / 40 for i in range(1, 40)],
       every_file=True)
  with pytest.raises(ckpt_lib.CheckpointError, match=rf'step {best} in .*best'):
    aj.load(workdir)


# ---- the guards of one saved step, on a state of two arrays (no run needed) ---------------------
def tiny_state(seed: int = 0) -> dict:
  """A train state's shape in miniature. Random values: Orbax's compression leaves them as
  they are, so a flipped byte still reads as an array, and only its checksum tells."""
  rng = np.random.default_rng(seed)
  return {'params': {'w': rng.standard_normal(2048).astype(np.float32)}, 'step': np.int32(seed)}


def test_a_flipped_bit_in_a_saved_array_is_caught_by_its_checksum(tmp_path):
  state = tiny_state()
  ckpts = ckpt_lib.Checkpoints(str(tmp_path))
  try:
    ckpts.save_latest(3, state, {'step': 3})
    assert ckpt_lib.restore(ckpts.latest, 3, state)[0]['params']['w'].tobytes() == (
        state['params']['w'].tobytes())
    flip(str(tmp_path / 'checkpoints' / 'latest' / '3'), nbytes=1)   # one byte: 8 bits
    with pytest.raises(ckpt_lib.CheckpointError, match=re.escape(
        f'checkpoint step 3 in {tmp_path}/checkpoints/latest is corrupt: 1 array(s) differ '
        "from the checksums saved with them (e.g. ['params']['w'] in")):
      ckpt_lib.restore(ckpts.latest, 3, state)
  finally:
    ckpts.close()


def test_a_non_finite_state_is_never_saved_and_one_saved_is_refused(tmp_path, monkeypatch):
  """A NaN in the parameters: the save is refused, naming the step, the array and the last
  good step; a step saved with it anyway (as before the check existed, checksums and all) is
  refused by restore."""
  state = tiny_state()
  bad = {**state, 'params': {'w': state['params']['w'].copy()}}
  bad['params']['w'][5] = np.nan
  ckpts = ckpt_lib.Checkpoints(str(tmp_path))
  try:
    ckpts.save_latest(1, state, {'step': 1})
    with pytest.raises(FloatingPointError, match=re.escape(
        f'refusing to save step 2 in {tmp_path}/checkpoints/latest: non-finite values (NaN or '
        "inf) in 1 array(s): ['params']['w']; last good checkpoint: step 1")):
      ckpts.save_latest(2, bad, {'step': 2})
    assert ckpts.latest.all_steps() == [1]
    with monkeypatch.context() as m:   # saved as before the check existed
      m.setattr(ckpt_lib, 'nonfinite', lambda state: [])
      ckpts.save_latest(2, bad, {'step': 2})
    with pytest.raises(ckpt_lib.NonFiniteCheckpoint, match=re.escape(
        f'checkpoint step 2 in {tmp_path}/checkpoints/latest holds non-finite values (NaN or '
        "inf) in 1 array(s): ['params']['w']")):
      ckpt_lib.restore(ckpts.latest, 2, state)
  finally:
    ckpts.close()


def test_resume_sets_an_unreadable_step_aside_and_takes_the_one_before(tmp_path):
  """The newest step unreadable (here: a flipped byte): resuming warns naming it, moves it to
  checkpoints/corrupt/ and restores the step before it, whole."""
  ckpts = ckpt_lib.Checkpoints(str(tmp_path), keep=2)
  try:
    ckpts.save_latest(1, tiny_state(1), {'step': 1})
    ckpts.save_latest(2, tiny_state(2), {'step': 2})
    flip(str(tmp_path / 'checkpoints' / 'latest' / '2'))
    said = []
    with pytest.warns(RuntimeWarning, match=r'skipped unreadable checkpoint step 2 in .*latest'):
      state, meta, step = ckpt_lib.restore_newest(ckpts.latest, tiny_state(), log=said.append)
    assert (step, meta['step'], int(state['step'])) == (1, 1, 1)
    assert state['params']['w'].tobytes() == tiny_state(1)['params']['w'].tobytes()
    assert len(said) == 1 and said[0].startswith('WARNING: skipped unreadable checkpoint step 2')
    assert ckpts.latest.all_steps() == [1]
    assert [n.split('_')[:2] for n in os.listdir(tmp_path / 'checkpoints' / 'corrupt')] == [
        ['latest', '2']]
  finally:
    ckpts.close()


def test_a_step_of_another_model_or_tokenizers_is_a_mismatch_and_moves_nothing(tmp_path):
  """A readable step saved by another model (a model field differs) or with other tokenizers
  (another fingerprint): CheckpointMismatch naming the field or the fingerprints, also when
  resuming (restore_newest), and the step stays where it is: it is not corrupt."""
  ckpts = ckpt_lib.Checkpoints(str(tmp_path))
  try:
    ckpts.save_latest(1, tiny_state(1), {'step': 1, 'model_config': {'emb_dim': 16},
                                         'tokenizers': 'aaaa'})
    same = dict(model_config={'emb_dim': 16}, model_defaults={}, tokenizers='aaaa')
    assert ckpt_lib.restore(ckpts.latest, 1, tiny_state(), **same)[1]['step'] == 1
    for expect, needle in (({**same, 'model_config': {'emb_dim': 8}},
                            'belongs to another model: emb_dim: checkpoint 16, expected 8'),
                           ({**same, 'tokenizers': 'bbbb'},
                            'was trained with other tokenizers (fingerprint aaaa, the '
                            "workdir's are bbbb)")):
      with pytest.raises(ckpt_lib.CheckpointMismatch, match=re.escape(needle)):
        ckpt_lib.restore(ckpts.latest, 1, tiny_state(), **expect)
      with pytest.raises(ckpt_lib.CheckpointMismatch, match=re.escape(needle)):
        ckpt_lib.restore_newest(ckpts.latest, tiny_state(), **expect)
    assert ckpts.latest.all_steps() == [1]
    assert not (tmp_path / 'checkpoints' / 'corrupt').exists()
  finally:
    ckpts.close()


SAVE_TWO_STEPS = """
import sys
import numpy as np
from attention_jax.state import checkpoint as ckpt_lib
ckpts = ckpt_lib.Checkpoints(sys.argv[1], keep=2)
for step in (1, 2):
  w = np.random.default_rng(step).standard_normal(2048).astype(np.float32)
  ckpts.save_latest(step, {'params': {'w': w}, 'step': np.int32(step)}, {'step': step})
"""


@pytest.mark.scenario   # a process killed inside a save
def test_a_step_killed_before_its_commit_is_no_step_and_resuming_takes_the_one_before(tmp_path):
  """SIGKILL while step 2 is written (hold point 'checkpoint_save': its files written, not
  yet committed by Orbax's rename): step 2 is no step (its temporary directory stays), and
  resuming restores step 1 without a warning: nothing unreadable was ever taken for a step."""
  held = tmp_path / 'held'
  proc = subprocess.Popen([sys.executable, '-c', SAVE_TWO_STEPS, str(tmp_path / 'run')],
                          cwd=helpers.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=helpers.hold_env(held, at='checkpoint_save', step=2))
  try:
    info = helpers.wait_held(held, proc)
    assert os.listdir(info['tmp']), info     # written...
  finally:
    proc.kill()
  assert proc.wait() == -signal.SIGKILL
  assert os.path.isdir(info['tmp'])           # ...and left as it was
  ckpts = ckpt_lib.Checkpoints(str(tmp_path / 'run'), create=False)
  try:
    assert ckpts.latest.all_steps() == [1]
    with warnings.catch_warnings():
      warnings.simplefilter('error')          # no step skipped as unreadable
      state, meta, step = ckpt_lib.restore_newest(ckpts.latest, tiny_state(),
                                                  log=pytest.fail)
  finally:
    ckpts.close()
  assert (step, meta['step']) == (1, 1) and state['params']['w'].tobytes() == (
      tiny_state(1)['params']['w'].tobytes())


IMAGE_ERA = ('encoder', 'image_channels', 'image_dim', 'cnn_layers', 'cnn_width', 'cnn_row_rnn',
             'cnn_norm', 'cnn_columns', 'cnn_cell_width', 'cnn_positions', 'patch_size',
             'context_gate')


def test_a_token_run_from_before_the_image_encoders_loads_and_translates(run, tmp_path):
  """A run saved before the encoder seam (no encoder / image / gate fields in its configs)
  loads with those fields at their defaults and translates as the original."""
  workdir = copy(run, tmp_path)
  for name, section in (('model_config.json', None), ('config.json', 'model')):
    path = os.path.join(workdir, name)
    with open(path) as f:
      cfg = json.load(f)
    model = cfg if section is None else cfg[section]
    assert {'encoder', 'context_gate'} <= set(model)   # (the fields its model reads are saved)
    for field in IMAGE_ERA:
      model.pop(field, None)
    for field in ('image_height', 'image_width'):
      cfg.get('data', {}).pop(field, None)
    with open(path, 'w') as f:
      json.dump(cfg, f)
  texts = ['22. November 2026', 'Nov 3, 1999']
  old = aj.load(workdir)
  assert old.config.encoder == '' and old.config.source == 'tokens'
  assert old.translate(texts, beam=2) == aj.load(run[0]).translate(texts, beam=2)


def test_load_restores_the_parameters_only(run, tmp_path):
  """aj.load reads no optimiser state: a run whose train section names a schedule that does
  not exist (no optimiser could be built from it) loads and translates as the original."""
  workdir = copy(run, tmp_path)
  path = os.path.join(workdir, 'config.json')
  with open(path) as f:
    cfg = json.load(f)
  cfg['train'].update(decay='no_such_schedule', lr='not a number', warmup_steps=None)
  with open(path, 'w') as f:
    json.dump(cfg, f)
  texts = ['22. November 2026', 'Nov 3, 1999']
  assert aj.load(workdir).translate(texts) == aj.load(run[0]).translate(texts)
  # what is read: the parameters' arrays and nothing of the optimiser
  mcfg = aj.ModelConfig.from_dict(json.load(open(os.path.join(workdir, 'model_config.json'))))
  full = train.init_state(mcfg, train.make_optimizer(smoke('').train), 0)[1]
  ckpts = ckpt_lib.Checkpoints(workdir)
  try:
    step = ckpts.best.best_step()
    part, _ = ckpt_lib.restore(ckpts.best, step, {'params': full['params']}, parameters_only=True)
    whole, _ = ckpt_lib.restore(ckpts.best, step, full)
  finally:
    ckpts.close()
  assert list(part) == ['params'] and 'opt' in whole
  for a, b in zip(jax.tree.leaves(part['params']), jax.tree.leaves(whole['params'])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_resuming_another_models_checkpoints_is_a_mismatch_and_moves_nothing(
    run, data_dir, tmp_path):
  workdir = copy(run, tmp_path)
  other = str(tmp_path / 'other')
  general = smoke(data_dir, **{'model.score': 'general', 'train.steps': 4})
  train.train_and_evaluate(general, other)
  for name in ('config.json', 'model_config.json'):   # the config of another run, as if two
    shutil.copy(os.path.join(other, name), os.path.join(workdir, name))  # runs shared it
  before = listing(os.path.join(workdir, 'checkpoints'))
  general.train.steps = 8
  with pytest.raises(ckpt_lib.CheckpointMismatch,
                     match="belongs to another model: score: checkpoint 'additive', expected "
                           "'general'"):
    train.train_and_evaluate(general, workdir)
  assert listing(os.path.join(workdir, 'checkpoints')) == before
  assert not os.path.exists(os.path.join(workdir, 'checkpoints', 'corrupt'))


def test_tokenizers_of_another_run_are_refused(run, data_dir, tmp_path):
  workdir = copy(run, tmp_path)
  other = str(tmp_path / 'other')
  train.train_and_evaluate(smoke(data_dir, **{'data.name': 'reverse', 'train.steps': 4}), other)
  shutil.rmtree(os.path.join(workdir, 'tokenizers', 'src'))
  shutil.copytree(os.path.join(other, 'tokenizers', 'src'),
                  os.path.join(workdir, 'tokenizers', 'src'))
  with pytest.raises(ckpt_lib.CheckpointMismatch, match='belong to another run'):
    aj.load(workdir)
  # same vocabulary size, other symbols: the fingerprint tells
  path = os.path.join(workdir, 'tokenizers', 'src', 'tokenizer.json')
  shutil.rmtree(os.path.join(workdir, 'tokenizers', 'src'))
  shutil.copytree(os.path.join(run[0], 'tokenizers', 'src'),
                  os.path.join(workdir, 'tokenizers', 'src'))
  tok = json.load(open(path, encoding='utf-8'))
  tok['symbols'][0], tok['symbols'][1] = tok['symbols'][1], tok['symbols'][0]
  json.dump(tok, open(path, 'w', encoding='utf-8'))
  with pytest.raises(ckpt_lib.CheckpointMismatch, match='trained with other tokenizers'):
    aj.load(workdir)


@pytest.mark.parametrize('file,path,value,needle', [
    ('config.json', ('train', 'max_decode_factor'), -1, 'max_decode_factor must be a finite'),
    ('config.json', ('train', 'max_decode_factor'), 'abc', "could not convert string"),
    ('model_config.json', ('emb_dim',), -3, 'model.emb_dim must be a positive integer'),
    ('model_config.json', ('score',), 'bogus', "unknown model.score 'bogus'"),
])
def test_an_edited_config_is_refused_by_load(run, tmp_path, file, path, value, needle):
  workdir = copy(run, tmp_path)
  with open(os.path.join(workdir, file)) as f:
    cfg = json.load(f)
  node = cfg
  for key in path[:-1]:
    node = node[key]
  node[path[-1]] = value
  with open(os.path.join(workdir, file), 'w') as f:
    json.dump(cfg, f)
  with pytest.raises(ckpt_lib.CheckpointError, match=needle):
    aj.load(workdir)


def test_a_checkpoint_older_than_a_config_field_counts_it_as_its_default():
  """Fields added to ModelConfig later (e.g. arch, d_model) are absent from older checkpoints'
  saved config: they compare as their defaults, so older runs still load and resume, while a
  saved value that differs is still a mismatch."""
  defaults = aj.ModelConfig.defaults()   # (a config saved then held every field)
  new = {**defaults, **aj.ModelConfig(src_vocab=5, tgt_vocab=6).to_dict()}
  old = {k: v for k, v in new.items() if k not in ('arch', 'd_model', 'positions')}
  assert ckpt_lib.differences(old, new, defaults) == []
  assert ckpt_lib.differences(old, {**new, 'arch': 'transformer'}, defaults) == [
      "arch: checkpoint 'rnn', expected 'transformer'"]
  assert ckpt_lib.differences({**old, 'd_model': 64}, new, defaults) == [
      'd_model: checkpoint 64, expected 128']


SAVED_RUN = os.path.join(os.path.dirname(__file__), 'data', 'run_7840ce6')


def test_a_run_saved_before_the_subpackages_loads_decodes_as_then_and_resumes(data_dir,
                                                                                tmp_path, capsys):
  """tests/data/run_7840ce6: a dates smoke run (4 steps) saved by the code of commit 7840ce6,
  the last one with every module in one folder. Today's code loads it and decodes its test
  sentences as its final evaluation did then (sentences_test.jsonl: greedy), and resumes its
  training from step 4."""
  workdir = str(tmp_path / 'run')
  shutil.copytree(SAVED_RUN, workdir)
  with open(os.path.join(workdir, 'config.json')) as f:   # (its unread fields at defaults)
    cfg = ml_collections.ConfigDict(templates.migrate_config(json.load(f)))
  cfg.data.data_dir = data_dir                     # the data set drawn again from its seed
  with open(os.path.join(workdir, 'sentences_test.jsonl')) as f:
    hyps = [r['hyp'] for r in map(json.loads, f.readlines()[1:])]
  sources = [src for src, _ in aj.data.load_task(cfg.data, seed=cfg.seed).texts('test')]
  t = aj.load(workdir)
  assert t.step == 4 and len(hyps) == len(sources) == 32
  assert t.translate(sources) == hyps             # greedy, as the final evaluation decodes
  saved = json.loads(open(os.path.join(workdir, 'config.json')).read())
  saved['data']['data_dir'] = data_dir             # its data set's place on this machine
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump(saved, f)
  cfg.train.steps = 6
  capsys.readouterr()
  assert train.train_and_evaluate(cfg, workdir)['step'] == 6
  assert f'resumed from {os.path.join(workdir, "checkpoints", "latest")} step 4' in (
      capsys.readouterr().out)
