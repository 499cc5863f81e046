"""End-to-end: smoke runs of the experiment configs, exact resume, reload from Python, and
clear errors for bad configs and flags."""

import inspect
import json
import os
import re
import shutil

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax import data
from attention_jax import workdir as workdir_lib
from attention_jax.evaluation import records
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.state import templates
from attention_jax.training import train, update
from experiments.configs import dates

from helpers import run_modules, smoke

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def dates_run(smoke_run):
  """(workdir, results) of the session's dates:smoke run (conftest.smoke_run): read-only."""
  return smoke_run[1], smoke_run[2]


def copied(run, tmp_path) -> str:
  """A copy of a run's workdir, for a test that writes into it."""
  workdir = str(tmp_path / 'run')
  shutil.copytree(run[0], workdir)
  return workdir


def test_dates_smoke_writes_results_checkpoints_heatmaps(dates_run):
  workdir, summary = dates_run
  with open(os.path.join(workdir, 'results.json')) as f:
    saved = json.load(f)
  for split in ('validation', 'test'):
    m = saved['results'][split]
    for k in ('loss', 'perplexity', 'token_accuracy', 'exact_match', 'bleu', 'chrf'):
      assert np.isfinite(m[k]), (split, k)
    assert m['sentences'] == 32
  assert len([p for p in saved['results']['test']['heatmaps'] if os.path.exists(p)]) == 4  # 3 + grid
  assert os.listdir(os.path.join(workdir, 'tensorboard'))
  assert summary['step'] == 8


def test_the_run_directory_reads_what_training_wrote(dates_run, tmp_path):
  """workdir.Run, the one owner of a run's file names, finds every file the trainer wrote."""
  workdir, summary = dates_run
  run = workdir_lib.Run(workdir)
  assert run.started and run.finished and run.resumable and run.has_checkpoints
  assert run.results()['step'] == summary['step'] == 8
  assert run.config()['data']['name'] == 'dates'
  assert run.model_config() == summary['model_config']
  assert os.path.isdir(run.tokenizers_dir) and os.listdir(run.best_dir)
  assert os.path.isfile(run.sentences_path('test')) and os.listdir(run.tensorboard_dir)
  assert workdir_lib.foreign_entries(workdir) == []
  empty = workdir_lib.Run(str(tmp_path))
  assert not (empty.started or empty.finished or empty.resumable or empty.has_checkpoints)
  assert empty.attempts() == []
  with pytest.raises(FileNotFoundError):
    empty.config()
  with pytest.raises(ValueError, match="unknown evaluation file 'png'; valid: report, "):
    run.eval_path('eval_test', 'png')


def test_abstract_state_is_the_initial_states_shapes_and_the_initial_state_is_seeded():
  """What aj.load restores into (no initialiser run) has the shapes, dtypes and tree of the
  state training starts from; the compiled initialiser gives the seed's parameters."""
  mc = aj.ModelConfig(src_vocab=9, tgt_vocab=7, emb_dim=4, enc_hidden=4, dec_hidden=8,
                      attn_dim=4, attention_mode='hard')        # + the REINFORCE baseline
  tx = train.make_optimizer(dates.get_config('smoke').train)
  graphdef, state = train.init_state(mc, tx, 3, ema=True)
  abstract = templates.abstract_state(mc, tx)[1]
  shapes = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  assert shapes({k: v for k, v in state.items() if k != 'ema'}) == shapes(abstract)
  assert shapes(state['ema']) == shapes(state['params'])
  again, other = train.init_state(mc, tx, 3)[1], train.init_state(mc, tx, 4)[1]
  leaves = [jax.tree.leaves(s['params']) for s in (state, again, other)]
  assert all(np.array_equal(a, b) for a, b in zip(leaves[0], leaves[1]))
  assert not all(np.array_equal(a, c) for a, c in zip(leaves[0], leaves[2]))
  logits, _ = nnx.merge(graphdef, state['params'])(np.array([[4, 5, 2]]), np.array([[1, 6]]))
  assert logits.shape == (1, 2, 7)


def test_load_translates_and_attends(dates_run):
  workdir, _ = dates_run
  t = aj.load(workdir)
  outs = t.translate(['22. November 2026', 'Nov 3, 1999', ''])
  assert len(outs) == 3 and all(isinstance(o, str) for o in outs)
  out, weights, src_tokens, tgt_tokens = t.attend('Nov 3, 1999')
  assert weights.shape == (len(tgt_tokens), len(src_tokens))
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
  with pytest.raises(TypeError, match='texts must be a list of str'):
    t.translate('not a list')


