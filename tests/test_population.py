"""Populations (attention_jax/training/population.py): member k of a vmapped population is the
run of seed k trained alone, step by step, with its own batch order; in the training loop
(population_run.py, sweep --population) each member is written as that run, resumes bit for
bit, and a member that diverges does not stop the others."""

import json
import os
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_jax import data
from attention_jax import workdir as workdir_lib
from attention_jax.models.model import ModelConfig
from attention_jax.state import checkpoint as ckpt_lib
from attention_jax.state import templates
from attention_jax.sweeps import sweep_file
from attention_jax.training import objective, population, population_run, train, update
from experiments.configs import dates, reverse

import helpers

SEEDS = (1, 2, 3)
MODELS = {
    'rnn': {},
    'transformer': {'arch': 'transformer', 'd_model': 16, 'heads': 2, 'ff_dim': 32,
                    'transformer_layers': 1},
}
# (dropout, length buckets): padded batches without dropout; dropout with one bucket (a
# dropout mask's random bits depend on the padded shape, so a member whose batch was padded
# further than alone would draw other masks: population.py)
SETTINGS = {'padded': (0.0, 2), 'dropout': (0.1, 1)}


def _setup(data_cfg, arch, setting):
  dropout, buckets = SETTINGS[setting]
  cfg = reverse.get_config('smoke')
  cfg.data = data_cfg('reverse', max_len=10, batch_size=8, num_buckets=buckets)
  cfg.model.update(MODELS[arch], dropout=dropout)
  task = data.load_task(cfg.data)
  mcfg = train.model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size)
  return cfg, task, mcfg, update.make_optimizer(cfg.train), objective.Objective.of(cfg.train)


MESH_SCRIPT = r'''
import jax, jax.numpy as jnp, ml_collections, numpy as np
import attention_jax as aj
from attention_jax import devices
from attention_jax.state import templates
from attention_jax.training import objective, population, train, update
assert jax.device_count() == 8, jax.devices()
shape = lambda n: tuple(devices.population_mesh(n).shape.values())
assert (shape(4), shape(3), shape(16), shape(1)) == ((4, 2), (1, 8), (8, 1), (1, 8))
mcfg = aj.ModelConfig(src_vocab=12, tgt_vocab=10, emb_dim=8, enc_hidden=8, dec_hidden=16,
                      attn_dim=8)
tx = train.make_optimizer(ml_collections.ConfigDict(dict(
    lr=1e-2, warmup_steps=1, decay='constant', steps=4, weight_decay=0.0, clip_norm=1.0)))
obj = objective.Objective()
rng = np.random.default_rng(0)
def batch(n_src):   # 16 rows, some padded
  src = rng.integers(3, 12, (16, n_src)).astype(np.int32); src[::3, 4:] = 0
  tgt = rng.integers(3, 10, (16, 6)).astype(np.int32); tgt[::2, 3:] = 0
  return {'src': src, 'tgt_in': tgt, 'tgt_out': tgt, 'weight': np.ones(16, np.float32),
          'index': np.arange(16, dtype=np.int32)}
graphdef = templates.init_state(mcfg, tx, 0)[0]
one_device = jax.jit(lambda seed, st, b: update.train_step(graphdef, tx, obj, seed, st, b))
for seeds in ((1, 2, 3, 4), (1, 2, 3)):   # meshes 4 x 2 and 1 x 8
  batches = [[batch(7 + (k + i) % 2) for k in range(len(seeds))] for i in range(4)]
  alone = []
  for k, seed in enumerate(seeds):
    state = templates.init_state(mcfg, tx, seed)[1]
    losses = []
    for step_batches in batches:
      state, m = one_device(jnp.int32(seed), state, step_batches[k])
      losses.append(float(m['loss']))
    alone.append((losses, state['params']))
  mesh = devices.population_mesh(len(seeds))
  graphdef, states = population.init_population(mcfg, tx, seeds)
  step = population.make_population_step(graphdef, tx, obj, mesh=mesh)
  losses = []
  for step_batches in batches:
    states, m = step(jnp.asarray(seeds, jnp.int32), states, population.stack_batches(step_batches))
    losses.append(np.asarray(m['loss']))
  leaf = jax.tree.leaves(states['params'])[0]
  assert leaf.sharding.spec[0] == devices.MEMBERS and len(leaf.devices()) == 8, leaf.sharding
  np.testing.assert_allclose(np.stack(losses, 1), [a[0] for a in alone], rtol=1e-5)
  for k, (_, params) in enumerate(alone):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 population.member(states, k)['params'], params)
  print(dict(mesh.shape), 'members agree')
print('OK')
'''


