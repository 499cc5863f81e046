"""Golden numbers (a habit of nanodo's): five train steps of six tiny models on a fixed batch
give the losses, and the root mean squares of the gradients, of the parameter updates and of
the parameters, recorded here. A failure means that a change altered the numbers a run
produces (initialisation, dropout masks, the model, the loss or the optimiser), on purpose or
not: the loss alone can hide a change that the gradients or the updates show."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_jax.data import batching
from attention_jax.state import templates
from attention_jax.training import train, update
from experiments.configs import dates

IMAGE = {'encoder': 'cnn', 'cnn_layers': 2, 'cnn_width': 8, 'image_dim': 16}
# name -> (model overrides, {figure: its values at steps 1-5}), recorded 2026-11-27 at 3ffcf57
# (the losses of 'rnn' and 'transformer' as recorded 2026-11-25 at c2285b9, to 1e-6). The
# updates of step 1 are 0: the learning rate warms up from 0 (train.warmup_steps).
GOLDEN = {
    'rnn': ({}, {
        'loss': [3.048771, 3.040607, 3.007128, 2.997916, 2.95621],
        'grad_rms': [0.002457203, 0.002476207, 0.002474472, 0.002277542, 0.002277481],
        'update_rms': [0, 0.001265173, 0.00239236, 0.002146578, 0.001700792],
        'param_rms': [0.1726056, 0.1725783, 0.1725601, 0.1725719, 0.1726129],
    }),
    'luong': ({'decoder': 'luong', 'score': 'general'}, {
        'loss': [3.03404, 3.017734, 3.005955, 2.983373, 2.945473],
        'grad_rms': [0.002564059, 0.002529599, 0.002409696, 0.002426422, 0.002237295],
        'update_rms': [0, 0.001264287, 0.002383247, 0.002142788, 0.001690143],
        'param_rms': [0.175603, 0.1755817, 0.1755734, 0.175602, 0.1756481],
    }),
    'hard': ({'attention_mode': 'hard'}, {
        'loss': [3.059065, 3.059235, 3.015026, 3.022251, 2.986053],
        'grad_rms': [0.01907427, 0.01715162, 0.02757071, 0.02135303, 0.01220752],
        'update_rms': [0, 0.001098586, 0.001872802, 0.001621339, 0.001266143],
        'param_rms': [0.1726056, 0.1725769, 0.1725389, 0.1725251, 0.1725281],
    }),
    'transformer': ({'arch': 'transformer', 'd_model': 16, 'heads': 2, 'ff_dim': 32,
                     'transformer_layers': 2}, {
        'loss': [3.503362, 3.555988, 3.375408, 3.248639, 3.098379],
        'grad_rms': [0.01540768, 0.01473861, 0.01354396, 0.01256728, 0.01074202],
        'update_rms': [0, 0.001171576, 0.002119957, 0.001870302, 0.001446207],
        'param_rms': [0.2645863, 0.264558, 0.2645168, 0.2644891, 0.2644729],
    }),
    'cnn': (IMAGE, {
        'loss': [3.078765, 3.077697, 3.012949, 2.873223, 2.88295],
        'grad_rms': [0.00965269, 0.00893117, 0.008236501, 0.005171357, 0.004883091],
        'update_rms': [0, 0.001353477, 0.002592657, 0.002225777, 0.001641827],
        'param_rms': [0.1818669, 0.1818443, 0.1818251, 0.1818417, 0.181863],
    }),
    'vit': ({'encoder': 'vit', 'patch_size': 4, 'd_model': 16, 'heads': 2, 'ff_dim': 32,
             'transformer_layers': 1, 'image_dim': 16}, {
        'loss': [3.253006, 3.293479, 3.203443, 3.077255, 2.938245],
        'grad_rms': [0.01137876, 0.01181059, 0.01009095, 0.008084111, 0.006398888],
        'update_rms': [0, 0.001370236, 0.002612905, 0.002289563, 0.001710842],
        'param_rms': [0.2017381, 0.2017121, 0.2016966, 0.2017052, 0.2017239],
    }),
}
RECORDED = ('loss', 'grad_rms', 'update_rms', 'param_rms')
HOW_TO_FIX = ('the {figure} of five train steps of the tiny {name} model changed from {want} '
              'to {got}. If the change was meant to alter the numbers (initialisation, dropout, '
              'the model, the loss, the optimiser), put the new values in tests/test_golden.py '
              'GOLDEN and say why in the commit message; if not, find the change that did it.')


VOCAB, ROWS, LENGTHS = 20, 8, (4, 10)   # the batch: ids in [4, 20) (0-3: PAD, BOS, EOS, UNK)


def golden_batch() -> dict[str, np.ndarray]:
  """The recorded figures' batch: ROWS random (source, target) id sentences, lengths uniform
  in LENGTHS independently per side (NumPy's generator, seed 0), padded to 16 x 16."""
  rng = np.random.default_rng(0)

  def side():
    return [rng.integers(4, VOCAB, size=int(n)).tolist()
            for n in rng.integers(LENGTHS[0], LENGTHS[1] + 1, size=ROWS)]
  src, tgt = side(), side()
  enc = batching.TokenizedSplit(batching.Ragged.from_lists(src), batching.Ragged.from_lists(tgt))
  padded = batching.round_up(LENGTHS[1] + 1)
  return batching.make_batch(enc, range(ROWS), (padded, padded), ROWS)


def rms(tree) -> float:
  leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]
  return float(np.sqrt(sum((x ** 2).sum() for x in leaves) / sum(x.size for x in leaves)))