def test_load_refuses_missing_and_foreign_workdirs(tmp_path, dates_run):
  with pytest.raises(ckpt_lib.CheckpointError, match='no such workdir'):
    aj.load(str(tmp_path / 'nope'))
  with pytest.raises(ckpt_lib.CheckpointError, match='not a usable'):
    aj.load(str(tmp_path))
  with pytest.raises(ckpt_lib.CheckpointError, match='no checkpoint at step 3'):
    aj.load(dates_run[0], step=3)
  edited = tmp_path / 'edited'        # a hand-edited config.json: one line, not a traceback
  shutil.copytree(dates_run[0], edited)
  text = (edited / 'config.json').read_text()
  (edited / 'config.json').write_text(re.sub(r'"max_src_len": (\d+)', r'"max_src_len": "\1"', text))
  with pytest.raises(ckpt_lib.CheckpointError, match=r"not a usable attention_jax workdir: "
                     r"ValueError: \S*config.json: data.max_src_len must be a positive integer, "
                     r"got '\d+'"):
    aj.load(str(edited))


@pytest.mark.parametrize('arch', [   # (the same checkpoint code; test_transformer trains one)
    {}, pytest.param({'model.arch': 'transformer', 'model.d_model': 16, 'model.ff_dim': 32,
                      'model.transformer_layers': 1},
                     marks=pytest.mark.extended)],   # 13 s: after the suite, in CI
    ids=['rnn', 'transformer'])
def test_resume_is_bit_identical(arch, data_dir, tmp_path):
  """2 steps, stop, resume for 2 more == 4 uninterrupted steps (params and metrics)."""
  def cfg(steps):
    return smoke(dates, data_dir, **arch, **{'train.steps': steps, 'train.decay': 'constant',
                                             'train.checkpoint_every': 2,
                                             'train.eval_every': 2})
  a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
  train.train_and_evaluate(cfg(2), a)
  resumed = train.train_and_evaluate(cfg(4), a)
  straight = train.train_and_evaluate(cfg(4), b)
  assert resumed['results'] == straight['results']
  template = train.init_state(aj.ModelConfig.from_dict(resumed['model_config']),
                              train.make_optimizer(cfg(4).train), 0)[1]
  pa = ckpt_lib.restore(ckpt_lib.Checkpoints(a).latest, 4, template)[0]
  pb = ckpt_lib.restore(ckpt_lib.Checkpoints(b).latest, 4, template)[0]
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.extended   # two trainings (8 and 4 steps): after the suite, in CI
def test_a_run_carried_on_with_more_steps_resumes_the_cosine_at_the_new_totals_rate(
    data_dir, tmp_path, monkeypatch):
  """8 steps under a cosine decay, then the same run carried on to train.steps=12: the
  learning rates of steps 9-12 (read inside the compiled step) are those of the 12-step
  schedule at counts 8-11, not of the 8-step one (whose cosine has ended) nor of a schedule
  restarted at 0."""
  real_join, seen = update.optax.join_schedules, []

  def join(schedules, boundaries):
    schedule = real_join(schedules, boundaries)
    def recorded(count):
      rate = schedule(count)
      jax.debug.callback(lambda c, r: seen.append((int(c), float(r))), count, rate)
      return rate
    return recorded
  monkeypatch.setattr(update.optax, 'join_schedules', join)
  def cfg(steps):   # (an lr of its own: no step compiled by another test is reused)
    return smoke(dates, data_dir, **{'train.steps': steps, 'train.decay': 'cosine',
                                     'train.lr': 0.0123, 'train.checkpoint_every': 4,
                                     'train.eval_every': 4})
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(cfg(8), workdir)
  assert [c for c, _ in seen] == list(range(8))
  seen.clear()
  train.train_and_evaluate(cfg(12), workdir)
  monkeypatch.undo()
  assert [c for c, _ in seen] == [8, 9, 10, 11], seen
  want = [_schedule_of(cfg(12).train)(c) for c in range(8, 12)]
  np.testing.assert_allclose([r for _, r in seen], want, rtol=1e-6)
  ended = [_schedule_of(cfg(8).train)(c) for c in range(8, 12)]
  assert all(abs(w - e) > 1e-4 for w, e in zip(want, ended)), (want, ended)


def _schedule_of(t):
  """The learning rate at each optimiser count of the `train` section t, as update.py builds
  it (warmup, then the decay over the rest of train.steps)."""
  c = update.OptimizerConfig.of(t)
  decay = update.SCHEDULES[c.decay](c.lr, c.steps - c.warmup_steps)
  return lambda count: float(update.optax.join_schedules(
      [update.optax.linear_schedule(0.0, c.lr, max(c.warmup_steps, 1)), decay],
      [c.warmup_steps])(count))