@pytest.mark.extended   # 8 devices in a fresh process (30 s): after the suite, in CI
def test_a_population_split_over_8_devices_trains_each_member_as_its_seed_alone():
  """8 simulated devices (a subprocess: the device count is fixed when JAX starts): a
  population of 4 on a 4 x 2 members x data mesh and one of 3 on 1 x 8, each member's
  batches its own (of different padded lengths), 4 steps: every member's losses and
  parameters those of its seed trained alone on one device."""
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu',   # simulated devices: the host's, also beside a GPU
         'XLA_FLAGS': (os.environ.get('XLA_FLAGS', '') +
                       ' --xla_force_host_platform_device_count=8').strip()}
  proc = subprocess.run([sys.executable, '-c', MESH_SCRIPT], cwd=helpers.ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0 and proc.stdout.strip().endswith('OK'), (
      proc.stdout + proc.stderr[-3000:])
  assert "{'members': 4, 'data': 2} members agree" in proc.stdout, proc.stdout
  assert "{'members': 1, 'data': 8} members agree" in proc.stdout, proc.stdout


@pytest.mark.parametrize('arch,setting', [   # 12-15 s each: after the suite, in CI
    pytest.param('rnn', 'padded', marks=pytest.mark.extended),
    pytest.param('transformer', 'dropout', marks=pytest.mark.extended),
    pytest.param('rnn', 'dropout', marks=pytest.mark.extended),
    pytest.param('transformer', 'padded', marks=pytest.mark.extended)])
def test_member_k_is_the_run_of_seed_k_alone(data_cfg, arch, setting):
  """20 steps, each member its own batch order (padded: of different length buckets, padded
  to a common shape; dropout: with dropout masks): the same losses and final parameters as
  each seed trained alone."""
  cfg, task, mcfg, tx, obj = _setup(data_cfg, arch, setting)
  n = 20
  alone_losses, alone_params = [], []
  graphdef = templates.init_state(mcfg, tx, SEEDS[0])[0]
  # the seed an argument (jax.random.key(seed) as of a Python int): one program for all seeds
  step = jax.jit(lambda seed, st, b: update.train_step(graphdef, tx, obj, seed, st, b))
  for seed in SEEDS:
    state = templates.init_state(mcfg, tx, seed)[1]
    it = task.train_iterator(cfg.data.batch_size, seed=seed)
    losses = []
    for _ in range(n):
      state, m = step(jnp.int32(seed), state, next(it))
      losses.append(float(m['loss']))
    alone_losses.append(losses)
    alone_params.append(state['params'])

  graphdef, states = population.init_population(mcfg, tx, SEEDS)
  step = population.make_population_step(graphdef, tx, obj)
  its = [task.train_iterator(cfg.data.batch_size, seed=seed) for seed in SEEDS]
  seeds = jnp.asarray(SEEDS, jnp.int32)
  losses, shapes = [], set()
  for _ in range(n):
    batches = [next(it) for it in its]
    shapes.add(tuple(b['src'].shape[1] for b in batches))
    states, m = step(seeds, states, population.stack_batches(batches))
    assert m['loss'].shape == (len(SEEDS),)
    losses.append(np.asarray(m['loss']))
  if setting == 'padded':   # some steps padded a member's batch
    assert any(len(set(s)) > 1 for s in shapes), shapes
  np.testing.assert_allclose(np.stack(losses, 1), alone_losses, rtol=1e-5)
  for k, params in enumerate(alone_params):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 population.member(states, k)['params'], params)
  # members differ: their seeds gave them other parameters
  a, b = (jax.tree.leaves(population.member(states, k)['params'])[0] for k in (0, 1))
  assert not np.allclose(a, b)