def figures(overrides: dict, n: int = 5) -> dict[str, list[float]]:
  """The loss, the gradient's RMS (its global norm over sqrt(#parameters)), the update's RMS
  (new minus old parameters) and the parameters' RMS after each of n train steps."""
  cfg = dates.get_config('smoke')
  cfg.parallel = 'single'
  cfg.model.update(overrides)
  mcfg = train.model_config(cfg, VOCAB, VOCAB)
  graphdef, state = templates.init_state(mcfg, update.make_optimizer(cfg.train), cfg.seed)
  step = train.Compiled.of(graphdef, cfg).train
  batch = golden_batch()
  if mcfg.source == 'images':   # the same targets, read from fixed random 16 x 32 images
    batch['src'] = np.random.default_rng(0).random((ROWS, 16, 32), dtype=np.float32)
  batch = jax.device_put(batch)
  count = sum(x.size for x in jax.tree.leaves(state['params']))
  out = {k: [] for k in RECORDED}
  for _ in range(n):
    before = jax.device_get(state['params'])
    state, metrics = step(state, batch)
    after = jax.device_get(state['params'])
    out['loss'].append(float(metrics['loss']))
    out['grad_rms'].append(float(metrics['grad_norm']) / float(np.sqrt(count)))
    out['update_rms'].append(rms(jax.tree.map(jnp.subtract, after, before)))
    out['param_rms'].append(rms(after))
  return out


# the RNN, the Transformer and hard attention in the suite; Luong's decoder and the image
# encoders (4 s each) in CI's extended tier
@pytest.mark.parametrize('name', [pytest.param(n, marks=pytest.mark.extended)
                                  if n in ('luong', 'cnn', 'vit') else n for n in sorted(GOLDEN)])
def test_five_train_steps_give_the_recorded_figures(name):
  overrides, want = GOLDEN[name]
  got = figures(overrides)
  assert set(want) == set(RECORDED), f'{name}: record {sorted(set(RECORDED) - set(want))}'
  for figure in RECORDED:
    assert np.allclose(got[figure], want[figure], rtol=1e-4, atol=0), HOW_TO_FIX.format(
        figure=figure, name=name, want=want[figure], got=[round(x, 6) for x in got[figure]])
