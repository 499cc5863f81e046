"""Nothing lost, nothing crashes without saying why: signals, corrupt checkpoints, non-finite
training, bad input to translate/attend, bad configs, determinism."""

import functools
import glob
import json
import os
import re
import signal
import subprocess
import types
import warnings

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import attention_jax as aj
from attention_jax.analysis import saved_run
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.training import train
from experiments.configs import dates

import helpers

smoke = functools.partial(helpers.smoke, dates)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def params_of(workdir, step, cfg):
  mc = aj.ModelConfig.from_dict(json.load(open(os.path.join(workdir, 'model_config.json'))))
  template = train.init_state(mc, train.make_optimizer(cfg.train), 0)[1]
  ckpts = ckpt_lib.Checkpoints(workdir)
  try:
    return ckpt_lib.restore(ckpts.latest, step, template)[0]
  finally:
    ckpts.close()


def assert_same_tree(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture
def straight(smoke_run):
  """The session's uninterrupted 8-step run (checkpoints at 4 and 8; conftest.smoke_run):
  the reference, read-only."""
  return smoke_run


# ---- determinism -------------------------------------------------------------------------------
def test_two_runs_with_the_same_seed_are_bit_identical(straight, data_dir, tmp_path):
  cfg, workdir, first = straight
  second = train.train_and_evaluate(smoke(data_dir), str(tmp_path))
  assert helpers.metrics(first['results']) == helpers.metrics(second['results'])
  assert_same_tree(params_of(workdir, 8, cfg), params_of(str(tmp_path), 8, cfg))


# ---- corrupt checkpoints -----------------------------------------------------------------------
def corrupt(step_dir):
  """Truncates every array data file of a checkpoint step to half its size."""
  files = [f for f in glob.glob(os.path.join(step_dir, 'state', '**', '*'), recursive=True)
           if os.path.isfile(f) and os.path.getsize(f) > 64 and '/d/' in f]
  assert files, os.listdir(os.path.join(step_dir, 'state'))
  for f in files:
    with open(f, 'r+b') as fh:
      fh.truncate(os.path.getsize(f) // 2)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(straight, data_dir, tmp_path):
  import shutil
  cfg, ref_dir, ref = straight
  workdir = str(tmp_path / 'run')
  shutil.copytree(ref_dir, workdir)
  corrupt(os.path.join(workdir, 'checkpoints', 'latest', '8'))
  os.remove(os.path.join(workdir, 'results.json'))
  with pytest.warns(RuntimeWarning, match=r'skipped unreadable checkpoint step 8 in .*latest'):
    again = train.train_and_evaluate(smoke(data_dir), workdir)   # resumes from step 4
  assert helpers.metrics(again['results']) == helpers.metrics(ref['results'])
  assert_same_tree(params_of(workdir, 8, cfg), params_of(ref_dir, 8, cfg))
  assert glob.glob(os.path.join(workdir, 'checkpoints', 'corrupt', 'latest_8_*'))


def test_load_of_a_corrupt_checkpoint_is_a_clear_error(straight, tmp_path):
  import shutil
  _, ref_dir, ref = straight
  workdir = str(tmp_path / 'copy')
  shutil.copytree(ref_dir, workdir)
  corrupt(os.path.join(workdir, 'checkpoints', 'best', str(ref['best_step'])))
  with pytest.raises(ckpt_lib.CheckpointError,
                     match=rf'could not read checkpoint step {ref["best_step"]} in .*best'):
    aj.load(workdir)


def test_non_finite_parameters_are_refused_at_save_and_at_load(straight, tmp_path,
                                                                monkeypatch):
  """A NaN model is never saved; one saved anyway (as the project used to, checksums and
  all) is refused by load and evaluate naming the array, and a non-finite evaluation loss
  is an error, not a row of nan and 0."""
  import shutil
  cfg, ref_dir, ref = straight
  workdir = str(tmp_path / 'copy')
  shutil.copytree(ref_dir, workdir)
  state = params_of(workdir, 8, cfg)
  ckpts = ckpt_lib.Checkpoints(workdir)
  meta = ckpt_lib.restore(ckpts.latest, 8, state)[1]
  paths, treedef = jax.tree_util.tree_flatten_with_path(state['params'])
  leaves = [np.asarray(x).copy() for _, x in paths]
  leaves[0].flat[0] = np.nan
  name = "['params']" + jax.tree_util.keystr(paths[0][0])
  bad = {**state, 'params': jax.tree_util.tree_unflatten(treedef, leaves)}
  with pytest.raises(FloatingPointError, match=re.escape(
      f'refusing to save step 9 in {workdir}/checkpoints/latest: non-finite values (NaN or '
      f'inf) in 1 array(s): {name}; last good checkpoint: step 8')):
    ckpts.save_latest(9, bad, meta)
  assert 9 not in ckpts.latest.all_steps()
  with monkeypatch.context() as m:   # saved as before the check existed
    m.setattr(ckpt_lib, 'nonfinite', lambda state: [])
    ckpts.save_latest(9, bad, meta)
  ckpts.close()
  for fn in (aj.load, aj.evaluate_run):
    with pytest.raises(ckpt_lib.CheckpointError, match=re.escape(
        f'checkpoint step 9 in {workdir}/checkpoints/latest holds non-finite values (NaN or '
        f'inf) in 1 array(s): {name}')):
      fn(workdir, step=9)

  real = saved_run.scoring.score_split
  def infinite_loss(*args, **kwargs):
    scored = real(*args, **kwargs)
    return scored._replace(report={**scored.report, 'loss': float('inf')})
  monkeypatch.setattr(saved_run.scoring, 'score_split', infinite_loss)
  with pytest.raises(FloatingPointError, match=r"the loss of .* step 8 on test is inf"):
    aj.evaluate_run(workdir, step=8, verbose=False)
  assert not glob.glob(os.path.join(workdir, 'eval_test*.json'))


def test_load_reads_the_newest_step_again_when_the_one_it_reads_is_deleted(straight, tmp_path,
                                                                          monkeypatch):
  """While a run trains, its trainer deletes old steps (rotation): a load that picked such a
  step reads the newest complete one instead of failing (it used to: 'best/40 not found', a
  raw FileNotFoundError)."""
  import shutil
  _, ref_dir, _ = straight
  workdir = str(tmp_path / 'copy')
  shutil.copytree(ref_dir, workdir)
  real, calls, doomed = ckpt_lib.restore, [], [True]
  def rotating(manager, step, template, **kwargs):
    calls.append((str(manager.directory), step))
    if doomed[0]:   # the trainer deletes it just as we start to read it
      doomed[0] = False
      shutil.rmtree(os.path.join(str(manager.directory), str(step)))
    return real(manager, step, template, **kwargs)
  monkeypatch.setattr(ckpt_lib, 'restore', rotating)
  t = aj.load(workdir)
  # the best step (4 or 8, by this CPU's validation) vanished: the newest complete is latest/8
  assert len(calls) == 2 and calls[0][0].endswith('best') and t.step == 8
  assert t.translate(['Nov 3, 1999']) == aj.load(ref_dir, step=8).translate(['Nov 3, 1999'])
  with pytest.raises(ckpt_lib.CheckpointError, match=r'no checkpoint at step 3 in .*available'):
    aj.load(workdir, step=3)     # a step that never existed
  # a step asked for by number that existed and is deleted as it is read: an error naming it,
  # not another step (latest/8 is there: the best step deleted above was the other manager's
  # or, at step 8, was read from latest)
  calls.clear()
  doomed[0] = True
  with pytest.raises(ckpt_lib.CheckpointError, match=r'checkpoint step 8 in .*latest'):
    aj.load(workdir, step=8)
  assert calls == [(os.path.join(workdir, 'checkpoints', 'latest'), 8)], calls


def test_out_of_memory_is_one_error_naming_the_sizes(data_dir, tmp_path):
  """`--config.model.enc_hidden=1000000` (it used to be an 86-line traceback, exit 1): one
  `error:` line naming the sizes, exit 2, before anything is compiled or allocated."""
  proc = helpers.run_module(
      'experiments.main', '--config=experiments/configs/dates.py:smoke',
      f'--config.data.data_dir={data_dir}', '--config.model.enc_hidden=1000000',
      f'--workdir={tmp_path / "run"}')
  assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error')]
  assert len(errors) == 1 and errors[0] == proc.stderr.strip().splitlines()[-1]
  assert re.fullmatch(r'error: out of memory \(Out of memory allocating \d+ bytes .*\) with '
                      r'model.emb_dim=\d+, model.enc_hidden=1000000, .*data.batch_size=\d+.*: '
                      r'make the model or the batch smaller', errors[0]), errors[0]


# ---- signals -------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  return helpers.uninterrupted(tmp_path_factory)


@pytest.mark.scenario
def test_signal_saves_a_checkpoint_exits_and_the_same_command_resumes_bit_identical(
    uninterrupted, tmp_path):
  """SIGTERM reaches the run held at step 7 (hold.py: no race): it saves step 7 and exits 143;
  the same command resumes from step 7 and, held at step 12, gets SIGINT: it saves step 12 and
  exits 130; the same command again resumes from step 12 to a run equal to one straight through
  (results.json's metrics, the final train state bit for bit). Checkpoints are due at 5, 10, ...:
  neither step is one."""
  ref, data_dir = uninterrupted
  workdir = str(tmp_path / 'run')
  cmd = helpers.fault_cmd(workdir, data_dir)   # the 2 newest checkpoints kept
  for sig, step, resumed, kept in ((signal.SIGTERM, 7, None, [5, 7]),
                                   (signal.SIGINT, 12, 7, [10, 12])):
    held = tmp_path / f'held_{step}'
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=helpers.fault_env(helpers.hold_env(
                                held, step=step, workdir=workdir)))
    helpers.wait_held(held, proc)
    proc.send_signal(sig)
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == 128 + sig, out
    assert f'stopped by {signal.Signals(sig).name} at step {step}' in out
    assert (resumed is None) == ('resumed from' not in out), out
    if resumed is not None:
      assert f'resumed from {workdir}/checkpoints/latest step {resumed}' in out
    steps = sorted(int(n) for n in os.listdir(os.path.join(workdir, 'checkpoints', 'latest'))
                   if n.isdigit())
    assert steps == kept, out     # saved where it stopped
  done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                        env=helpers.fault_env())
  assert done.returncode == 0, done.stderr[-2000:]
  assert f'resumed from {workdir}/checkpoints/latest step 12' in done.stdout + done.stderr
  assert not helpers.differences_from(ref, workdir)