def test_stack_batches_pads_each_member_to_the_common_shape_and_refuses_other_fields():
  a = {'src': np.ones((2, 3), np.int32), 'weight': np.ones(2, np.float32)}
  b = {'src': np.full((2, 5), 2, np.int32), 'weight': np.zeros(2, np.float32)}
  out = population.stack_batches([a, b])
  assert out['src'].shape == (2, 2, 5) and (out['src'][0, :, 3:] == 0).all()
  assert out['weight'].shape == (2, 2)
  images = [{'src': np.zeros((2, 4, 6), np.float32)}, {'src': np.zeros((2, 4, 8), np.float32)}]
  assert (population.stack_batches(images)['src'][0, :, :, 6:] == -1).all()
  with pytest.raises(ValueError, match="different fields"):
    population.stack_batches([a, {'src': a['src']}])
  with pytest.raises(ValueError, match='distinct seeds'):
    population.init_population(None, None, (1, 1))


# ---- the training loop: train.population=N, sweep --seeds=N --population ------------------------
# (population_run.py) one variant of the dates smoke config (8 steps, checkpoints and
# validation at 4 and 8; one length bucket, so dropout keeps members exact: population.py)
POP_SWEEP = """
from experiments.configs import dates

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'})]
"""


@pytest.fixture(scope='module')
def pop_sweep(tmp_path_factory, data_dir):
  """`sweep --seeds=2 --population` of POP_SWEEP: (sweep file, sweep dir, the process)."""
  tmp = tmp_path_factory.mktemp('pop_sweep')
  path = tmp / 'pop_sweep.py'
  path.write_text(POP_SWEEP)
  proc = helpers.run_module('experiments.sweep', f'--sweep={path}:smoke', f'--root={tmp}',
                            '--seeds=2', '--population', '--',
                            f'--config.data.data_dir={data_dir}', timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return path, tmp / 'pop_sweep_smoke', proc


def _config(data_dir, **overrides):
  return helpers.smoke(dates, data_dir, **{'model.score': 'additive', **overrides})


_TEMPLATES = {}   # model config -> a train state to restore into (the runs here share one)


def _params(workdir: str, step: int):
  """The parameters of the latest checkpoint `step` of a run."""
  run = workdir_lib.Run(workdir)
  key = json.dumps(run.model_config(), sort_keys=True)
  if key not in _TEMPLATES:
    _TEMPLATES[key] = templates.init_state(ModelConfig.from_dict(run.model_config()),
                                       update.make_optimizer(_config('').train), 0)[1]
  ckpts = ckpt_lib.Checkpoints(run)
  try:
    return ckpt_lib.restore(ckpts.latest, step, _TEMPLATES[key])[0]['params']
  finally:
    ckpts.close()


def _steps(workdir: str, which: str = 'latest') -> list[int]:
  run = workdir_lib.Run(workdir)
  d = run.latest_dir if which == 'latest' else run.best_dir
  return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def _same_tree(a, b) -> None:
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _close_results(a: dict, b: dict) -> None:
  """Two results' metrics (results.json 'results'), floats to 1e-4."""
  assert a.keys() == b.keys()
  for split in a:
    for k, x in a[split].items():
      if isinstance(x, float):
        np.testing.assert_allclose(x, b[split][k], rtol=1e-4, atol=1e-4, err_msg=f'{split} {k}')
      elif k != 'by_length':
        assert x == b[split][k], (split, k)


# seed 2, the member whose seed the population derives (cfg.seed + 1); seed 1 is the config's
# own seed, which every run alone trains with
@pytest.mark.parametrize('k', [2])
def test_population_of_two_writes_each_member_as_the_run_of_its_seed_alone(pop_sweep, data_dir,
                                                                            tmp_path, k):
  """The sweep's population (one process, seeds 1 and 2): member k against seed k trained
  alone by train.train_and_evaluate: the same config saved, the same files, the same
  checkpoint steps, parameters to 1e-5 and final metrics to 1e-4."""
  _, sweep_dir, proc = pop_sweep
  assert '[additive/seed_1..2] starting' in proc.stdout, proc.stdout
  member = str(sweep_dir / 'additive' / f'seed_{k}')
  alone = str(tmp_path / f'seed_{k}')
  ref = train.train_and_evaluate(_config(data_dir, seed=k), alone)
  assert workdir_lib.Run(member).config() == workdir_lib.Run(alone).config()  # seed k, population 1
  assert sorted(os.listdir(member)) == sorted(os.listdir(alone) + [   # + the sweep's own
      os.path.basename(workdir_lib.Run(member).train_log_path),
      os.path.basename(workdir_lib.Run(member).wall_time_path)])
  assert _steps(member) == _steps(alone) == [4, 8]
  assert _steps(member, 'best') == _steps(alone, 'best')
  got = workdir_lib.Run(member).results()
  assert got['population'] == {'seeds': [1, 2], 'member': k - 1}
  assert got['nonfinite_skipped'] == 0 and got['step'] == ref['step'] == 8
  _close_results(got['results'], ref['results'])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               _params(member, 8), _params(alone, 8))
  other = str(sweep_dir / 'additive' / f'seed_{3 - k}')
  assert not np.allclose(jax.tree.leaves(_params(member, 8))[0],
                         jax.tree.leaves(_params(other, 8))[0])   # two seeds, two models


