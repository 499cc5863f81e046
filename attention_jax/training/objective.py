"""The training objective: cross-entropy, plus the terms some attention modes add.

  loss = Σ_{b,t} CE_{b,t} / N                                      (label smoothing optional)
       + λ_cov · Σ_{b,t} Σ_s min(a_{t,s}, cov_{t,s}) / N             coverage (See et al. 2017)
       - λ_r · Σ_{b,t} sg(R_b - baseline) · log a_{t,s_t} / N        REINFORCE (Xu et al. 2015)
       - λ_e · Σ_{b,t} H(a_t) / N                                    entropy bonus (Xu et al. 2015)
       + λ_ds · Σ_b Σ_s (1 - Σ_t a_{t,s})² / N                       doubly stochastic attention
                                                                     (Xu et al. 2015, eq. 14)
       + λ_ga · Σ_{b,t} Σ_s G_{t,s} (log G_{t,s} - log a_{t,s}) / N    guided alignment (Garg et
                                                                     al. 2019; OpenNMT-py's
                                                                     lambda_align)

N is the number of real target tokens (over all devices), R_b = log p(y_b | s, x_b) the
sentence's log-likelihood under the sampled positions, and the baseline a moving average
of the batch-mean R: b ← decay · b + (1 - decay) · mean_b R_b. The gradient of the
REINFORCE term is the score-function estimator of ∇ E_s[log p(y | s, x)], unbiased for any
baseline that does not depend on the sample (tests/test_hard_estimators.py checks this).
Three variance reducers (Objective's fields):
- `hard_expected_p`: the share of examples that read the expected (soft) context, with no
  REINFORCE term (Xu et al. 2015 §4.1 use 0.5); drawn per example in update.train_step;
  `hard_soft_steps` W > 0 puts every example on the soft context for the first W steps, then
  hard_expected_p (a curriculum, not in Xu et al.: attention first learns where to look from
  the soft context's gradient, before samples of it are trained on; a share of samples from
  the start keeps the decoder from reading the context at all on digit_strips, docs/images.md);
- `reinforce_samples` K > 1: each example decoded with K samples, each sample's baseline the
  mean reward of the other K - 1 (leave-one-out; Kool et al. 2019), no moving average;
- `reward='to_go'`: step t's log a_{t,s_t} is weighed by R_{b,t} = log p(y_{b,≥t} | s, x), the
  tokens s_t can affect (step-wise rewards; unbiased, as y_{<t} does not depend on s_t), its
  baseline the moving average of the per-token reward times the tokens left.
The doubly
stochastic term sums over the real source positions s and target steps t of each sentence:
it pushes every position (an image region) to receive about one unit of attention in all.

Guided alignment (Garg et al. 2019, "Jointly learning to align and translate with Transformer
models"; supervised attention) is KL(G_t ‖ a_t) per target step: their cross-entropy
-Σ_s G log a minus the gold's entropy, a constant (the same gradient, and 0 exactly when the
attention equals the gold). G = batch['guide'] [B, T, S] (Task.guide: for target token t of
word j, 1/k on the k source tokens of the words linked to j by the gold, zero rows where there
is nothing to learn from); a is read.weights for the RNN decoders, for a Transformer the
cross-attention of decoder layer `guided_alignment_layer` (-1: the last), head
`guided_alignment_head` (-1: the mean over heads). a is clipped below at GUIDE_EPS in the log.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from attention_jax import fields
from attention_jax.evaluation import metrics as metrics_lib


@dataclasses.dataclass(frozen=True)
class Objective(fields.Fields):
  """The loss's coefficients (from the `train` config section); hashable, for jit."""
  SECTION = 'train'
  label_smoothing: float = fields.rate(0.0, 'ε of the smoothed targets (Szegedy et al. 2016)')
  coverage_weight: float = fields.number(0.0, 'λ_cov of the coverage loss (See et al. 2017 '
                                         'use 1.0)')
  reinforce_weight: float = fields.field(1.0, 'λ_r of hard attention\'s REINFORCE term (Xu et al. '
      '2015)')
  entropy_weight: float = fields.field(0.0, 'λ_e of hard attention\'s entropy bonus (Xu et al. '
      '2015)')
  baseline_decay: float = fields.field(0.9, 'hard attention: decay of the moving-average reward '
      'baseline')
  doubly_stochastic_weight: float = fields.number(0.0, 'λ_ds (Xu et al. 2015 eq. 14; they use '
                                                  '1.0)')
  hard_expected_p: float = fields.field(0.0, 'hard attention: share of examples on the soft '
      'context (Xu: 0.5)')
  hard_soft_steps: int = fields.field(0, 'hard attention: steps with every example soft first (0: '
      'none)')
  reinforce_samples: int = fields.field(1, 'hard attention: K samples per example, leave-one-out '
      'baseline')
  reward: str = fields.field('sentence', 'hard attention: REWARDS, the reward of each step\'s '
      'sample')
  guided_alignment_weight: float = fields.field(0.0, 'λ_ga of guided alignment (Garg et al. 2019; '
      '0: off)')
  guided_alignment_share: float = fields.field(1.0, 'the share of training pairs whose gold guides')
  guided_alignment_layer: int = fields.field(-1, 'Transformer: the decoder layer guided (-1: the '
      'last)')
  guided_alignment_head: int = fields.field(-1, 'Transformer: the head guided (-1: the mean of '
      'heads)')

  def __post_init__(self):
    super().__post_init__()
    if not (isinstance(self.hard_expected_p, (int, float)) and 0.0 <= self.hard_expected_p <= 1.0):
      raise ValueError(f'train.hard_expected_p must be in [0, 1] (the share of examples that '
                       f'read the soft context; 0: all sample), got {self.hard_expected_p!r}')
    w = self.hard_soft_steps
    if not isinstance(w, int) or isinstance(w, bool) or w < 0:
      raise ValueError(f'train.hard_soft_steps must be an integer >= 0 (steps with every example '
                       f'on the soft context before train.hard_expected_p; 0: none), got {w!r}')
    k = self.reinforce_samples
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
      raise ValueError(f'train.reinforce_samples must be a positive integer (samples per '
                       f'example; 1: one, with the moving-average baseline), got {k!r}')
    if self.reward not in REWARDS:
      raise ValueError(f'unknown train.reward {self.reward!r}; valid: {", ".join(REWARDS)}')
    w = self.guided_alignment_weight
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w < float('inf'):
      raise ValueError(f'train.guided_alignment_weight must be a finite number >= 0 (λ of the '
                       f'guided alignment term; 0: off), got {w!r}')
    p = self.guided_alignment_share
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
      raise ValueError(f'train.guided_alignment_share must be in [0, 1] (the share of training '
                       f'pairs whose gold alignment guides attention), got {p!r}')
    for name in ('guided_alignment_layer', 'guided_alignment_head'):
      v = getattr(self, name)
      if not isinstance(v, int) or isinstance(v, bool) or v < -1:
        raise ValueError(f'train.{name} must be an integer >= -1 (-1: the '
                         f'{"last layer" if name.endswith("layer") else "mean over heads"}), '
                         f'got {v!r}')

  def check_model(self, mcfg) -> None:
    """One ValueError line for guided alignment fields the model (a ModelConfig) cannot
    honour: a weight for score 'none' (no attention), a layer or head for a model without
    decoder layers of heads (the RNN decoders), or one out of the Transformer's range."""
    layer, head = self.guided_alignment_layer, self.guided_alignment_head
    if mcfg.arch != 'transformer':
      if self.guided_alignment_weight and mcfg.score == 'none':
        raise ValueError(f'train.guided_alignment_weight={self.guided_alignment_weight!r} '
                         "guides the attention weights; model.score='none' has no attention "
                         '(choose another score, or leave the weight at 0)')
      if (layer, head) != (-1, -1):
        raise ValueError(f'train.guided_alignment_layer={layer} / guided_alignment_head={head}: '
                         f'only a Transformer has decoder layers of heads; the '
                         f'{mcfg.decoder} decoder has one attention (leave both at -1)')
      return
    if not -1 <= layer < mcfg.transformer_layers:
      raise ValueError(f'train.guided_alignment_layer must be in [-1, '
                       f'{mcfg.transformer_layers - 1}] (model.transformer_layers='
                       f'{mcfg.transformer_layers}; -1: the last), got {layer}')
    if not -1 <= head < mcfg.heads:
      raise ValueError(f'train.guided_alignment_head must be in [-1, {mcfg.heads - 1}] '
                       f'(model.heads={mcfg.heads}; -1: the mean over heads), got {head}')

  @property
  def variance_reduction(self) -> list[str]:
    """The fields set away from their defaults that only a sampling mode reads."""
    d = Objective()
    return [f'train.{f}={getattr(self, f)!r}' for f in ('hard_expected_p', 'hard_soft_steps',
                                                      'reinforce_samples', 'reward')
            if getattr(self, f) != getattr(d, f)]

  def expected_share(self, step: jax.Array) -> jax.Array:
    """The share of examples on the soft context at `step`: 1 before step hard_soft_steps,
    then hard_expected_p."""
    p = jnp.float32(self.hard_expected_p)
    return jnp.where(step < self.hard_soft_steps, jnp.float32(1.0), p)

  @classmethod
  def of(cls, t) -> 'Objective':
    """From a `train` config section; a field it lacks (an older run's) takes its default."""
    return cls(**{f.name: t.get(f.name, f.default) for f in dataclasses.fields(cls)})


