"""One update of the parameters: the optimiser (its schedules) and the pure train step.

The train state (state/templates.py) is a plain pytree {'step', 'params', 'opt'} (plus 'baseline' for the hard
attention modes, 'ema' with train.ema_decay > 0); the model is rebuilt inside the step with
`nnx.merge(graphdef, params)`, so the step is a pure function of its inputs, run as is under
`jax.jit` or per device under `jax.shard_map` / `jax.pmap` (data_parallel.py). Dropout key =
fold_in(key(seed), step): a resumed run draws the same masks. Used by train.py (the loop),
data_parallel.py and population.py.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from attention_jax import fields
from attention_jax.models import attention
from attention_jax.training import objective


SCHEDULES = {
    'constant': lambda lr, total: optax.constant_schedule(lr),
    'cosine': lambda lr, total: optax.cosine_decay_schedule(lr, max(total, 1), alpha=0.05),
    'rsqrt': lambda lr, total: lambda s: lr * jax.lax.rsqrt(jnp.maximum(s, 1.0) / 100.0 + 1.0),
}


@dataclasses.dataclass(frozen=True)
class Optimizer(fields.Fields):
  """The optimiser's fields of the `train` section: AdamW, warmup, decay, clipping."""
  SECTION = 'train'
  SMOKE = {'warmup_steps': 2}
  lr: float = fields.number(3e-3, 'the peak learning rate', strict=True)
  warmup_steps: int = fields.number(200, 'linear warmup from 0')
  decay: str = fields.one_of('cosine', lambda: SCHEDULES, 'the rate after the warmup')
  weight_decay: float = fields.number(0.0, "AdamW's weight decay")
  clip_norm: float = fields.number(1.0, 'gradient clipping by global norm (0: none)')


fields.own('the optimiser', Optimizer)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """What the optimiser is built from (the `train` section's optimiser fields): hashable, so
  that it keys the compiled train step (train.StepSpec)."""
  lr: float
  warmup_steps: int
  decay: str                 # SCHEDULES
  weight_decay: float
  clip_norm: float
  steps: int | None          # the schedule's total (None for a constant rate: unused)

  @classmethod
  def of(cls, t: ml_collections.ConfigDict) -> 'OptimizerConfig':
    """From a `train` section (its optimiser fields checked: Optimizer)."""
    o = Optimizer.of(t)
    return cls(lr=o.lr, warmup_steps=o.warmup_steps, decay=o.decay,
               weight_decay=o.weight_decay, clip_norm=o.clip_norm,
               steps=None if o.decay == 'constant' else t.steps)

  def build(self) -> optax.GradientTransformation:
    """AdamW, linear warmup then `decay`, gradient clipping by global norm."""
    decay = SCHEDULES[self.decay](self.lr, (self.steps or 0) - self.warmup_steps)
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, self.lr, max(self.warmup_steps, 1)), decay],
        [self.warmup_steps])
    chain = [optax.clip_by_global_norm(self.clip_norm)] if self.clip_norm > 0 else []
    return optax.chain(*chain, optax.adamw(schedule, weight_decay=self.weight_decay))


def make_optimizer(t: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW, linear warmup then `t.decay`, gradient clipping by global norm."""
  return OptimizerConfig.of(t).build()


def train_step(graphdef, tx, obj: objective.Objective, seed: int, state, batch,
               axis_name: str | None = None, ema_decay: float = 0.0):
  """One optimiser step. A non-finite loss or gradient leaves params and opt unchanged
  (metrics['finite'] = 0), so the caller can stop with the last good state intact.

  With state['ema'] (train.ema_decay > 0), an exponential moving average of the parameters
  follows the new ones, ema <- d * ema + (1 - d) * params (Polyak & Juditsky 1992; the
  averaged weights of e.g. Vaswani et al. 2017's checkpoint averaging, online).

  Data parallel (axis_name set, run under shard_map or pmap): each device holds a shard of
  the batch; its loss is normalised by the *global* token count, so the psum of the
  per-device gradients is exactly the gradient of the global mean loss (the pmean of
  per-device gradients when shards hold equal token counts), and the result equals one
  device on the whole batch up to float rounding. Dropout masks differ per device.
  """
  key = jax.random.fold_in(jax.random.key(seed), state['step'])
  if axis_name:
    key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
  dropout_key, sample_key = jax.random.split(key)
  psum = (lambda x: jax.lax.psum(x, axis_name)) if axis_name else (lambda x: x)
  sampling = 'baseline' in state   # a hard mode (state/templates.py)
  k = obj.reinforce_samples if sampling else 1
  rows = batch if k == 1 else jax.tree.map(   # K copies of the batch, copy-major [K*B, ...]
      lambda x: jnp.tile(x, (k,) + (1,) * (x.ndim - 1)), batch)
  sample = sample_key
  if sampling and (obj.hard_expected_p > 0 or obj.hard_soft_steps):
    mix_key, sample_key = jax.random.split(sample_key)  # Xu et al. 2015 §4.1: these rows read
    expected = jax.random.bernoulli(                     # the expected context
        mix_key, obj.expected_share(state['step']), rows['src'].shape[:1])
    sample = attention.Sample(sample_key, expected)

  def loss_fn(params):
    model = nnx.merge(graphdef, params)
    logits, read = model.forward(rows['src'], rows['tgt_in'], dropout_key=dropout_key,
                                 sample_key=sample)
    layers = model.layer_weights(read) if obj.guided_alignment_weight else None
    loss, s, baseline = objective.loss(obj, logits, read, rows, state.get('baseline'), psum,
                                       src_mask=model.source_mask(rows['src']), layers=layers)
    if k > 1:   # the metrics of one copy of the batch (each token counted once)
      s = jax.tree.map(lambda x: x / k, s)
    return loss, (s, baseline)

  (loss, (sums, baseline)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state['params'])
  loss, sums, grads = psum(loss), psum(sums), psum(grads)
  grad_norm = optax.tree.norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  updates, opt = tx.update(grads, state['opt'], state['params'])
  params = optax.apply_updates(state['params'], updates)
  keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
  new_state = {'step': state['step'] + 1, 'params': keep(params, state['params']),
               'opt': keep(opt, state['opt'])}
  if baseline is not None:
    new_state['baseline'] = keep(baseline, state['baseline'])
  if 'ema' in state:
    ema = jax.tree.map(lambda e, p: ema_decay * e + (1.0 - ema_decay) * p, state['ema'],
                       new_state['params'])
    new_state['ema'] = keep(ema, state['ema'])
  # 'loss': the (label-smoothed) cross-entropy per token; 'objective': what the gradient is
  # of (differs with coverage loss or REINFORCE terms, whose surrogate is no loss value)
  ce = sums['train_loss_sum'] / jnp.maximum(sums['tokens'], 1.0)
  return new_state, {**sums, 'loss': ce, 'objective': loss, 'grad_norm': grad_norm,
                     'finite': finite}