@pytest.mark.extended   # four trainings (9 s): after the suite, in CI
def test_ema_of_params_resumes_evaluates_and_loads(data_dir, tmp_path, capsys):
  """train.ema_decay=d: after each step ema = d * ema + (1 - d) * params; switched on when
  resuming a run saved without one, it starts from the saved parameters; aj.load translates
  with it; switched off on a later resume, it is dropped (both said in the log)."""
  def cfg(steps, d):
    return smoke(dates, data_dir, **{'train.steps': steps, 'train.decay': 'constant',
                                     'train.checkpoint_every': 1, 'train.eval_every': 2,
                                     'train.keep_checkpoints': 9, 'train.ema_decay': d})
  a = str(tmp_path / 'a')
  train.train_and_evaluate(cfg(2, 0.0), a)
  train.train_and_evaluate(cfg(4, 0.5), a)
  assert 'the EMA starts from the step-2 parameters' in capsys.readouterr().out
  template = train.init_state(aj.ModelConfig.from_dict(json.load(open(
      os.path.join(a, 'model_config.json')))), train.make_optimizer(cfg(4, 0.5).train), 0)[1]
  latest = ckpt_lib.Checkpoints(a).latest
  s2, s3, s4 = (ckpt_lib.restore(latest, k, template)[0] for k in (2, 3, 4))
  assert 'ema' not in s2 and 'ema' in s3 and 'ema' in s4
  flat = lambda tree: [np.asarray(x) for x in jax.tree.leaves(tree)]
  for e3, p2, p3 in zip(flat(s3['ema']), flat(s2['params']), flat(s3['params'])):
    np.testing.assert_allclose(e3, 0.5 * p2 + 0.5 * p3, rtol=1e-6, atol=1e-7)
  for e4, e3, p4 in zip(flat(s4['ema']), flat(s3['ema']), flat(s4['params'])):
    np.testing.assert_allclose(e4, 0.5 * e3 + 0.5 * p4, rtol=1e-6, atol=1e-7)
  assert any(not np.array_equal(e, p) for e, p in zip(flat(s4['ema']), flat(s4['params'])))
  t = aj.load(a, step=4)
  for x, e in zip(flat(t.params), flat(s4['ema'])):
    np.testing.assert_array_equal(x, e)
  train.train_and_evaluate(cfg(5, 0.0), a)
  assert 'the saved EMA of the parameters is dropped' in capsys.readouterr().out
  assert 'ema' not in ckpt_lib.restore(ckpt_lib.Checkpoints(a).latest, 5, template)[0]


def test_fresh_start_refuses_a_non_empty_workdir(dates_run, data_dir, tmp_path):
  c = smoke(dates, data_dir, **{'train.resume': False})
  with pytest.raises(FileExistsError, match='--overwrite'):
    train.train_and_evaluate(c, copied(dates_run, tmp_path))


def snapshot(workdir: str) -> dict[str, bytes]:
  """Every file under workdir (relative path -> contents)."""
  out = {}
  for d, _, files in os.walk(workdir):
    for f in files:
      with open(os.path.join(d, f), 'rb') as fh:
        out[os.path.relpath(os.path.join(d, f), workdir)] = fh.read()
  return out


@pytest.mark.parametrize('override,needle', [
    ({'model.score': 'general'}, "model.score: saved 'additive', now 'general'"),
    ({'seed': 1, 'train.steps': 20, 'eval.beam_size': 3}, 'seed: saved 0, now 1'),
])
def test_a_refused_resume_changes_nothing_in_the_workdir(override, needle, dates_run, data_dir,
                                                         tmp_path):
  """config.json (and every other file) is written only once a run is accepted: a refused
  resume used to rewrite it, and `evaluate` then used the refused run's beam size."""
  workdir = copied(dates_run, tmp_path)
  with open(os.path.join(workdir, workdir_lib.LOCK_FILE), 'w') as f:   # another process's
    f.write('process 1 on another-host\n')
  before = snapshot(workdir)
  assert 'config.json' in before and 'results.json' in before
  with pytest.raises(ValueError) as refused:
    train.train_and_evaluate(smoke(dates, data_dir, **override), workdir)
  after = snapshot(workdir)
  assert sorted(after) == sorted(before)
  assert [f for f in before if after[f] != before[f]] == []
  assert needle in str(refused.value)