fields.own('the loss', Objective)


def token_losses(logits: jax.Array, tgt_out: jax.Array, label_smoothing: float = 0.0):
  """logits [B, T, V] float32, tgt_out [B, T] -> (training loss [B, T], plain CE [B, T])."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)
  if label_smoothing == 0.0:
    return ce, ce
  v = logits.shape[-1]
  soft = optax.smooth_labels(jax.nn.one_hot(tgt_out, v), label_smoothing)
  return optax.softmax_cross_entropy(logits, soft), ce


def reinforce_surrogate(logp: jax.Array, reward: jax.Array, baseline: jax.Array) -> jax.Array:
  """The score-function surrogate sg(reward - baseline) · logp, whose gradient is an
  unbiased estimate of ∇ E[reward] when logp is the log-probability of the sample."""
  return jax.lax.stop_gradient(reward - baseline) * logp


def to_go(x: jax.Array) -> jax.Array:
  """x [B, T] -> [B, T]: Σ_{t' >= t} x_{t'}."""
  return jnp.flip(jnp.cumsum(jnp.flip(x, 1), 1), 1)


# the reward of each step's sample: the masked token log-likelihoods ll [B, T] -> [B, T]
REWARDS: dict[str, Callable[[jax.Array], jax.Array]] = {
    'sentence': lambda ll: jnp.broadcast_to(jnp.sum(ll, 1, keepdims=True), ll.shape),
    'to_go': to_go,
}


def leave_one_out(reward: jax.Array, k: int) -> jax.Array:
  """reward [K*B, ...] (K copies of a batch, copy-major) -> each row's baseline: the mean
  reward of the same example's other K - 1 samples (Kool et al. 2019)."""
  r = reward.reshape((k, -1) + reward.shape[1:])
  return ((jnp.sum(r, 0, keepdims=True) - r) / (k - 1)).reshape(reward.shape)