@pytest.mark.scenario
def test_ctrl_c_in_the_final_evaluation_is_one_line_and_the_same_command_finishes_the_run(
    uninterrupted, tmp_path):
  """SIGINT while the trained run evaluates (held after its validation split: hold point
  'final_evaluation'): `finally` blocks run, then one line `interrupted (Ctrl-C)`, exit 130,
  no traceback (it used to end in a segmentation fault), no results.json; the same command
  evaluates the run again from its last checkpoint, equal to one straight through."""
  ref, data_dir = uninterrupted
  workdir = str(tmp_path / 'run')
  cmd = helpers.fault_cmd(workdir, data_dir)
  held = tmp_path / 'held'
  with helpers.sigint_handled():
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=helpers.fault_env(helpers.hold_env(
                                held, at='final_evaluation', workdir=workdir,
                                split='validation')))
  helpers.wait_held(held, proc)
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 130, err[-3000:]
  assert err.strip().splitlines()[-1] == 'interrupted (Ctrl-C)' and 'Traceback' not in err, err
  assert not os.path.exists(os.path.join(workdir, 'results.json'))
  done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                        env=helpers.fault_env())
  assert done.returncode == 0, done.stderr[-2000:]
  assert f'resumed from {workdir}/checkpoints/latest step 30' in done.stdout
  assert not helpers.differences_from(ref, workdir)