@pytest.mark.parametrize('overwrite', [True, False])
def test_a_refused_run_leaves_no_lock_file_or_folder_of_its_own(overwrite, data_dir, tmp_path):
  """--overwrite on a user's folder (or a fresh start in a non-empty one) is refused, and the
  folder is left exactly as it was: no .lock (it used to stay behind); a workdir the refused
  run created is removed again, with the parents it made."""
  user = tmp_path / 'user'
  user.mkdir()
  (user / 'notes.txt').write_text('mine')
  c = smoke(dates, data_dir, **{'train.resume': False})   # a fresh start
  with pytest.raises(FileExistsError):
    train.train_and_evaluate(c, str(user), overwrite=overwrite)
  assert sorted(os.listdir(user)) == ['notes.txt']
  lock = workdir_lib.WorkdirLock(str(tmp_path / 'new' / 'run'))
  with pytest.raises(RuntimeError):
    with lock:
      raise RuntimeError('refused')
  assert not (tmp_path / 'new').exists()   # the run folder and the parent it made are gone
  with workdir_lib.WorkdirLock(str(user)):        # a clean exit keeps its lock file (a run's)
    pass
  assert sorted(os.listdir(user)) == ['.lock', 'notes.txt']


def test_overwrite_deletes_only_a_run_of_this_project(dates_run, tmp_path):
  """A user's folder that happens to hold a config.json is refused, naming what it holds,
  and keeps every file; a run (marker, or a config.json beside a run's own files) is cleared
  but for the lock its trainer holds."""
  user = tmp_path / 'user'
  (user / 'src').mkdir(parents=True)
  (user / 'config.json').write_text('{}')
  (user / 'notes.txt').write_text('mine')
  (user / 'src' / 'a.py').write_text('x = 1')
  with pytest.raises(FileExistsError, match=r"not an attention_jax run \(it holds notes.txt, "
                                            r"src/\)"):
    train.prepare_workdir(str(user), resume=False, overwrite=True)
  assert snapshot(str(user)) == {'config.json': b'{}', 'notes.txt': b'mine',
                                 os.path.join('src', 'a.py'): b'x = 1'}
  (user / 'model.ckpt').write_text('')   # no config.json at all: refused too
  (user / 'config.json').unlink()
  with pytest.raises(FileExistsError, match='it holds model.ckpt, notes.txt, src/'):
    train.prepare_workdir(str(user), resume=False, overwrite=True)

  run = tmp_path / 'run'
  shutil.copytree(dates_run[0], run)
  assert workdir_lib.MARKER in os.listdir(run)
  (run / 'notes.txt').write_text('in a marked run: the user was told it is a run')
  train.prepare_workdir(str(run), resume=False, overwrite=True)
  assert os.listdir(run) == [workdir_lib.LOCK_FILE]
  legacy = tmp_path / 'legacy'   # a run from before the marker
  shutil.copytree(dates_run[0], legacy, ignore=shutil.ignore_patterns(workdir_lib.MARKER))
  assert workdir_lib.foreign_entries(str(legacy)) == []
  (legacy / 'data.csv').write_text('')
  assert workdir_lib.foreign_entries(str(legacy)) == ['data.csv']


BAD_FLAGS = [
    ('--config.model.score=bogus', "unknown model.score 'bogus'; valid: additive"),
    ('--config.train.steps=many', 'many'),
    ('--config.model.nonexistent=3', 'nonexistent'),
    ('--config=experiments/configs/nope.py', 'nope.py'),
    ('--config=experiments/configs/dates.py:bogus', 'error: flag --config=experiments/configs/'
     'dates.py:bogus: Error whilst parsing config file: ValueError: unknown config argument '
     "'bogus'; valid: 'smoke' (or none)"),
    ('--config.train.max_decode_factor=-1',
     'error: train.max_decode_factor must be a finite number > 0, got -1.0'),
    ('--config.train.lr=inf', 'error: train.lr must be a finite number > 0, got inf'),
    ('--config.eval.beam_size=0', 'error: eval.beam_size must be a positive integer, got 0'),
    ('--config.eval.bleu_tokenize=bogus', "error: unknown eval.bleu_tokenize 'bogus'"),
    ('--config.train.ema_decay=1', 'error: train.ema_decay must be in [0, 1) (0: no EMA), got 1'),
    ('--config.train.bogus=1', "error: unknown config field 'train.bogus' in "
                               "--config.train.bogus=1; fields of train: baseline_decay,"),
]


