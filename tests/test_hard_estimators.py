"""Hard attention's gradient estimators (training/objective.py, update.train_step), as a
specification: on a tiny model whose expectation over the sampled positions can be
enumerated, the mean of each estimator over many draws is the exact gradient (unbiased), the
variance reducers reduce the variance, and `hard_expected_p=1` is soft attention's gradient.

The tiny model: B sentences of T target steps over S source positions, fixed annotations
h̄_{b,s} = E[src_{b,s}] [K], attention a_t = softmax(θ_t) (not depending on earlier samples,
so p(s) = Π_t a_{t,s_t}), logits_{b,t} = (h̄_{b,s_t} + h̄_{b,s_{t-1}}) W [V]: a sample
affects its own token and the next (as input feeding does), so a reward that missed a later
token would be biased. Its objective J = E_s[log p(y | s, x)] is a sum over (s_t, s_{t-1})
pairs, computed exactly.
Each estimate is the gradient that update.train_step applies (SGD with rate 1: old - new).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from attention_jax.models import attention
from attention_jax.models.attention import Read
from attention_jax.training import objective, update

B, T, S, K, V = 2, 3, 4, 3, 5
SRC = jnp.array([[1, 2, 3, 4], [2, 4, 1, 0]], jnp.int32)      # the second sentence padded
TGT_OUT = jnp.array([[1, 4, 2], [3, 0, 0]], jnp.int32)          # 3 and 1 real tokens
BATCH = {'src': SRC, 'tgt_in': jnp.zeros((B, T), jnp.int32), 'tgt_out': TGT_OUT,
         'weight': jnp.ones((B,), jnp.float32)}
TABLE = jax.random.normal(jax.random.key(5), (V, K))             # fixed annotations


class Tiny(nnx.Module):
  """The model of the module docstring, with any attention mode ('hard' or 'global')."""

  def __init__(self, mode: str):
    self.theta = nnx.Param(jax.random.normal(jax.random.key(1), (T, S)))
    self.w = nnx.Param(jax.random.normal(jax.random.key(2), (K, V)))
    self.mode = attention.MODES[mode](query_dim=1, window=1, temperature=1.0,
                                      dtype=jnp.float32, rngs=nnx.Rngs(0))

  def source_mask(self, src):
    return src != 0

  def weights(self, src):
    return attention.masked_softmax(jnp.broadcast_to(self.theta[None], (src.shape[0], T, S)),
                                    self.source_mask(src)[:, None, :])      # [B, T, S]

  def forward(self, src, tgt_in, *, dropout_key=None, sample_key=None):
    del tgt_in, dropout_key
    w, keys = self.weights(src), TABLE[src]                                 # [B,T,S], [B,S,K]
    ctx, logp, entropy = self.mode.read(w, keys, sample_key)               # [B,T,K], [B,T]
    prev = jnp.pad(ctx[:, :-1], ((0, 0), (1, 0), (0, 0)))                  # c_{t-1}, c_{-1} = 0
    logits = (ctx + prev) @ self.w                                          # [B, T, V]
    return logits, Read(ctx, w, logp, entropy, jnp.zeros((src.shape[0], T)))


def exact_gradient(mode='hard'):
  """-∇J / N (N real target tokens): what the mean estimate must equal; for 'global' the
  gradient of soft attention's -log p(y | E[s], x) / N (the context Σ_s a_{t,s} h̄_s)."""
  graphdef, params = nnx.split(Tiny(mode), nnx.Param)
  mask = (TGT_OUT != 0).astype(jnp.float32)

  def minus_j(params):
    m = nnx.merge(graphdef, params)
    a, h = m.weights(SRC), TABLE[SRC]                                      # [B,T,S], [B,S,K]
    if mode == 'global':
      c = jnp.einsum('bts,bsk->btk', a, h)
      c = c + jnp.pad(c[:, :-1], ((0, 0), (1, 0), (0, 0)))
      ll = jnp.take_along_axis(jax.nn.log_softmax(c @ m.w), TGT_OUT[..., None], -1)[..., 0]
      return -jnp.sum(ll * mask) / jnp.sum(mask)
    one = jax.nn.log_softmax(h @ m.w, -1)                                   # [B, S, V]
    pair = jax.nn.log_softmax((h[:, :, None] + h[:, None]) @ m.w, -1)      # [B, S, S', V]
    pick = lambda lp, t: jnp.take_along_axis(
        lp, jnp.broadcast_to(TGT_OUT[:, t].reshape((B,) + (1,) * (lp.ndim - 1)),
                             lp.shape[:-1] + (1,)), -1)[..., 0]
    expected = [jnp.einsum('bs,bs->b', a[:, 0], pick(one, 0))]              # [B] per step
    expected += [jnp.einsum('bs,bz,bsz->b', a[:, t], a[:, t - 1], pick(pair, t))
                 for t in range(1, T)]                                      # s_t, s_{t-1} = z
    return -jnp.sum(jnp.stack(expected, 1) * mask) / jnp.sum(mask)
  return jax.tree.leaves(jax.grad(minus_j)(params))