def test_sweep_population_gives_the_runs_and_report_of_seeds(pop_sweep, data_dir):
  """`--seeds=2` after `--seeds=2 --population` finds both runs finished and unchanged, and
  writes the same report; each member's log holds the population's log, and its attempt half
  of the population's time."""
  path, sweep_dir, _ = pop_sweep
  report = (sweep_dir / 'summary.md').read_text()
  assert '| additive | 2 |' in report
  for k in (1, 2):
    run = workdir_lib.Run(str(sweep_dir / 'additive' / f'seed_{k}'))
    log = open(run.train_log_path).read()
    assert '[population of 2: seeds 1..2' in log and f'seed_{k} validation @ 8' in log
    (attempt,) = run.attempts()
    assert attempt['population'] == 2 and attempt['returncode'] == 0
  plain = helpers.run_module('experiments.sweep', f'--sweep={path}:smoke',
                             f'--root={sweep_dir.parent}', '--seeds=2', '--',
                             f'--config.data.data_dir={data_dir}')
  assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]
  assert 'sweep pop_sweep_smoke: 0 finished, 2 skipped, 0 failed' in plain.stdout
  assert (sweep_dir / 'summary.md').read_text() == report


@pytest.mark.extended   # a Ray cluster of its own (CI: bash launch.sh test -m extended)
def test_a_ray_sweep_population_gives_the_local_population_s_runs(pop_sweep, data_dir, tmp_path):
  """`sweep --seeds=2 --population --executor=ray`: the population is one Ray task, and each
  member ends as the local executor's member did (the same program: the same metrics, bit for
  bit), with the population's log and its attempt (half the time, on Ray) in each run."""
  path, local_dir, _ = pop_sweep
  proc = helpers.run_module('experiments.sweep', f'--sweep={path}:smoke', f'--root={tmp_path}',
                            '--seeds=2', '--population', '--executor=ray', '--ray_cpus=1', '--',
                            f'--config.data.data_dir={data_dir}', timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert '[additive/seed_1..2] queued (starting)' in proc.stdout, proc.stdout
  assert 'sweep pop_sweep_smoke: 2 finished, 0 skipped, 0 failed' in proc.stdout, proc.stdout
  for k in (1, 2):
    run = workdir_lib.Run(str(tmp_path / 'pop_sweep_smoke' / 'additive' / f'seed_{k}'))
    local = workdir_lib.Run(str(local_dir / 'additive' / f'seed_{k}'))
    assert run.results()['results'] == local.results()['results']
    assert run.results()['population'] == {'seeds': [1, 2], 'member': k - 1}
    (attempt,) = run.attempts()
    assert (attempt['executor'], attempt['population'], attempt['returncode']) == ('ray', 2, 0)
    log = open(run.train_log_path).read()
    assert 'additive/seed_1..2: attempt 1 on' in log and '[population of 2: seeds 1..2' in log


@pytest.mark.scenario   # signals to a running command (CI: bash launch.sh test -m scenario)
def test_a_population_stopped_by_a_signal_resumes_to_the_uninterrupted_one_bit_for_bit(
    pop_sweep, data_dir, tmp_path):
  """Held at step 3 (hold.py), then SIGTERM: every member saves that step, exit 143. The same
  command resumes both members from step 3; held at step 6, SIGKILL: nothing saved since the
  checkpoints of step 4. The same command again resumes both from step 4 and ends with the
  uninterrupted population's parameters and results, bit for bit."""
  path, sweep_dir, _ = pop_sweep
  workdir = tmp_path / 'pop'
  args = [f'--config={path}:smoke', '--config.model.score=additive', '--config.seed=1',
          '--config.train.population=2', f'--workdir={workdir}',
          f'--config.data.data_dir={data_dir}']
  members = [str(workdir / f'seed_{k}') for k in (1, 2)]
  for sig, at, kept in ((signal.SIGTERM, 3, [3]), (signal.SIGKILL, 6, [3, 4])):
    held = tmp_path / f'held_{at}'
    proc = subprocess.Popen([sys.executable, '-m', 'experiments.main', *args],
                            cwd=helpers.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**helpers.hold_env(held, step=at, workdir=workdir),
                                            'PYTHONUNBUFFERED': '1'})
    helpers.wait_held(held, proc)
    proc.send_signal(sig)
    out = proc.stdout.read()
    assert proc.wait(timeout=300) == (128 + sig if sig == signal.SIGTERM else -sig), out
    if sig == signal.SIGTERM:
      assert f'stopped by SIGTERM at step {at}' in out
    else:
      assert all(f'resumed from {m}/checkpoints/latest step 3' in out for m in members), out
    assert [_steps(m) for m in members] == [kept] * 2, out
  done = helpers.run_module('experiments.main', *args)
  assert done.returncode == 0, done.stderr[-3000:]
  for k, member in enumerate(members, 1):
    ref = str(sweep_dir / 'additive' / f'seed_{k}')
    assert f'resumed from {member}/checkpoints/latest step 4' in done.stdout
    _same_tree(_params(member, 8), _params(ref, 8))
    assert workdir_lib.Run(member).results()['results'] == workdir_lib.Run(ref).results()['results']