def test_bad_flags_are_one_line_naming_them_and_change_nothing(tmp_path):
  """Every bad flag (all run at once: each is `python -m experiments.main`, forked from a
  process that imported the package: helpers.run_modules) exits 2 with one `error:` line
  naming it, before any work: the workdir is not even created."""
  procs = run_modules('experiments.main', [
      ['--config=experiments/configs/dates.py:smoke', f'--workdir={tmp_path / str(i)}', flag]
      for i, (flag, _) in enumerate(BAD_FLAGS)])
  for (flag, needle), proc in zip(BAD_FLAGS, procs):
    assert proc.returncode == 2, (flag, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: ') and needle in lines[0], (
        flag, proc.stderr)
  assert os.listdir(tmp_path) == []


def test_evaluate_workdir_writes_report_plot_and_heatmaps(dates_run, tmp_path):
  workdir, summary = copied(dates_run, tmp_path), dates_run[1]
  report = aj.evaluate_run(workdir, split='test', beam=1, num_heatmaps=2, verbose=False)
  assert report['sentences'] == 32
  assert report['exact_match'] == summary['results']['test']['exact_match']  # same greedy
  assert sum(r['sentences'] for r in report['by_length']) == 32
  assert os.path.exists(report['bleu_by_length_plot'])
  assert len(report['heatmaps']) == 3 and all(os.path.exists(p) for p in report['heatmaps'])
  assert os.path.exists(os.path.join(workdir, 'eval_test_beam1_a0.6.json'))
  # per-sentence records beside it, the same outputs as training's own (greedy) evaluation
  _, again = records.read(report['sentences_file'])
  _, final = records.read(workdir_lib.Run(workdir).sentences_path('test'))
  assert report['sentences_file'].endswith('eval_test_beam1_a0.6.sentences.jsonl')
  assert [r['hyp'] for r in again] == [r['hyp'] for r in final] and len(final) == 32
  # a record's source length is its number of source tokens (characters here), EOS not counted
  texts = data.load_task(ml_collections.ConfigDict(
      workdir_lib.Run(workdir).config()['data'])).texts('test')
  assert [r['src_len'] for r in final] == [len(texts[r['id']][0]) for r in final]


def test_resume_refuses_another_config_but_accepts_fields_the_run_predates():
  """A workdir's saved config.json against the config of the command resuming it: a model or
  data field that differs is refused, naming it; a model field added to the code after the
  run was saved counts as its default (runs trained before the Transformer existed resume)."""
  cfg = dates.get_config()
  saved = json.loads(cfg.to_json())
  for field in ('arch', 'd_model', 'positions'):   # fields of issue 19, absent in older runs
    del saved['model'][field]
  train.check_same_config(saved, cfg, 'runs/x')      # defaults: resumes
  cfg.model.arch = 'transformer'
  with pytest.raises(ValueError, match=r"model\.arch: saved 'rnn', now 'transformer'"):
    train.check_same_config(saved, cfg, 'runs/x')
  cfg = dates.get_config()
  cfg.data.max_src_len += 1
  with pytest.raises(ValueError, match=r'runs/x.*another config.*data\.max_src_len'):
    train.check_same_config(json.loads(dates.get_config().to_json()), cfg, 'runs/x')


def test_the_compiled_steps_are_keyed_by_the_spec_they_are_built_from():
  """Compiled is built from a StepSpec alone (so an option it depends on cannot be missing from
  its cache key): the same spec reuses the compiled steps, an option outside it (how often
  to evaluate) too, and a changed optimiser, objective or seed gets new ones."""
  assert list(inspect.signature(train.Compiled.__init__).parameters) == ['self', 'spec']
  cfg = dates.get_config('smoke')
  graphdef, _ = templates.abstract_params(train.model_config(cfg, 20, 20))
  first = train.Compiled.of(graphdef, cfg)
  assert train.Compiled.of(graphdef, cfg) is first
  cfg.train.eval_every += 1
  assert train.Compiled.of(graphdef, cfg) is first
  for section, field, value in (('train', 'lr', 1e-4), ('train', 'label_smoothing', 0.1),
                                ('train', 'ema_decay', 0.9), (None, 'seed', 7)):
    changed = dates.get_config('smoke')
    (changed if section is None else changed[section])[field] = value
    assert train.Compiled.of(graphdef, changed) is not first, field
  constant = dates.get_config('smoke')
  constant.train.decay = 'constant'
  again = train.Compiled.of(graphdef, constant)
  constant.train.steps += 100   # a constant rate does not read the total
  assert train.Compiled.of(graphdef, constant) is again