def doubly_stochastic(weights: jax.Array, tgt_mask: jax.Array, src_mask: jax.Array) -> jax.Array:
  """weights [B, T, S], tgt_mask [B, T], src_mask [B, S] (float) -> [B]:
  Σ_s src_mask (1 - Σ_t tgt_mask · a_{t,s})² per sentence."""
  received = jnp.sum(weights * tgt_mask[:, :, None], axis=1)                  # [B, S]
  return jnp.sum(src_mask * jnp.square(1.0 - received), axis=1)


GUIDE_EPS = 1e-9   # the attention weight is clipped below at this in guided alignment's log


def guided_alignment(weights: jax.Array, guide: jax.Array) -> jax.Array:
  """weights, guide [B, T, S] -> [B, T]: KL(guide_t ‖ weights_t) = Σ_s G (log G - log a),
  a clipped below at GUIDE_EPS; 0 on an all-zero guide row."""
  dtype = jnp.promote_types(weights.dtype, jnp.float32)   # bfloat16 -> float32; float64 kept
  g = guide.astype(dtype)
  a = jnp.maximum(weights.astype(dtype), GUIDE_EPS)
  terms = jnp.where(g > 0, g * (jnp.log(jnp.where(g > 0, g, 1.0)) - jnp.log(a)), 0.0)
  return jnp.sum(terms, axis=-1)


