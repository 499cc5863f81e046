"""Populations (attention_jax/population.py): member k of a vmapped population is the run of
seed k trained alone, step by step, with its own batch order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_jax import data, objective, population, steps, train
from experiments.configs import reverse

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
  return cfg, task, mcfg, steps.make_optimizer(cfg.train), objective.Objective.of(cfg.train)


@pytest.mark.parametrize('arch,setting', [
    ('rnn', 'padded'), ('transformer', 'dropout'),   # the other two pairs: slow (each ~10 s)
    pytest.param('rnn', 'dropout', marks=pytest.mark.slow),
    pytest.param('transformer', 'padded', marks=pytest.mark.slow)])
def test_member_k_is_the_run_of_seed_k_alone(data_cfg, arch, setting):
  """20 steps, each member its own batch order (padded: of different length buckets, padded
  to a common shape; dropout: with dropout masks): the same losses and final parameters as
  each seed trained alone."""
  cfg, task, mcfg, tx, obj = _setup(data_cfg, arch, setting)
  n = 20
  alone_losses, alone_params = [], []
  graphdef = steps.init_state(mcfg, tx, SEEDS[0])[0]
  # the seed an argument (jax.random.key(seed) as of a Python int): one program for all seeds
  step = jax.jit(lambda seed, st, b: steps.train_step(graphdef, tx, obj, seed, st, b))
  for seed in SEEDS:
    state = steps.init_state(mcfg, tx, seed)[1]
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