@pytest.mark.extended   # 4 devices through the loop (15 s): after the suite, in CI
def test_a_population_on_a_mesh_trains_through_the_loop_as_on_one_device(pop_sweep, data_dir,
                                                                        tmp_path):
  """The members x data mesh through the whole training loop (experiments.main on 4 CPU
  devices: 2 member groups x 2 devices splitting each batch; validation, checkpoints, the
  final evaluation): each member ends with the parameters (to 1e-5) and the results (to
  1e-4) of the same population trained on one device (pop_sweep)."""
  path, sweep_dir, _ = pop_sweep
  workdir = tmp_path / 'pop_mesh'
  flags = ' '.join(f for f in os.environ.get('XLA_FLAGS', '').split()
                   if 'device_count' not in f)
  proc = subprocess.run(
      [sys.executable, '-m', 'experiments.main', f'--config={path}:smoke',
       '--config.model.score=additive', '--config.seed=1', '--config.train.population=2',
       '--config.parallel=auto', f'--workdir={workdir}', f'--config.data.data_dir={data_dir}'],
      cwd=helpers.ROOT, capture_output=True, text=True, timeout=600,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',   # 4 simulated devices, also beside a GPU
           'XLA_FLAGS': f'{flags} --xla_force_host_platform_device_count=4'})
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert '4 cpu devices, 2 member groups x 2 splitting each batch' in proc.stdout, proc.stdout
  for k in (1, 2):
    member, ref = str(workdir / f'seed_{k}'), str(sweep_dir / 'additive' / f'seed_{k}')
    assert _steps(member) == _steps(ref)
    for x, y in zip(jax.tree.leaves(_params(member, 8)), jax.tree.leaves(_params(ref, 8)),
                    strict=True):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)
    _close_results(workdir_lib.Run(member).results()['results'],
                   workdir_lib.Run(ref).results()['results'])