def guided_weights(obj: Objective, read: Any, layers: jax.Array | None) -> jax.Array:
  """The attention guided alignment trains [B, T, S]: read.weights for a model with one
  attention (layers None), else decoder layer guided_alignment_layer's cross-attention
  (layers [B, N, H, T, S]), head guided_alignment_head or the mean over heads."""
  layer, head = obj.guided_alignment_layer, obj.guided_alignment_head
  if layers is None:
    if (layer, head) != (-1, -1):
      raise ValueError(f'train.guided_alignment_layer={layer} / guided_alignment_head={head}: '
                       'this model has one attention, no layers of heads (leave both at -1)')
    return read.weights
  per_head = layers[:, layer]                                              # [B, H, T, S]
  return jnp.mean(per_head, axis=1) if head == -1 else per_head[:, head]


def loss(obj: Objective, logits: jax.Array, read: Any, batch: dict, baseline: jax.Array | None,
         psum: Callable = lambda x: x, src_mask: jax.Array | None = None,
         layers: jax.Array | None = None) -> tuple[jax.Array, dict, jax.Array | None]:
  """logits [B, T, V], read (attention.Read, fields [B, T, ...]), src_mask [B, S] bool (the
  memory's real positions; needed by the doubly stochastic term), layers [B, N, H, T, S] (a
  Transformer's cross-attention per layer and head, model.layer_weights; read by guided
  alignment, which also needs batch['guide'] [B, T, S]) ->
  (loss, metric sums, the new baseline (None when no mode samples))."""
  s = metrics_lib.sums(logits, batch['tgt_out'], batch['weight'])   # what evaluation counts
  n = jnp.maximum(psum(s['tokens']), 1.0)
  mask = ((batch['tgt_out'] != 0) & (batch['weight'][:, None] > 0)).astype(jnp.float32)
  train_loss, ce = token_losses(logits, batch['tgt_out'], obj.label_smoothing)   # [B, T]
  total = jnp.sum(train_loss * mask)
  s = {'train_loss_sum': total, **s}
  if obj.coverage_weight:
    cov = jnp.sum(read.coverage_loss * mask)
    total = total + obj.coverage_weight * cov
    s = {**s, 'coverage_loss_sum': cov}
  if obj.doubly_stochastic_weight:
    real = (batch['weight'] > 0).astype(jnp.float32)
    ds = jnp.sum(real * doubly_stochastic(read.weights.astype(jnp.float32), mask,
                                          src_mask.astype(jnp.float32)))
    total = total + obj.doubly_stochastic_weight * ds
    s = {**s, 'doubly_stochastic_sum': ds}
  if obj.guided_alignment_weight:
    if 'guide' not in batch:
      raise ValueError('train.guided_alignment_weight > 0 needs batches with a guide: '
                       'task.train_iterator(..., guide_share=train.guided_alignment_share)')
    ga = jnp.sum(guided_alignment(guided_weights(obj, read, layers), batch['guide']))
    total = total + obj.guided_alignment_weight * ga
    s = {**s, 'guided_alignment_sum': ga}
  new_baseline = None
  if baseline is not None:
    ll = -ce * mask                                                        # [B, T]
    sentence = jnp.sum(ll, axis=1)                                         # [B] log p(y | s, x)
    reward = REWARDS[obj.reward](ll)                                       # [B, T]
    real = (batch['weight'] > 0).astype(jnp.float32)
    per_token = obj.reward != 'sentence'   # the moving average is of the per-token reward
    if obj.reinforce_samples > 1:
      b = leave_one_out(reward, obj.reinforce_samples)                     # [B, T]
    elif per_token:
      b = baseline * to_go(mask)                                           # b_tok x tokens left
    else:
      b = baseline
    surrogate = reinforce_surrogate(read.logp * mask, reward, b)
    total = total - obj.reinforce_weight * jnp.sum(surrogate)
    total = total - obj.entropy_weight * jnp.sum(read.entropy * mask)
    count = psum(jnp.sum(mask)) if per_token else psum(jnp.sum(real))
    mean_reward = psum(jnp.sum(sentence * real)) / jnp.maximum(count, 1.0)
    new_baseline = obj.baseline_decay * baseline + (1.0 - obj.baseline_decay) * \
        jax.lax.stop_gradient(mean_reward)
    s = {**s, 'reward_sum': jnp.sum(sentence * real)}
  return total / n, s, new_baseline
