"""Golden losses (a habit of nanodo's): five train steps of two tiny models on a fixed batch
give the losses recorded here. A failure means that a change altered the numbers a run
produces (initialisation, dropout masks, the model or the loss), on purpose or not."""

import jax
import numpy as np
import pytest

from attention_jax.training import steps, train
from experiments.bench import workload
from experiments.configs import dates

# (model overrides, the losses of steps 1-5), recorded 2026-11-25 at c2285b9
GOLDEN = {
    'rnn': ({}, [3.048770, 3.040607, 3.007129, 2.997917, 2.956209]),
    'transformer': ({'arch': 'transformer', 'd_model': 16, 'heads': 2, 'ff_dim': 32,
                     'transformer_layers': 2}, [3.503363, 3.555987, 3.375407, 3.248639, 3.098379]),
}
HOW_TO_FIX = ('the losses of five train steps of the tiny {name} model changed from {want} to '
              '{got}. If the change was meant to alter the numbers (initialisation, dropout, '
              'the model, the loss), put the new values in tests/test_golden.py GOLDEN and say '
              'why in the commit message; if not, find the change that did it.')


def losses(overrides: dict, n: int = 5) -> list[float]:
  cfg = dates.get_config('smoke')
  cfg.parallel = 'single'
  cfg.model.update(overrides)
  shape = workload.CONFIGS['tiny']
  mcfg = train.model_config(cfg, shape.vocab, shape.vocab)
  graphdef, state = steps.init_state(mcfg, steps.make_optimizer(cfg.train), cfg.seed)
  step = train.Steps.of(graphdef, cfg).train
  batch = jax.device_put(workload.make_batch(shape, 0))
  out = []
  for _ in range(n):
    state, metrics = step(state, batch)
    out.append(float(metrics['loss']))
  return out


@pytest.mark.parametrize('name', sorted(GOLDEN))
def test_five_train_steps_give_the_recorded_losses(name):
  overrides, want = GOLDEN[name]
  got = losses(overrides)
  assert np.allclose(got, want, rtol=1e-4, atol=0), HOW_TO_FIX.format(
      name=name, want=want, got=got)