def estimates(n: int, mode='hard', baseline=0.0, **fields):
  """n draws of the gradient train_step applies -> [n, P] (the parameters flattened)."""
  model = Tiny(mode)
  graphdef, _ = nnx.split(model)
  tx = optax.sgd(1.0)
  state = {'step': jnp.int32(0), 'params': nnx.state(model), 'opt': tx.init(nnx.state(model))}
  if attention.MODES[mode].stochastic:
    state['baseline'] = jnp.float32(baseline)
  obj = objective.Objective(**fields)

  def one(seed):
    new, _ = update.train_step(graphdef, tx, obj, seed, state, BATCH)
    return [o - n for o, n in zip(jax.tree.leaves(state['params']),
                                  jax.tree.leaves(new['params']))]
  g = jax.jit(jax.vmap(one))(jnp.arange(n))
  return np.concatenate([np.asarray(x).reshape(n, -1) for x in g], 1)


def flat(leaves):
  return np.concatenate([np.asarray(x).ravel() for x in leaves])


ESTIMATORS = {   # name -> (Objective fields, the moving-average baseline in the state)
    'sentence, no baseline': ({}, 0.0),
    'sentence, moving baseline': ({}, -4.0),
    'to_go': ({'reward': 'to_go'}, -1.7),
    'leave_one_out K=4': ({'reinforce_samples': 4}, 0.0),
    'to_go + leave_one_out K=4': ({'reward': 'to_go', 'reinforce_samples': 4}, 0.0),
    'expected_p=0.5 (Xu et al.)': ({'hard_expected_p': 0.5}, -4.0),
}


@pytest.mark.parametrize('name', list(ESTIMATORS))
def test_each_estimator_is_unbiased(name):
  """The mean of 20,000 estimates equals the exact gradient within 4 standard errors. With
  hard_expected_p = p (Xu et al.'s trick) that is the gradient of the mixture they train,
  (1 - p) E_s[log p(y | s, x)] + p log p(y | E[s], x), not of the hard objective alone."""
  fields, baseline = ESTIMATORS[name]
  p = fields.get('hard_expected_p', 0.0)
  exact = (1 - p) * flat(exact_gradient()) + p * flat(exact_gradient('global'))
  g = estimates(20_000, baseline=baseline, **fields)
  mean, err = g.mean(0), g.std(0) / np.sqrt(len(g))
  assert np.abs(exact).max() > 0.05                                         # not trivial
  assert (np.abs(mean - exact) < 4 * err + 1e-4).all(), (name, mean, exact, err)