@pytest.mark.extended   # a population resumed in-process: after the suite, in CI
def test_members_saved_at_different_steps_resume_from_the_step_they_all_hold(pop_sweep, data_dir,
                                                                             tmp_path, capsys):
  """A kill between two members' saves (seed_2's step 8 missing): both restart from step 4,
  the newest step both hold (each keeps >= 2 latest steps), and end where the uninterrupted
  population ended."""
  _, sweep_dir, _ = pop_sweep
  shutil.copytree(sweep_dir / 'additive', tmp_path / 'pop')
  shutil.rmtree(workdir_lib.Run(str(tmp_path / 'pop' / 'seed_2')).latest_dir + '/8')
  population_run.train_population(_config(data_dir, seed=1, **{'train.population': 2}),
                                     str(tmp_path / 'pop'))
  assert 'seed_1: from step 4, the newest step all members hold (its newest is 8)' in (
      capsys.readouterr().out)
  for k in (1, 2):
    _same_tree(_params(str(tmp_path / 'pop' / f'seed_{k}'), 8),
               _params(str(sweep_dir / 'additive' / f'seed_{k}'), 8))


@pytest.mark.parametrize('skip', [pytest.param(False, marks=pytest.mark.extended),   # 6 s each:
                                  pytest.param(True, marks=pytest.mark.extended)])  # in CI
def test_a_member_with_a_non_finite_step_does_not_stop_the_others(pop_sweep, data_dir, tmp_path,
                                                                  monkeypatch, skip):
  """A NaN in member 2's parameters for step 6 (removed after it): its step is non-finite and
  keeps its state; member 1 trains on to the uninterrupted population's parameters; member 2's
  step is counted (train.skip_nonfinite) or it stops with its last checkpoint (step 4)
  untouched, the call failing at the end naming it."""
  _, sweep_dir, _ = pop_sweep
  real = population.make_population_step

  def with_member(states, k, value):
    leaves, treedef = jax.tree.flatten(states['params'])
    leaves[0] = leaves[0].at[k].set(value)
    return {**states, 'params': jax.tree.unflatten(treedef, leaves)}

  def poisoned(*args, **kwargs):
    step, calls = real(*args, **kwargs), [0]

    def run(seeds, states, batches):
      calls[0] += 1
      if calls[0] != 6:
        return step(seeds, states, batches)
      kept = np.array(jax.tree.leaves(states['params'])[0][1])
      states, m = step(seeds, with_member(states, 1, jnp.nan), batches)
      assert list(np.asarray(m['finite'])) == [True, False]
      assert np.isnan(jax.tree.leaves(states['params'])[0][1]).all()   # kept as it was given
      return with_member(states, 1, kept), m
    return run

  monkeypatch.setattr(population, 'make_population_step', poisoned)
  cfg = _config(data_dir, seed=1, **{'train.population': 2, 'train.skip_nonfinite': skip})
  workdir = tmp_path / 'pop'
  if skip:
    population_run.train_population(cfg, str(workdir))
    assert workdir_lib.Run(str(workdir / 'seed_2')).results()['nonfinite_skipped'] == 1
    assert not np.allclose(jax.tree.leaves(_params(str(workdir / 'seed_2'), 8))[0],
                           jax.tree.leaves(_params(str(sweep_dir / 'additive' / 'seed_2'), 8))[0])
  else:
    with pytest.raises(FloatingPointError, match=r'1 of 2 members stopped .*seed_2: non-finite '
                                                 r'training loss nan .* at step 6'):
      population_run.train_population(cfg, str(workdir))
    assert not workdir_lib.Run(str(workdir / 'seed_2')).finished
    assert _steps(str(workdir / 'seed_2')) == [4]
  assert workdir_lib.Run(str(workdir / 'seed_1')).results()['nonfinite_skipped'] == 0
  ours, uninterrupted = (_params(str(workdir / 'seed_1'), 8),
                         _params(str(sweep_dir / 'additive' / 'seed_1'), 8))
  if jax.default_backend() == 'cpu':   # the uninterrupted population's, bit for bit
    _same_tree(ours, uninterrupted)
  else:   # a GPU's reductions need not repeat bit for bit (measured: 1e-8 apart on an H200)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 ours, uninterrupted)