# ---- non-finite training --------------------------------------------------------------------------
def poison_step(monkeypatch, at: int):
  """The train step returns a non-finite loss (and leaves the state unchanged) at call `at`."""
  real_of = train.Compiled.of

  def of(graphdef, cfg):
    steps = real_of(graphdef, cfg)
    real_train, calls = steps.train, [0]

    def poisoned_train(state, batch):
      calls[0] += 1
      if calls[0] != at:
        return real_train(state, batch)
      before = jax.tree.map(np.array, state)
      _, m = real_train(state, batch)
      before['step'] = before['step'] + 1
      return before, {**m, 'loss': np.float32('nan'), 'finite': np.bool_(False)}

    poisoned = types.SimpleNamespace(mode=steps.mode, eval=steps.eval, predict=steps.predict,
                                     train=poisoned_train)
    return poisoned

  monkeypatch.setattr(train.Compiled, 'of', of)


def test_non_finite_loss_stops_naming_step_loss_and_examples(monkeypatch, data_dir, tmp_path):
  poison_step(monkeypatch, at=6)
  workdir = str(tmp_path)
  with pytest.raises(FloatingPointError,
                     match=r'non-finite training loss nan .* at step 6, batch of training '
                           r'examples \[\d+, .*last checkpoint .* is untouched'):
    train.train_and_evaluate(smoke(data_dir), workdir)
  latest = os.path.join(workdir, 'checkpoints', 'latest')
  assert sorted(int(n) for n in os.listdir(latest) if n.isdigit()) == [4]