@pytest.mark.extended   # 4,000 samples an estimator (4 s): after the suite, in CI
def test_the_variance_reducers_reduce_the_variance():
  """Summed per-parameter variance of one estimate: a baseline, rewards to go and leave-one-
  out each lower it against the plain sentence reward (K samples also average K draws)."""
  var = {name: estimates(4_000, baseline=b, **f).var(0).sum()
         for name, (f, b) in ESTIMATORS.items()}
  plain = var['sentence, no baseline']
  assert var['sentence, moving baseline'] < 0.5 * plain, var
  assert var['to_go'] < var['sentence, moving baseline'], var
  assert var['leave_one_out K=4'] < 0.25 * plain, var
  assert var['to_go + leave_one_out K=4'] < var['leave_one_out K=4'], var
  assert var['expected_p=0.5 (Xu et al.)'] < var['sentence, moving baseline'], var


def test_hard_expected_p_1_is_soft_attention_s_gradient():
  """Every example on the expected context: no sample, no REINFORCE term, the gradient of
  global soft attention exactly, whatever the key."""
  hard = estimates(3, 'hard', baseline=-4.0, hard_expected_p=1.0)
  soft = estimates(3, 'global')
  np.testing.assert_allclose(hard, soft, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(soft[0], flat(exact_gradient('global')), rtol=1e-5, atol=1e-6)


def test_hard_expected_p_1_is_soft_attention_through_a_bahdanau_decoder():
  """The same through the real model: a hard Bahdanau model with hard_expected_p=1 takes the
  step a global one takes from the same parameters (the sampling key threaded through the
  decoder loop to Hard.read)."""
  from attention_jax.models.model import ModelConfig, build
  cfgs = {m: ModelConfig(src_vocab=V, tgt_vocab=V, emb_dim=4, enc_hidden=4, dec_hidden=4,
                         attn_dim=4, score='additive', attention_mode=m) for m in ('hard', 'global')}
  tx = optax.sgd(1.0)
  out = {}
  for m, cfg in cfgs.items():
    model = build(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    state = {'step': jnp.int32(0), 'params': params, 'opt': tx.init(params)}
    if m == 'hard':
      state['baseline'] = jnp.float32(-3.0)
    obj = objective.Objective(hard_expected_p=1.0 if m == 'hard' else 0.0)
    step = jax.jit(lambda st, b, g=graphdef, o=obj: update.train_step(g, tx, o, 7, st, b))
    new, _ = step(state, BATCH)     # (jitted: eagerly, each of its operations compiles alone)
    out[m] = flat(jax.tree.map(lambda o, n: o - n, jax.tree.leaves(params),
                               jax.tree.leaves(new['params'])))
  assert np.abs(out['global']).max() > 1e-4
  np.testing.assert_allclose(out['hard'], out['global'], rtol=1e-4, atol=1e-6)


def test_hard_soft_steps_put_every_example_on_the_soft_context_then_hard_expected_p():
  """The curriculum: for the first hard_soft_steps steps every example reads the soft context
  (the step equals soft attention's), from then on the share is hard_expected_p."""
  obj = objective.Objective(hard_expected_p=0.25, hard_soft_steps=100)
  share = [float(obj.expected_share(jnp.int32(s))) for s in (0, 50, 99, 100, 1000)]
  np.testing.assert_allclose(share, [1.0, 1.0, 1.0, 0.25, 0.25])
  hard = estimates(2, 'hard', baseline=-4.0, hard_soft_steps=100)
  np.testing.assert_allclose(hard, estimates(2, 'global'), rtol=1e-6, atol=1e-7)


def test_bad_estimator_settings_are_named():
  with pytest.raises(ValueError, match=r"train.reward 'bogus'; valid: sentence, to_go"):
    objective.Objective(reward='bogus')
  with pytest.raises(ValueError, match=r'hard_expected_p must be in \[0, 1\].*1.5'):
    objective.Objective(hard_expected_p=1.5)
  with pytest.raises(ValueError, match=r'hard_soft_steps must be an integer >= 0.*-5'):
    objective.Objective(hard_soft_steps=-5)
  with pytest.raises(ValueError, match=r'reinforce_samples must be a positive integer.*0'):
    objective.Objective(reinforce_samples=0)
  assert dataclasses.replace(objective.Objective(), reward='to_go').variance_reduction == [
      "train.reward='to_go'"]