def test_bad_population_input_is_one_line_before_any_work(data_dir, tmp_path):
  """population < 1, a population under pmap, `--population` without seeds, a member's
  folder in use: one line each, nothing written."""
  with pytest.raises(ValueError, match=r'^train.population must be a positive integer .*got 0$'):
    population_run.train_population(_config(data_dir, **{'train.population': 0}),
                                       str(tmp_path / 'a'))
  with pytest.raises(ValueError, match="parallel='pmap' does not compose"):
    population_run.train_population(
        _config(data_dir, parallel='pmap', **{'train.population': 2}), str(tmp_path / 'a'))
  assert not (tmp_path / 'a').exists()
  with pytest.raises(ValueError, match='train.population=2 trains several seeds: use '
                                       'attention_jax.training.population_run.train_population'):
    train.train_and_evaluate(_config(data_dir, **{'train.population': 2}), str(tmp_path / 'a'))
  assert not (tmp_path / 'a').exists()
  with workdir_lib.WorkdirLock(str(tmp_path / 'b' / 'seed_2')):
    with pytest.raises(workdir_lib.WorkdirInUse, match='seed_2 is in use'):
      population_run.train_population(_config(data_dir, seed=1, **{'train.population': 2}),
                                         str(tmp_path / 'b'))
  assert os.listdir(tmp_path / 'b') == ['seed_2']   # seed_1: not left behind
  out = helpers.run_module('experiments.main', '--config=experiments/configs/dates.py:smoke',
                           '--config.train.population=0', f'--workdir={tmp_path / "c"}')
  assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
      'error: train.population must be a positive integer (the seeds trained as one program; '
      '1: a run alone), got 0'), out.stderr
  sweep_file = tmp_path / 'one.py'
  sweep_file.write_text(POP_SWEEP)
  out = helpers.run_module('experiments.sweep', f'--sweep={sweep_file}', f'--root={tmp_path}',
                           '--population')
  assert out.returncode == 2 and 'give --seeds=N' in out.stderr.strip().splitlines()[-1], out.stderr


def test_sweep_groups_consecutive_seeds_at_the_same_step_into_populations(tmp_path):
  runs = [sweep_file.Variant('a', {}, str(tmp_path / 'a' / f'seed_{k}'), k) for k in (1, 2, 3)]
  runs += [sweep_file.Variant('b', {'model.score': 'dot'}, str(tmp_path / 'b' / f'seed_{k}'), k)
           for k in (1, 2, 4, 5)]
  os.makedirs(workdir_lib.Run(runs[4].workdir).latest_dir + '/5')   # b/seed_2 resumes at 5
  jobs = sweep_file.populations(runs)
  assert [(v.label, v.population) for v in jobs] == [
      ('a/seed_1..3', 3), ('b/seed_1', 1), ('b/seed_2', 1), ('b/seed_4..5', 2)]
  assert [m.workdir for m in jobs[0].members] == [r.workdir for r in runs[:3]]
  cmd = sweep_file.command('x.py', jobs[3])
  assert cmd[-4:] == ['--config.model.score=dot', '--config.seed=4',
                      '--config.train.population=2', f'--workdir={tmp_path / "b"}']