def test_skip_nonfinite_skips_and_counts(monkeypatch, straight, data_dir, tmp_path):
  poison_step(monkeypatch, at=6)
  out = train.train_and_evaluate(smoke(data_dir, **{'train.skip_nonfinite': True}),
                                 str(tmp_path))
  assert out['nonfinite_skipped'] == 1
  assert json.load(open(tmp_path / 'results.json'))['nonfinite_skipped'] == 1


@pytest.mark.extended   # a training of 8 steps (in-process): after the suite, in CI
def test_a_non_finite_loss_on_a_checkpoint_step_saves_nothing_from_that_state(monkeypatch,
                                                                             data_dir, tmp_path):
  """The batch of step 8 (a checkpoint and validation step of 12) poisoned so that the real
  train step's loss is NaN (a target id beyond the vocabulary): the run stops naming step 8;
  the latest and best checkpoints are those of step 4, and nothing was saved after it (nor
  validated) from the state that step left."""
  real_of, saved = train.Compiled.of, []

  def of(graphdef, cfg):
    steps = real_of(graphdef, cfg)
    real_train, calls = steps.train, [0]

    def train_step(state, batch):
      calls[0] += 1
      if calls[0] == 8:
        batch = {**batch, 'tgt_out': np.where(batch['weight'][:, None] > 0, 10**6,
                                              batch['tgt_out']).astype(batch['tgt_out'].dtype)}
      return real_train(state, batch)
    return types.SimpleNamespace(mode=steps.mode, eval=steps.eval, predict=steps.predict,
                                 train=train_step)

  real_save = ckpt_lib.Checkpoints._save
  def recorded(manager, step, *args, **kwargs):
    saved.append((os.path.basename(str(manager.directory)), step))
    return real_save(manager, step, *args, **kwargs)
  monkeypatch.setattr(train.Compiled, 'of', of)
  monkeypatch.setattr(ckpt_lib.Checkpoints, '_save', staticmethod(recorded))
  workdir = str(tmp_path / 'run')
  cfg = smoke(data_dir, **{'train.steps': 12})   # checkpoints and validations every 4
  with pytest.raises(FloatingPointError, match=r'non-finite training loss nan .* at step 8, '
                                               r'batch of training examples \[\d+'):
    train.train_and_evaluate(cfg, workdir)
  assert saved == [('best', 4), ('latest', 4)], saved
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  try:
    assert ckpts.latest.all_steps() == [4] and ckpts.best.all_steps() == [4]
  finally:
    ckpts.close()


@pytest.mark.extended   # a training of 3 steps (in-process): after the suite, in CI
def test_a_signal_in_a_training_step_saves_that_step_and_raises_interrupted(data_dir, tmp_path,
                                                                            monkeypatch):
  """In-process: SIGTERM while the run is held after step 3 (hold.py: it waits there until the
  signal is recorded, no race) -> the latest checkpoint at step 3 (not a checkpoint step) and
  preemption.Interrupted naming it; the test tier's subprocess test below resumes from it."""
  from attention_jax import hold  # pylint: disable=g-import-not-at-top
  from attention_jax.training import preemption  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  workdir, held = str(tmp_path / 'run'), tmp_path / 'held'
  monkeypatch.setenv(hold.ENV, json.dumps({'at': 'train_step', 'step': 3, 'workdir': workdir,
                                           'file': str(held)}))
  monkeypatch.setattr(hold, '_done', set())

  over = threading.Event()   # the run returned: nothing to strike any more
  def strike():   # on the event (the held file), not after a time
    while not held.exists():
      if over.wait(0.02):
        return
    os.kill(os.getpid(), signal.SIGTERM)
  striker = threading.Thread(target=strike, daemon=True)
  striker.start()
  try:
    with pytest.raises(preemption.Interrupted, match=r'stopped by SIGTERM at step 3; '
                                                    r'checkpoint saved in .*latest') as stopped:
      train.train_and_evaluate(smoke(data_dir), workdir)
  finally:
    over.set()
    striker.join()
  assert stopped.value.exit_status == 143
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  try:
    assert ckpts.latest.all_steps() == [3]
  finally:
    ckpts.close()


