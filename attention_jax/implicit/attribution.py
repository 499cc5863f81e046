"""Implicit attention: how strongly each output token depends on each source position, read
from the gradients of the teacher-forced model (or from its forward passes with a position
erased), beside the explicit attention weights.

  fn = make_attributor(graphdef, 'integrated_gradients', Options(steps=32))
  a = fn(params, src, tgt_in, tgt_out)   # src [B, S] ids or images [B, H, W(, C)]; tgt [B, T]
  a.scores     # [B, T, S] tokens; [B, T, H, W] pixel methods on images; [B, T, S'] gradcam
               # and erasure on images (S' the encoder's grid cells)
  a.weights    # [B, T, S'] the explicit attention of the same pass (S' = the memory)
  a.log_probs  # [B, T] f_t = log p(y_t | y_<t, x), teacher-forced

f_t is differentiated with respect to the *embedded* source x [S, E] (each position its own
vector, so the positions of a repeated symbol get separate scores) or, for image sources, the
pixels [H, W, C]: jax.jacrev per example (one VJP per output position, vmapped), vmapped over
the batch. Padding stays padding: its embeddings and pixels are held fixed.

Methods (METHODS; a new one is a class and one `@register_method` line):
  gradient               ‖∂f_t/∂x_s‖₂ (Simonyan et al. 2014; Li et al. 2016 for NLP)
  gradient_x_input       Σ_e x_se ∂f_t/∂x_se (Shrikumar et al. 2016; Ding et al. 2019)
  integrated_gradients   Σ_e (x - b)_se ∫₀¹ ∂f_t/∂x_se(b + α(x - b)) dα (Sundararajan et al.
                         2017), the integral by `rule` over `steps` nodes: 'midpoint' (the
                         paper's Riemann sum), 'gauss_legendre' (exact for polynomials of
                         degree 2m - 1 in α) or 'adaptive' (midpoints of m cells placed where
                         f changes along the path, from 16m + 1 forward passes) or
                         'refine' (adaptive Simpson: bisects the cells whose completeness
                         error is largest until it is at most `tol`, within `steps` nodes);
                         Σ_s ≈ f_t(x) - f_t(b) (completeness)
  smoothgrad             ‖mean over `samples` of ∂f_t/∂x(x + ε)‖₂, ε ~ N(0, (noise·(max x -
                         min x))²) on real positions (Smilkov et al. 2017)
  gradcam                ReLU(Σ_k α_tk A_sk), α_tk the mean over real cells of ∂f_t/∂A_sk, A [S',
                         K] the image encoder's annotation grid (Selvaraju et al. 2017)
  erasure                f_t(x) - f_t(x with position s erased): no gradient, 1 + S forward
                         passes (vmapped); the erased value is `erase` (ERASE): tokens 'zero'
                         (the zero embedding), 'pad' / 'unk' (the PAD / UNK token's
                         embedding); images: a grid cell's real pixels set to 'zero' (black)
                         or 'mean' (the image's mean pixel: grey, as Zeiler & Fergus 2014
                         occluded). Li et al. 2016 (representation erasure); DeYoung et al.
                         2020 score faithfulness the same way
Signed methods (gradient_x_input, integrated_gradients, erasure) are ranked by |score|
(`ranking`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.implicit.quadrature import REFINE_SPLIT, RULES, check_refine_nodes, quadrature, refine
from attention_jax.models import sources

METHODS: dict[str, type['Method']] = {}
register_method = registry.registrar(METHODS, 'attribution method')
BASELINES = tuple(dict.fromkeys(b for k in sources.SOURCES.values() for b in k.baselines))
# erasure's value of an erased position, per source: the zero embedding or the PAD / UNK
# token's; a grid cell's pixels black or the image's mean pixel (grey)
ERASE = {name: kind.erasures for name, kind in sources.SOURCES.items()}
ERASURES = tuple(dict.fromkeys(v for values in ERASE.values() for v in values))
ERASE_BATCH = 64   # erased copies run at once (vmapped) per example; more run in turn
AT_ONCE = 8        # Jacobians (quadrature nodes, noise samples) computed at once per example


@dataclasses.dataclass(frozen=True)
class Options:
  """steps: integrated gradients' interpolation steps (quadrature nodes) m ('refine': the most
  it may use); rule: its quadrature (RULES); tol: the refine rule's completeness error, a
  share of the largest output change; baseline: its b, 'zero' (the zero vector / a black
  image) or 'pad' (the PAD token's embedding; tokens only); samples / noise: SmoothGrad's n
  and σ as a share of the input's range; seed: SmoothGrad's noise; erase: erasure's value of
  an erased position (ERASE: 'zero' tokens and images, 'pad' / 'unk' tokens, 'mean' images)."""
  steps: int = 32
  baseline: str = 'zero'
  samples: int = 16
  noise: float = 0.15
  seed: int = 0
  rule: str = 'midpoint'
  erase: str = 'zero'
  tol: float = 0.01

  def __post_init__(self):
    for name in ('steps', 'samples'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'{name} must be a positive integer, got {value!r}')
    if self.baseline not in BASELINES:
      raise ValueError(f'unknown baseline {self.baseline!r}; valid: {", ".join(BASELINES)}')
    if self.rule not in RULES:
      raise ValueError(f'unknown integration rule {self.rule!r}; valid: {", ".join(RULES)}')
    if not self.noise >= 0:
      raise ValueError(f'noise must be >= 0, got {self.noise!r}')
    if not 0 < self.tol < float('inf'):
      raise ValueError(f'tol must be a number > 0, got {self.tol!r}')
    if self.rule == 'refine':
      check_refine_nodes(self.steps)
    if self.erase not in ERASURES:
      raise ValueError(f'unknown erase {self.erase!r}; valid: ' + '; '.join(
          f'{", ".join(v)} ({source})' for source, v in ERASE.items()))


def check_options(opts: Options, source: str) -> Options:
  """opts, or ValueError where a value does not apply to `source` ('tokens' or 'images')."""
  kind = sources.lookup(source)
  if opts.baseline not in kind.baselines:
    raise ValueError(f'baseline {opts.baseline!r} does not apply to {source}; valid for '
                     f'{source}: {", ".join(kind.baselines)}')
  if opts.erase not in ERASE[source]:
    raise ValueError(f'erase {opts.erase!r} is not for {source} sources; valid for '
                     f'{source}: {", ".join(ERASE[source])}')
  return opts


class Probe(NamedTuple):
  """One example, made differentiable. f(x [*P, C]) -> (log p of each output token [T],
  explicit weights [T, S']); x0 the input itself; real [*P] its real positions; baseline [*P, C];
  memory(shift [S', K]) -> the same as f with the annotations shifted; annotations [S', K]
  and memory_mask [S'] (gradcam); erased [*P, C] the input with every position erased and
  units [S', *P] bool the real entries of x that each source position covers (erasure; tokens:
  S' = S, position s is row s; images: grid cell s is its pixels); outputs [T] bool the real
  output positions (not padding)."""
  f: Callable
  x0: jax.Array
  real: jax.Array
  baseline: jax.Array
  memory: Callable
  annotations: jax.Array
  memory_mask: jax.Array
  erased: jax.Array
  units: jax.Array
  outputs: jax.Array


class Attribution(NamedTuple):
  scores: jax.Array      # [B, T, *positions]
  log_probs: jax.Array   # [B, T]
  weights: jax.Array     # [B, T, S']


def lookup(name: str) -> type['Method']:
  return registry.lookup(METHODS, 'attribution method', name)


def names(source: str) -> list[str]:
  """The methods that apply to a model reading `source` ('tokens' or 'images')."""
  return sorted(n for n, cls in METHODS.items() if source in cls.sources)


def check(method: str, source: str) -> type['Method']:
  """The method class, or ValueError naming why it cannot apply and what can."""
  cls = lookup(method)
  if source not in cls.sources:
    raise ValueError(f'attribution method {method!r} needs {" or ".join(cls.sources)} '
                     f'sources ({cls.needs}); this model reads {source}: valid methods for it: '
                     f'{", ".join(names(source))}')
  return cls


def _norm(g: jax.Array) -> jax.Array:
  """[T, *P, C] -> [T, *P]: the L2 norm over the last axis."""
  return jnp.sqrt(jnp.sum(jnp.square(g), axis=-1))


def _jacobian(p: Probe, x: jax.Array) -> jax.Array:
  """∂f_t/∂x for every output position t: [T, *x.shape]."""
  return jax.jacrev(lambda v: p.f(v)[0])(x)


class Method:
  """An attribution method: probe -> scores [T, *positions] (see the module docstring)."""
  name: str
  sources: tuple[str, ...] = ('tokens', 'images')
  needs = 'the embedded source or the pixels'
  over = 'input'      # scores per input position ([S] tokens, [H, W] pixels), or 'memory' [S']
  signed = False

  def __call__(self, p: Probe, opts: Options) -> jax.Array:
    raise NotImplementedError

  @classmethod
  def held(cls, opts: Options) -> int:
    """How many Jacobians [T, *P, C] (each T backward passes) one example holds at once."""
    return 1

  @classmethod
  def bytes_per_row(cls, opts: Options, t: int, positions: int, channels: int) -> int:
    """The float32 bytes one example of T outputs over positions x channels inputs holds at
    its peak: its held Jacobians and one more (the input's gradient or product)."""
    return 4 * t * positions * channels * (cls.held(opts) + 1)


@register_method('gradient')
class Gradient(Method):
  def __call__(self, p, opts):
    return _norm(_jacobian(p, p.x0))


@register_method('gradient_x_input')
class GradientXInput(Method):
  signed = True

  def __call__(self, p, opts):
    return jnp.sum(_jacobian(p, p.x0) * p.x0[None], axis=-1)


@register_method('integrated_gradients')
class IntegratedGradients(Method):
  signed = True

  def __call__(self, p, opts):
    diff = p.x0 - p.baseline
    if opts.rule == 'refine':
      return refine(lambda a: _path_terms(p, diff, a), opts.steps, opts.tol,
                    p.outputs).integral
    alphas, weights = quadrature(opts.rule, opts.steps,                        # [m], [m]
                                 f=lambda a: p.f(p.baseline + a * diff)[0])
    grads = jax.lax.map(lambda a: _jacobian(p, p.baseline + a * diff), alphas,
                        batch_size=self.held(opts))                             # [m, T, *P, C]
    mean = jnp.tensordot(weights, grads, axes=1)                                # [T, *P, C]
    return jnp.sum(mean * diff[None], axis=-1)

  @classmethod
  def held(cls, opts):
    return min(opts.steps, AT_ONCE)

  @classmethod
  def bytes_per_row(cls, opts, t, positions, channels):
    if opts.rule == 'refine':   # a round's 2S Jacobians and every node's terms [m, T, *P]
      return 4 * t * positions * (channels * (2 * REFINE_SPLIT + 1) + opts.steps)
    return super().bytes_per_row(opts, t, positions, channels)


def _path_terms(p: Probe, diff: jax.Array, alphas: jax.Array) -> tuple[jax.Array, jax.Array]:
  """alphas [k] -> f_t at b + α diff [k, T] and the terms Σ_e diff_se ∂f_t/∂x_se there
  [k, T, *P] (their sum over positions is df_t/dα): one forward and T VJPs per α, vmapped."""
  def one(a):
    f, pullback = jax.vjp(lambda v: p.f(v)[0], p.baseline + a * diff)
    j = jax.vmap(pullback)(jnp.eye(f.shape[0], dtype=f.dtype))[0]             # [T, *P, C]
    return f, jnp.sum(j * diff[None], axis=-1)
  return jax.vmap(one)(alphas)


@register_method('smoothgrad')
class SmoothGrad(Method):
  def __call__(self, p, opts):
    real = p.real[..., None]
    lo = jnp.min(jnp.where(real, p.x0, jnp.inf))
    hi = jnp.max(jnp.where(real, p.x0, -jnp.inf))
    sigma = opts.noise * (hi - lo)
    keys = jax.random.split(jax.random.key(opts.seed), opts.samples)
    noisy = lambda k: p.x0 + jnp.where(real, sigma * _noise(k, p.x0.shape), 0)
    grads = jax.lax.map(lambda k: _jacobian(p, noisy(k)), keys,
                        batch_size=self.held(opts))                             # [n, T, *P, C]
    return _norm(jnp.mean(grads, axis=0))

  @classmethod
  def held(cls, opts):
    return min(opts.samples, AT_ONCE)


def _noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """N(0, 1) of `shape` [*P, C] whose vector at each position depends on the key and the
  position only: more padding (a larger P) leaves every real position's noise as it was."""
  *positions, c = shape
  coords = jnp.indices(positions).reshape(len(positions), -1).T                  # [N, |P|]

  def at(xs):
    k = key
    for x in xs:
      k = jax.random.fold_in(k, x)
    return jax.random.normal(k, (c,))
  return jax.vmap(at)(coords).reshape(shape)


@register_method('gradcam')
class GradCAM(Method):
  sources = ('images',)
  needs = "an image encoder's annotation grid"
  over = 'memory'

  def __call__(self, p, opts):
    j = jax.jacrev(lambda s: p.memory(s)[0])(jnp.zeros_like(p.annotations))   # [T, S', K]
    m = p.memory_mask.astype(j.dtype)
    alpha = jnp.einsum('tsk,s->tk', j, m) / jnp.maximum(jnp.sum(m), 1)        # [T, K]
    cam = jax.nn.relu(jnp.einsum('tk,sk->ts', alpha, p.annotations))          # [T, S']
    return cam * m[None]


@register_method('erasure')
class Erasure(Method):
  """f_t(x) - f_t(x with position s erased) [T, S'] (positive: s supported y_t), from 1 + S'
  forward passes and no gradient; positions with nothing real to erase (padding) get 0."""
  needs = 'forward passes with a source position erased'
  over = 'memory'     # tokens: the source positions [S]; images: the encoder's grid cells [S']
  signed = True

  def __call__(self, p, opts):
    erased = jnp.where(p.units[..., None], p.erased[None], p.x0[None])          # [S', *P, C]
    copies = jnp.concatenate([p.x0[None], erased])                              # [1 + S', *P, C]
    n = copies.shape[0]                                                         # 1 + S'
    lp = jax.lax.map(lambda x: p.f(x)[0], copies,
                     batch_size=min(n, ERASE_BATCH))                            # [1 + S', T]
    real = jnp.any(p.units.reshape(n - 1, -1), axis=-1)                         # [S']
    return jnp.where(real[None], (lp[:1] - lp[1:]).T, 0.0)                      # [T, S']

  @classmethod
  def bytes_per_row(cls, opts, t, positions, channels):   # 1 + P copies of [P + T, C]
    return 4 * (positions + 1) * (positions + t) * channels


def _token_log_probs(logits: jax.Array, tgt_out: jax.Array) -> jax.Array:
  """logits [1, T, V], tgt_out [1, T] -> [T]: log p of each given output token."""
  lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(lp, tgt_out[..., None], axis=-1)[0, :, 0]


def probe(model, src: jax.Array, tgt_in: jax.Array, tgt_out: jax.Array,
          opts: Options = Options()) -> Probe:
  """One example (src [S] ids or an image [H, W(, C)]; tgt_in, tgt_out [T]) -> its Probe."""
  check_options(opts, model.cfg.source)
  src1, tin, tout = src[None], tgt_in[None], tgt_out[None]

  def out(logits, read):
    return _token_log_probs(logits, tout), read.weights[0].astype(jnp.float32)

  x = sources.of(model.cfg).probe_inputs(model, src, tin, opts.baseline, opts.erase)
  f = lambda v: out(*x.forward(v))
  annotations, mask = model.encode(src1)
  memory = lambda shift: out(*model.forward(src1, tin, memory_shift=shift[None]))
  return Probe(f, x.x0, x.real, x.baseline, memory, annotations[0].astype(jnp.float32), mask[0],
               x.erased, x.units, tgt_out != 0)


def attribute(model, src, tgt_in, tgt_out, method: str, opts: Options = Options()) -> Attribution:
  """A batch: src [B, S] (or images [B, H, W(, C)]), tgt_in / tgt_out [B, T] -> Attribution.
  Differentiable and jit-able; make_attributor compiles it."""
  fn = check(method, model.cfg.source)()

  def one(s, ti, to):
    p = probe(model, s, ti, to, opts)
    lp, w = p.f(p.x0)
    return fn(p, opts), lp, w
  return Attribution(*jax.vmap(one)(src, tgt_in, tgt_out))


def make_attributor(graphdef, method: str, opts: Options = Options()) -> Callable:
  """-> jit-compiled fn(params, src, tgt_in, tgt_out) -> Attribution (one compile per shape)."""
  lookup(method)
  return jax.jit(lambda params, src, tgt_in, tgt_out: attribute(
      nnx.merge(graphdef, params), src, tgt_in, tgt_out, method, opts))


MEMORY_BUDGET = 256 * 2 ** 20   # bytes of Jacobians [T, *P, C] held at once per chunk


def rows_per_chunk(method: str, opts: Options, t: int, positions: int, channels: int) -> int:
  """How many sentences of T outputs over `positions` x `channels` inputs one call attributes
  within MEMORY_BUDGET (each method says what one sentence holds: Method.bytes_per_row)."""
  return max(1, MEMORY_BUDGET // lookup(method).bytes_per_row(opts, t, positions, channels))


def held(method: str, opts: Options) -> int:
  """How many Jacobians (each T backward passes) one example of `method` holds at once
  (Method.held). A batch of B examples of a method holding k runs as chunks of B // k rows:
  the memory of one gradient batch."""
  return lookup(method).held(opts)


def ranking(method: str, scores):
  """The magnitudes that rank positions: |scores| for signed methods, else the scores."""
  return abs(scores) if lookup(method).signed else scores