# ---- config validation: before any data or compile -------------------------------------------------
@pytest.mark.parametrize('field, value, needle', [
    ('model.emb_dim', -3, 'model.emb_dim must be a positive integer, got -3'),
    ('model.score', 'bilinear', "unknown model.score 'bilinear'; valid: additive, cosine"),
    ('model.attention_mode', 'soft', "unknown attention mode 'soft'; valid attention modes: "
                                     'global, hard'),
    ('model.decoder', 'transformer', "unknown model.decoder 'transformer'; valid: bahdanau, "
                                     'luong'),
    ('model.score', 'dot', "score 'dot' needs equal query and key sizes, got query (decoder "
                           'state) size 32 and key (encoder annotation) size 64'),
    ('train.steps', 0, 'train.steps must be a positive integer, got 0'),
    ('data.bucket_multiple', 0, 'data.bucket_multiple must be a positive integer, got 0'),
    ('train.lr', -1.0, 'train.lr must be a finite number > 0, got -1.0'),
    ('train.decay', 'linear', "unknown train.decay 'linear'; valid: constant, cosine, rsqrt"),
    ('data.batch_size', 7, 'data.batch_size=7 is not divisible by the device count 2'),
    ('eval.bleu_tokenize', 'bogus', "unknown eval.bleu_tokenize 'bogus'; valid (sacrebleu): "
                                    'none, zh, 13a'),
    ('eval.length_edges', ('abc',), "eval.length_edges must be increasing integers >= 0 "
                                    "(source-length bucket edges, e.g. (10, 20, 30)), got "
                                    "('abc',)"),   # what --config.eval.length_edges=abc gives
    ('eval.length_edges', (0, 20, 10), 'eval.length_edges must be increasing'),
    ('eval.heatmaps', -1, 'eval.heatmaps must be an integer >= 0 (test sentences drawn), got -1'),
])
def test_bad_config_fails_before_any_compile(field, value, needle, monkeypatch, data_dir,
                                             tmp_path):
  if field == 'data.batch_size':
    monkeypatch.setattr(jax, 'device_count', lambda *a: 2)
  if field == 'model.score':
    overrides = {'model.enc_hidden': 32} if value == 'dot' else {}
  else:
    overrides = {}

  def no_compile(*a, **k):
    raise AssertionError('compiled before validating the config')

  monkeypatch.setattr(jax, 'jit', no_compile)
  monkeypatch.setattr(train.data_lib, 'load_task', no_compile)
  c = smoke(data_dir, **overrides, **{field: value})
  with pytest.raises(ValueError) as e:
    train.train_and_evaluate(c, str(tmp_path / 'w'))
  assert needle in str(e.value)


# ---- translate / attend input ----------------------------------------------------------------------
@pytest.fixture(scope='module')
def translator(smoke_run):
  return aj.load(smoke_run[1])


def test_translate_input_policy(translator):
  with pytest.warns(RuntimeWarning, match='longer than the training maximum'):
    out = translator.translate(['', '   ', '\t\n', '22. November 2026', '\x00\x07\u202e',
                                '日本語 ☃ 🎉', 'x' * 200])
  assert all(isinstance(o, str) for o in out)
  assert out[:3] == ['', '', '']
  empty = translator.attend(' ')
  assert empty[0] == '' and empty[1].shape == (0, 0) and empty[2:] == ([], [])
  with pytest.raises(TypeError, match=r'texts\[1\] is int, not str'):
    translator.translate(['a', 3])
  with pytest.raises(TypeError, match='texts must be a list of str, got str'):
    translator.translate('22. November 2026')
  with pytest.raises(TypeError, match='text must be a str, got NoneType'):
    translator.attend(None)
  with pytest.warns(RuntimeWarning, match='1 input.* longer than the training maximum of 64'):
    translator.translate(['1' * 100])
  out, w, src_tokens, tgt_tokens = translator.attend('3 mai 1999 \x01')
  assert w.shape == (len(tgt_tokens), len(src_tokens))


def test_large_batches_go_in_chunks_and_keep_their_order(translator):
  texts = [f'{d} March {1990 + d}' for d in range(1, 29)] * 5      # 140 sentences
  translator.chunk_size = 16
  try:
    chunked = translator.translate(texts)
  finally:
    translator.chunk_size = 256
  whole = translator.translate(texts)
  assert chunked == whole and len(chunked) == 140


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large,
                                 HealthCheck.too_slow])
@given(st.lists(st.text(max_size=40), min_size=250, max_size=250))
def test_random_unicode_never_crashes(translator, texts):
  """8 batches of 250 random Unicode strings: 2,000 strings, every output a string."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)
    out = translator.translate(texts)
  assert len(out) == len(texts) and all(isinstance(o, str) for o in out)
  r = translator.attend(texts[0])
  assert isinstance(r[0], str)
