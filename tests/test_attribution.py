"""Implicit attention (attribution.py): gradients against finite differences, integrated
gradients' completeness, an output that reads one position is attributed there only, padding
gets nothing and changes nothing (every score, mode, decoder, encoder and method from the
registries), Grad-CAM and erasure against NumPy, bad input in one line; the alignment figures
against SciPy and the `attribute` command on a reverse run."""

import json
import os
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats
from scipy.spatial import distance

import attention_jax as aj
from attention_jax import symbols
from attention_jax import workdir as workdir_lib
from attention_jax.data import strips
from attention_jax.implicit import alignment, attribution, quadrature
from attention_jax.models import encoders
from attention_jax.models import model as model_lib
from attention_jax.models.model import ModelConfig, build
from attention_jax.training import train
from experiments.configs import dates, digit_strips, reverse

import helpers
from helpers import smoke

METHODS = sorted(attribution.METHODS)
TOKEN_METHODS = attribution.names('tokens')
SRC = np.array([[5, 6, 7, 5, 2, 0, 0, 0], [4, 9, 2, 0, 0, 0, 0, 0]], np.int32)
TGT_OUT = np.array([[5, 7, 6, 5, 2], [9, 4, 2, 0, 0]], np.int32)
TGT_IN = np.array([[1, 5, 7, 6, 5], [1, 9, 4, 2, 0]], np.int32)
RNN = dict(src_vocab=11, tgt_vocab=11, emb_dim=8, enc_hidden=6, dec_hidden=12, attn_dim=5,
           max_src_len=16)
TRANSFORMER = dict(src_vocab=11, tgt_vocab=11, arch='transformer', d_model=16, heads=2,
                   ff_dim=24, transformer_layers=1)
# small sizes of every image encoder and the RNN decoder (each model keeps those it reads)
IMAGE = dict(src_vocab=1, tgt_vocab=11, image_dim=12, cnn_layers=2, cnn_width=4, patch_size=4,
             d_model=16, heads=2, ff_dim=24, transformer_layers=1, emb_dim=8, dec_hidden=12,
             attn_dim=8)


def model_of(**kw):
  cfg = ModelConfig(**kw)
  return build(cfg, rngs=nnx.Rngs(0))


def images(*sizes, width=16):
  """Random images of `sizes` (h, w), padded with -1 to [B, 8, width]; pixels in [0.1, 1], so
  that the finite differences' steps stay clear of 0 (below it a pixel reads as padding)."""
  rng = np.random.RandomState(0)
  out = np.full((len(sizes), 8, width), -1.0, np.float32)
  for i, (h, w) in enumerate(sizes):
    out[i, :h, :w] = rng.uniform(0.1, 1.0, (h, w))
  return out


def attribute(model, src, tgt_in, tgt_out, method='gradient', **opts):
  g, params = nnx.split(model, nnx.Param)
  return jax.device_get(attribution.make_attributor(g, method, attribution.Options(**opts))(
      params, src, tgt_in, tgt_out))


def probe_fns(model, src, tgt_in, tgt_out):
  """jit-compiled (f(x) -> log-probs [T], jacobian(x) -> [T, *x.shape]) of one example, and x0."""
  g, params = nnx.split(model, nnx.Param)

  def probe(params):
    return attribution.probe(nnx.merge(g, params), jnp.asarray(src), jnp.asarray(tgt_in),
                             jnp.asarray(tgt_out))
  f = jax.jit(lambda params, x: probe(params).f(x)[0])
  jac = jax.jit(lambda params, x: attribution._jacobian(probe(params), x))  # pylint: disable=protected-access
  return (lambda x: np.asarray(f(params, x), np.float64),
          lambda x: np.asarray(jac(params, x)), np.asarray(probe(params).x0))


CASES = {'rnn': (RNN, SRC[0]), 'transformer': (TRANSFORMER, SRC[0]),
         **{enc: (model_lib.migrate({**IMAGE, 'encoder': enc}), images((8, 12))[0]) for enc in
            encoders.names('images')}}


@pytest.mark.parametrize('case', sorted(CASES))
def test_gradients_equal_central_finite_differences(case):
  kw, src = CASES[case]
  f, jac, x0 = probe_fns(model_of(**kw), src, TGT_IN[0], TGT_OUT[0])
  j = jac(x0)                                                       # [T, *x.shape]
  rng = np.random.RandomState(1)
  real = (src != 0) if src.dtype == np.int32 else (src >= 0)
  # a small step for images: their ReLUs and max-pools have kinks a large one would cross
  eps = 1e-2 if src.dtype == np.int32 else 1e-3
  for _ in range(3):   # directional derivatives along random directions over real positions
    d = rng.randn(*x0.shape).astype(np.float32) * real[..., None]
    d /= np.linalg.norm(d)
    fd = (f(x0 + eps * d) - f(x0 - eps * d)) / (2 * eps)          # [T]
    analytic = np.tensordot(j, d, axes=d.ndim)
    np.testing.assert_allclose(analytic, fd, rtol=2e-2, atol=2e-2 * np.abs(fd).max())
  assert np.abs(j).max() > 0


@pytest.mark.parametrize('case, rule, steps', [
    *((case, 'midpoint', 64) for case in ('rnn', 'transformer', 'cnn')),
    ('rnn', 'gauss_legendre', 8), ('cnn', 'gauss_legendre', 8),
    ('transformer', 'gauss_legendre', 64), ('rnn', 'adaptive', 16), ('rnn', 'refine', 65),
    ('transformer', 'refine', 65)])
def test_integrated_gradients_add_up_to_the_change_of_the_output(case, rule, steps):
  """Sundararajan et al. 2017's completeness: Σ_s IG_ts = f_t(x) - f_t(baseline), to 1% of
  the largest change. Gauss-Legendre reaches it with 8 nodes where the path is smooth (the
  RNN's tanh and sigmoid; this CNN); the Transformer's ReLU feed-forward puts kinks on the
  path, where no fixed rule converges fast (at 8 nodes: midpoint 2.9%, Gauss-Legendre 1.7%)
  and the refine rule bisects the cells around them until its tolerance (1%) holds."""
  kw, src = CASES[case]
  model = model_of(**kw)
  a = attribute(model, src[None], TGT_IN[:1], TGT_OUT[:1], 'integrated_gradients', steps=steps,
                rule=rule)
  f, _, x0 = probe_fns(model, src, TGT_IN[0], TGT_OUT[0])
  change = f(x0) - f(np.zeros_like(x0) if src.dtype == np.int32
                     else np.where(x0 >= 0, 0.0, x0))   # black image, padding as it was
  total = a.scores[0].reshape(len(change), -1).sum(-1)
  assert np.abs(change).max() > 1e-3
  np.testing.assert_allclose(total, change, atol=0.01 * np.abs(change).max())


@pytest.mark.extended   # 8 s: after the suite, in CI; the suite's: each rule's completeness
def test_both_integration_rules_agree_at_many_nodes_and_gauss_legendre_is_exact_to_degree_2m_1():
  kw, src = CASES['rnn']
  model = model_of(**kw)
  tight = {'refine': dict(steps=257, tol=1e-4)}   # refine: its nodes by its tolerance
  ig = {rule: attribute(model, src[None], TGT_IN[:1], TGT_OUT[:1], 'integrated_gradients',
                        **{'steps': 64, **tight.get(rule, {})}, rule=rule).scores[0]
        for rule in quadrature.RULES}
  scale = np.abs(ig['midpoint']).max()
  assert scale > 1e-3
  for rule in quadrature.RULES:
    np.testing.assert_allclose(ig[rule], ig['midpoint'], atol=1e-3 * scale, err_msg=rule)
  for m in (1, 3, 8):                 # ∫₀¹ α^k dα = 1 / (k + 1), against NumPy
    alphas, weights = (np.asarray(x, np.float64) for x in quadrature.quadrature(
        'gauss_legendre', m))
    assert np.all((alphas > 0) & (alphas < 1)) and abs(weights.sum() - 1) < 1e-6
    for k in range(2 * m):
      assert abs((weights * alphas ** k).sum() - 1 / (k + 1)) < 1e-5, (m, k)
    mid = [np.asarray(x, np.float64) for x in quadrature.quadrature('midpoint', m)]
    if m > 1:                          # the midpoint rule is not: α^3 with m nodes
      assert abs((mid[1] * mid[0] ** 3).sum() - 1 / 4) > 1e-4
  with pytest.raises(ValueError, match="unknown integration rule 'simpson'; valid: midpoint, "
                                       'gauss_legendre, adaptive, refine'):
    attribution.Options(rule='simpson')
  with pytest.raises(ValueError, match="'refine' starts from 9 nodes: steps must be >= 9, got 8"):
    attribution.Options(rule='refine', steps=8)
  with pytest.raises(ValueError, match='tol must be a number > 0, got 0'):
    attribution.Options(rule='refine', tol=0)


def test_adaptive_cells_follow_the_change_of_f_and_integrate_a_steep_path_better():
  """The adaptive rule's cells shrink where f moves: on f(α) = tanh(100 (α - 0.6)) (a
  confident model's swing within a small part of the path) half of its 16 midpoints lie in
  the 6% of the path around the swing, and they integrate f'(α) to within 10% of ∫₀¹ f' =
  f(1) - f(0), where 16 equal cells miss by more than 5 times as much (NumPy, float64); a
  linear f gives the equal cells of the midpoint rule."""
  f = lambda a: jnp.tanh(100.0 * (a - 0.6))[None]                       # [T = 1]
  fprime = lambda a: 100.0 / np.cosh(100.0 * (np.asarray(a, np.float64) - 0.6)) ** 2
  want = float(f(1.0)[0] - f(0.0)[0])
  alphas, weights = (np.asarray(x, np.float64) for x in quadrature.adaptive_quadrature(f, 16))
  assert abs(weights.sum() - 1) < 1e-6 and np.all(np.diff(alphas) > 0)
  assert np.all(weights > 0) and np.all((alphas > 0) & (alphas < 1))
  assert (np.abs(alphas - 0.6) < 0.03).sum() >= 8
  adaptive = abs((weights * fprime(alphas)).sum() - want)
  mid_a, mid_w = (np.asarray(x, np.float64) for x in quadrature.quadrature('midpoint', 16))
  midpoint = abs((mid_w * fprime(mid_a)).sum() - want)
  assert adaptive < 0.1 * abs(want) and midpoint > 5 * adaptive, (adaptive, midpoint)
  lin_a, lin_w = quadrature.adaptive_quadrature(lambda a: jnp.stack([3 * a, -a]), 8)
  np.testing.assert_allclose(lin_a, (np.arange(8) + 0.5) / 8, atol=1e-5)
  np.testing.assert_allclose(lin_w, np.full(8, 1 / 8), atol=1e-6)
  # quadrature(rule, m, f) serves it like the other rules; without f it says what it needs
  np.testing.assert_allclose(quadrature.quadrature('adaptive', 16, f)[0], alphas, atol=1e-6)
  with pytest.raises(ValueError, match="'adaptive' places its nodes.*pass f"):
    quadrature.quadrature('adaptive', 16)


def _scalar_path(f):
  """f(α) -> [T] as the refine rule's node function: (f [k, T], df/dα [k, T, 1])."""
  df = jax.jacfwd(f)
  return lambda alphas: (jax.vmap(f)(alphas), jax.vmap(df)(alphas)[..., None])


def test_refine_bisects_where_completeness_fails_until_its_tolerance_holds():
  """The refine rule (adaptive Simpson) on f(α) = (tanh(100 (α - 0.6)), sin(3α)), against
  the exact ∫₀¹ f' = f(1) - f(0) (NumPy, float64): within its tolerance; the bound it
  returns is at most tol and at least the true error; a tighter tolerance takes more nodes and lands closer. A cubic f is exact from its
  first 9 nodes (Simpson's degree); too few nodes for the tolerance: it stops at the
  budget and its bound says so (> tol). An output marked as padding sets neither the scale
  nor the nodes."""
  f = lambda a: jnp.stack([jnp.tanh(100.0 * (a - 0.6)), jnp.sin(3.0 * a)])       # [T = 2]
  want = np.array([np.tanh(40.0) + np.tanh(60.0), np.sin(3.0)])
  used, errors = [], []
  for tol in (1e-2, 1e-4):
    total, bound, n, _ = (np.asarray(x, np.float64) for x in quadrature.refine(
        _scalar_path(f), 257, tol))
    error = np.abs(total[:, 0] - want).max() / np.abs(want).max()
    assert error <= bound + 1e-6 and bound <= tol, (tol, error, bound)
    assert 9 < n <= 257 and (n - 9) % (2 * quadrature.REFINE_SPLIT) == 0
    used.append(n)
    errors.append(error)
  assert used[1] > used[0] and errors[1] < errors[0]
  # an output marked as padding neither sets the scale nor asks for nodes: the swing's left out
  calm = quadrature.refine(_scalar_path(f), 257, 1e-2, jnp.array([False, True]))
  assert int(calm.nodes) < used[0] and float(calm.bound) <= 1e-2
  assert abs(float(calm.integral[1, 0]) - np.sin(3.0)) <= 1e-2 * abs(np.sin(3.0))
  cubic = lambda a: jnp.stack([a ** 3 - a, 2 * a ** 2])
  total, bound, n, _ = quadrature.refine(_scalar_path(cubic), 257, 1e-5)
  assert int(n) == 9 and float(bound) < 1e-5
  np.testing.assert_allclose(np.asarray(total)[:, 0], [0.0, 2.0], atol=1e-5)
  total, bound, n, _ = quadrature.refine(_scalar_path(f), 17, 1e-4)  # one round, then no nodes
  assert int(n) == 17 and float(bound) > 1e-4
  with pytest.raises(ValueError, match="'refine' starts from 9 nodes"):
    quadrature.refine(_scalar_path(f), 7, 1e-2)


def test_refine_puts_its_nodes_where_the_path_swings_and_splits_it_by_position():
  """Two positions move along a path whose output swings at α = 0.6, f = tanh(100 (α - 0.6)),
  position 1 carrying 3/4 of each step's change (c_s = w_s f'): the refine rule's attribution
  is w_s (f(1) - f(0)) for each position (NumPy), and more than half of its nodes lie in the
  10% of the path around the swing.
  """
  w = np.array([0.75, 0.25])
  f = lambda a: jnp.tanh(100.0 * (a - 0.6))[None]                               # [T = 1]

  def node(alphas):
    d = jax.vmap(jax.jacfwd(f))(alphas)                                          # [k, 1]
    return jax.vmap(f)(alphas), d[..., None] * jnp.asarray(w, jnp.float32)[None, None]  # [k, 1, 2]
  r = quadrature.refine(node, 129, 1e-3)
  n = int(r.nodes)
  np.testing.assert_allclose(np.asarray(r.integral, np.float64)[0],
                             w * (np.tanh(40.0) + np.tanh(60.0)), rtol=1e-3)
  assert float(r.bound) <= 1e-3 and n < 129
  alphas = np.asarray(r.alphas)[:n]
  assert len(set(alphas.tolist())) == n and (np.abs(alphas - 0.6) < 0.05).sum() > n / 2


class ToyRead(NamedTuple):
  weights: jax.Array


class OnePosition(nnx.Module):
  """A toy model with the interface attribution reads: every output's logits are a linear map
  of the embedded source token at position `k` only."""

  def __init__(self, k: int):
    self.cfg = ModelConfig(src_vocab=11, tgt_vocab=11)
    self.k = k
    self.embed = nnx.Embed(11, 4, rngs=nnx.Rngs(0))
    self.out = nnx.Linear(4, 11, rngs=nnx.Rngs(1))

  def source_embeddings(self, src):
    return self.embed(src)

  def encode(self, src):
    return self.embed(src), src != 0

  def forward(self, src, tgt_in, *, source_shift=None, memory_shift=None):
    del memory_shift
    x = self.embed(src) + (0 if source_shift is None else source_shift)       # [B, S, E]
    logits = jnp.broadcast_to(jnp.sin(self.out(x[:, self.k]))[:, None],
                              (*tgt_in.shape, 11))
    weights = jnp.zeros((*tgt_in.shape, src.shape[1])).at[:, :, self.k].set(1.0)
    return logits, ToyRead(weights)


@pytest.mark.parametrize('method', TOKEN_METHODS)
def test_an_output_that_reads_one_position_is_attributed_there_only(method):
  model = OnePosition(k=2)
  a = jax.device_get(attribution.attribute(model, jnp.asarray(SRC), jnp.asarray(TGT_IN),
                                           jnp.asarray(TGT_OUT), method))
  assert a.scores.shape == (2, 5, 8)
  others = np.delete(a.scores, 2, axis=-1)
  assert (others == 0).all(), method
  assert (np.abs(a.scores[..., 2]) > 0).all(), method


# every score (the decoders alternating), every mode, the sparsemax normaliser, coverage, the
# Transformer: with the plain gradient (the methods are checked on one model below)
VARIANTS = ([dict(score=s, decoder=sorted(aj.DECODERS)[i % len(aj.DECODERS)])
             for i, s in enumerate(sorted(aj.SCORES))]
            + [dict(attention_mode=m) for m in sorted(aj.MODES) if m != 'global']
            + [dict(normaliser='sparsemax'), dict(coverage=True), dict(arch='transformer')])


def variant_id(kw):
  return '-'.join(f'{v}' for v in kw.values())


def check_padding(model, src, tgt_in, tgt_out, method='gradient', more_padding=True, **opts):
  """Padded positions get exactly 0 (the outputs do not depend on a padded position's
  embedding); with more_padding, 8 more padding positions change no other score."""
  a = attribute(model, src, tgt_in, tgt_out, method, **opts)
  pad = src == 0
  for r in range(len(src)):
    assert (a.scores[r][:, pad[r]] == 0).all()
  assert np.abs(a.scores).max() > 0
  if more_padding:
    b = attribute(model, np.pad(src, ((0, 0), (0, 8))), tgt_in, tgt_out, method, **opts)
    for r in range(len(src)):
      assert (b.scores[r][:, 8:] == 0).all()
    np.testing.assert_allclose(b.scores[:, :, :8], a.scores, rtol=1e-4,
                               atol=1e-5 * np.abs(a.scores).max())
  return a


@pytest.mark.parametrize('kw', VARIANTS, ids=[variant_id(kw) for kw in VARIANTS])
def test_padding_gets_nothing_and_changes_nothing(kw):
  """Every variant: padding gets exactly 0. More padding changing nothing is checked here on
  the first score and the Transformer (one more compilation each); for every score, mode and
  normaliser the model's outputs are (tests/test_model.py, test_modes.py), and so then are
  their gradients with respect to the real positions."""
  base = TRANSFORMER if kw.get('arch') == 'transformer' else RNN
  more = kw == VARIANTS[0] or kw.get('arch') == 'transformer'
  if kw.get('attention_mode', '').startswith('local'):
    kw = {**kw, 'score': 'general'}
  check_padding(model_of(**{**base, **kw}), SRC, TGT_IN, TGT_OUT, more_padding=more)


@pytest.mark.parametrize('method', TOKEN_METHODS)
def test_every_method_leaves_padding_out(method):
  a = check_padding(model_of(**RNN), SRC, TGT_IN, TGT_OUT, method, steps=8, samples=4)
  assert np.isfinite(a.scores).all() and a.log_probs.shape == (2, 5)


# every method on the CNN; the pixel gradient and Grad-CAM on the other image encoders
IMAGE_CASES = ([('cnn', m) for m in attribution.names('images')]
               + [(e, m) for e in encoders.names('images') if e != 'cnn'
                  for m in ('gradient', 'gradcam')])


@pytest.mark.parametrize('encoder,method', IMAGE_CASES)
def test_image_padding_gets_nothing_and_changes_nothing(encoder, method):
  model = model_of(**model_lib.migrate({**IMAGE, 'encoder': encoder}))
  opts = dict(steps=8, samples=4)
  src = images((8, 12), (4, 8))
  a = attribute(model, src, TGT_IN, TGT_OUT, method, **opts)
  wide = np.pad(src, ((0, 0), (0, 0), (0, 8)), constant_values=-1.0)
  b = attribute(model, wide, TGT_IN, TGT_OUT, method, **opts)
  if attribution.lookup(method).over == 'memory':     # grid cells [T, S'] (4-pixel cells)
    grid, wide_grid = a.scores.reshape(2, 5, 2, 4), b.scores.reshape(2, 5, 2, 6)
    assert (grid[1][:, 1:] == 0).all() and (grid[1][:, :, 2:] == 0).all()
    assert (wide_grid[:, :, :, 4:] == 0).all()
    np.testing.assert_allclose(wide_grid[:, :, :, :4], grid, rtol=1e-4, atol=1e-6)
  else:                                               # pixels [T, H, W]
    assert a.scores.shape == (2, 5, 8, 16)
    assert (a.scores[0][:, :, 12:] == 0).all() and (a.scores[1][:, 4:] == 0).all()
    assert (a.scores[1][:, :, 8:] == 0).all() and (b.scores[:, :, :, 16:] == 0).all()
    np.testing.assert_allclose(b.scores[..., :16], a.scores, rtol=1e-4,
                               atol=1e-5 * np.abs(a.scores).max())
  assert np.abs(a.scores).max() > 0


def test_gradcam_against_numpy_from_finite_differences():
  model = model_of(**model_lib.migrate({**IMAGE, 'encoder': 'cnn'}))
  src = images((8, 12))
  a = attribute(model, src, TGT_IN[:1], TGT_OUT[:1], 'gradcam')
  g, params = nnx.split(model, nnx.Param)

  def parts(params, shift):
    p = attribution.probe(nnx.merge(g, params), jnp.asarray(src[0]), jnp.asarray(TGT_IN[0]),
                          jnp.asarray(TGT_OUT[0]))
    return p.memory(shift)[0], p.annotations, p.memory_mask
  parts = jax.jit(parts)
  _, ann, mask = (np.asarray(x, np.float64) for x in parts(params, jnp.zeros((8, 12))))
  s, k = ann.shape
  jac = np.zeros((5, s, k))
  eps = 1e-2
  for i in range(s):
    for j in range(k):
      e = np.zeros((s, k), np.float32)
      e[i, j] = eps
      jac[:, i, j] = (np.asarray(parts(params, e)[0], np.float64)
                      - np.asarray(parts(params, -e)[0], np.float64)) / (2 * eps)
  alpha = (jac * mask[None, :, None]).sum(1) / mask.sum()          # [T, K]
  cam = np.maximum(alpha @ ann.T, 0) * mask                        # [T, S']
  np.testing.assert_allclose(a.scores[0], cam, rtol=2e-2, atol=2e-3 * cam.max())
  assert cam.max() > 0 and (a.scores >= 0).all()


def erased_by_hand(model, src, tgt_in, tgt_out, erase):
  """Erasure's reference, one position at a time in NumPy: per example and real source
  position (token) or grid cell (image), the position erased (tokens: 'unk' the id replaced
  by UNK; 'zero' / 'pad' the embedding replaced by 0 / PAD's; images: the cell's real pixels
  set to 0 / the image's mean pixel), the model run and log p(y_t) subtracted -> [B, T, S']."""
  g, params = nnx.split(model, nnx.Param)

  @jax.jit
  def log_p(params, src, tgt_in, tgt_out, shift):
    m = nnx.merge(g, params)
    logits, _ = m.forward(src[None], tgt_in[None],
                          source_shift=None if shift is None else shift[None])
    return jnp.take_along_axis(jax.nn.log_softmax(logits[0]), tgt_out[:, None], -1)[:, 0]
  lp = lambda s, b, shift=None: np.asarray(log_p(params, s, tgt_in[b], tgt_out[b], shift),
                                            np.float64)
  if model.cfg.source == 'tokens':
    x0 = np.asarray(model.source_embeddings(jnp.asarray(src)))                   # [B, S, E]
    pad = np.asarray(model.source_embeddings(jnp.zeros((1, 1), jnp.int32)))[0, 0]
    out = np.zeros((*tgt_out.shape, src.shape[1]))
    for b in range(len(src)):
      base = lp(src[b], b, np.zeros_like(x0[b]))
      for s in np.nonzero(src[b])[0]:
        ids, shift = src[b].copy(), np.zeros_like(x0[b])
        if erase == 'unk':
          ids[s] = symbols.UNK
        else:
          shift[s] = (0 if erase == 'zero' else pad) - x0[b, s]
        out[b, :, s] = base - lp(ids, b, shift)
    return out
  gh, gw = encoders.grid_shape(model.cfg, src.shape[1:3])
  ch, cw = src.shape[1] // gh, src.shape[2] // gw
  out = np.zeros((*tgt_out.shape, gh * gw))
  for b in range(len(src)):
    base = lp(src[b], b)
    value = 0.0 if erase == 'zero' else src[b][src[b] >= 0].mean()
    for i in range(gh):
      for j in range(gw):
        img = src[b].copy()
        cell = img[i * ch:(i + 1) * ch, j * cw:(j + 1) * cw]
        if (cell >= 0).any():
          cell[cell >= 0] = value
          out[b, :, i * gw + j] = base - lp(img, b)
  return out


@pytest.mark.parametrize('case, erase', [('rnn', 'zero'), ('rnn', 'pad'), ('rnn', 'unk'),
                                         ('transformer', 'unk'), ('cnn', 'mean'),
                                         ('vit', 'zero')])
def test_erasure_equals_erasing_each_position_by_hand(case, erase):
  """Li et al. 2016's erasure, log p(y_t | x) - log p(y_t | x with s erased), against one
  forward pass per erased position; padding (tokens, and image cells without a real pixel)
  gets exactly 0."""
  kw, _ = CASES[case]
  model = model_of(**kw)
  src = SRC if case in ('rnn', 'transformer') else images((8, 12), (4, 8))
  a = attribute(model, src, TGT_IN, TGT_OUT, 'erasure', erase=erase)
  want = erased_by_hand(model, src, TGT_IN, TGT_OUT, erase)
  assert a.scores.shape == want.shape and np.abs(want).max() > 1e-3
  np.testing.assert_allclose(a.scores, want, rtol=1e-4, atol=1e-5)
  assert (a.scores[want == 0] == 0).all()


def test_bad_methods_and_options_are_one_line_naming_the_valid_ones():
  with pytest.raises(ValueError, match=r"unknown attribution method 'saliency'; valid "
                                       r'attribution methods: ' + ', '.join(METHODS)):
    attribution.check('saliency', 'tokens')
  with pytest.raises(ValueError, match=r"'gradcam' needs images sources .* this model reads "
                                       'tokens: valid methods for it: '
                                       + ', '.join(TOKEN_METHODS)):
    attribution.check('gradcam', 'tokens')
  with pytest.raises(ValueError, match=r"unknown baseline 'mean'; valid: zero, pad"):
    attribution.Options(baseline='mean')
  with pytest.raises(ValueError, match=r'steps must be a positive integer, got 0'):
    attribution.Options(steps=0)
  with pytest.raises(ValueError, match=r"unknown erase 'grey'; valid: zero, pad, unk "
                                       r'\(tokens\); zero, mean \(images\)'):
    attribution.Options(erase='grey')
  with pytest.raises(ValueError, match=r"erase 'mean' is not for tokens sources; valid for "
                                       r'tokens: zero, pad, unk'):
    attribution.check_options(attribution.Options(erase='mean'), 'tokens')
  with pytest.raises(ValueError, match=r"erase 'unk' is not for images sources; valid for "
                                       r'images: zero, mean'):
    attribution.check_options(attribution.Options(erase='unk'), 'images')
  model = model_of(**model_lib.migrate({**IMAGE, 'encoder': 'cnn'}))
  with pytest.raises(ValueError, match=r"baseline 'pad' does not apply to images; valid for images: zero"):
    attribute(model, images((8, 12)), TGT_IN[:1], TGT_OUT[:1], 'integrated_gradients',
              baseline='pad')


def test_a_method_registered_at_test_time_is_found_by_name():
  @attribution.register_method('negated_gradient')
  class Negated(attribution.Method):   # pylint: disable=unused-variable
    def __call__(self, p, opts):
      return -attribution.METHODS['gradient']()(p, opts)

  try:
    model = model_of(**RNN)
    a, b = (attribute(model, SRC, TGT_IN, TGT_OUT, m) for m in ('gradient', 'negated_gradient'))
    np.testing.assert_array_equal(a.scores, -b.scores)
    assert 'negated_gradient' in attribution.names('tokens')
  finally:
    del attribution.METHODS['negated_gradient']


def test_alignment_figures_against_scipy():
  magnitude = np.array([[0.1, 0.7, 0.2, 0.0], [0.5, 0.3, 0.2, 0.0], [1.0, 0.0, 0.0, 0.0]])
  explicit = np.array([[0.2, 0.6, 0.2, 0.0], [0.1, 0.1, 0.8, 0.0], [0.3, 0.3, 0.4, 0.0]])
  gold = np.array([1, 2, -1])
  f = alignment.figures(magnitude, gold, explicit, src_len=3)
  assert (f['steps'], f['hits']) == (2, 1.0)
  assert f['gold_mass'] == pytest.approx(0.7 + 0.2)
  tau = [stats.kendalltau(magnitude[t, :3], explicit[t, :3]).statistic for t in (0, 1)]
  assert f['tau'] == pytest.approx(sum(tau)) and f['tau_steps'] == 2
  jsd = [distance.jensenshannon(magnitude[t, :3], explicit[t, :3], base=2) ** 2 for t in (0, 1)]
  assert f['jsd'] == pytest.approx(sum(jsd))
  s = alignment.summarise([f, alignment.figures(magnitude, np.array([0, 0, 0]), None, 3)])
  assert s['alignment_accuracy'] == pytest.approx(100 * 3 / 5)   # 1 + 2 of 2 + 3 steps
  assert s['kendall_tau'] == pytest.approx(sum(tau) / 2)
  # score none attends nowhere: its explicit rows are left out, and compared with nothing
  none = alignment.figures(np.zeros((3, 4)), gold, None, 3, attended_only=True)
  assert none['steps'] == 0
  f = alignment.figures(magnitude, gold, np.zeros((3, 4)), 3)
  assert (f['steps'], f['tau_steps'], f['jsd']) == (2, 0, 0.0)


def test_deletion_replaces_the_ranked_positions_by_the_zero_embedding():
  model = model_of(**RNN)
  g, params = nnx.split(model, nnx.Param)
  order = np.array([[[3, 0]] * 5, [[1, 2]] * 5], np.int32)                    # [B, T, k=2]
  lp = np.asarray(alignment.make_deletion(g, 2)(params, SRC, TGT_IN, TGT_OUT, order))
  x0 = np.asarray(model.source_embeddings(jnp.asarray(SRC)))
  for b in range(2):
    for k in range(3):
      shift = np.zeros_like(x0[b:b + 1])
      shift[0, order[b, 0, :k]] = -x0[b, order[b, 0, :k]]
      logits, _ = model.forward(jnp.asarray(SRC[b:b + 1]), jnp.asarray(TGT_IN[b:b + 1]),
                                source_shift=jnp.asarray(shift))
      want = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits))[0], TGT_OUT[b][:, None],
                                -1)[:, 0]
      np.testing.assert_allclose(lp[b, k], want, rtol=1e-5, atol=1e-5)
  assert np.abs(lp[:, 1] - lp[:, 0]).max() > 0


@pytest.mark.extended   # a training and three commands (half a minute): after the suite, in CI
def test_attribute_command_measures_against_gold_and_draws_lines(tmp_path):
  """`attribute` on a (smoke) reverse run: the explicit weights' alignment accuracy is the one
  training's evaluation reported; per method the figures and a faithfulness against random;
  --input lines drawn and written; a method the run cannot use is one line, exit 2."""
  workdir = str(tmp_path / 'run')
  # test sentences of 1-15 symbols (13-15: beyond the training lengths): with EOS one padded length,
  # so each attribution program compiles once
  cfg = smoke(reverse, str(tmp_path / 'tfds'), **{'data.test_max_len': 15})
  cfg.eval.attribution = 'gradient,gradient_x_input'   # the figures in results.json as well
  summary = train.train_and_evaluate(cfg, workdir)
  at_end = summary['results']['test']['attribution']
  assert [b['band'] for b in at_end['bands']] == ['all', 'within', 'beyond']
  within, beyond = at_end['bands'][1:]
  assert (within['hi'], beyond['lo']) == (cfg.data.max_len, cfg.data.max_len)
  assert within['sentences'] + beyond['sentences'] == at_end['sentences'] == 32
  assert within['random']['steps'] + beyond['random']['steps'] == at_end['random']['steps'] > 0
  assert beyond['sentences'] > 0

  def command(*flags):   # forked from a server that imported the package (helpers.py)
    return helpers.run_module('experiments.attribute', f'--workdir={workdir}', *flags,
                              timeout=600)
  proc = command('--num=32', '--methods=gradient,gradient_x_input,erasure')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert not re.search(r'^[IW]\d{4} ', proc.stderr, re.M), proc.stderr   # no Orbax/absl logs
  with open(os.path.join(workdir, 'attributions', 'alignment_test.json')) as f:
    report = json.load(f)
  assert report['sentences'] == 32 and set(report['methods']) == {
      'attention', 'gradient', 'gradient_x_input', 'erasure'}
  assert report['methods']['attention']['alignment_accuracy'] == pytest.approx(
      summary['results']['test']['alignment_accuracy'])
  for name in ('gradient', 'gradient_x_input', 'erasure'):
    fig = report['methods'][name]
    assert 0 <= fig['alignment_accuracy'] <= 100 and -1 <= fig['kendall_tau'] <= 1
    assert 0 <= fig['jsd'] <= 1 and np.isfinite(fig['aopc'])
  assert '| gradient |' in proc.stdout and '| erasure |' in proc.stdout
  assert np.isfinite(report['aopc_random'])
  evaluated = aj.evaluate_run(workdir, attribution='gradient', beam=1, num_heatmaps=0,
                              verbose=False)['attribution']
  for name, fig in report['methods'].items():   # the command and evaluate measure as training
    if name not in at_end['methods']:             # (erasure: measured by the command only)
      continue
    for key in ('alignment_accuracy', 'gold_mass', 'aopc'):
      assert fig[key] == pytest.approx(at_end['methods'][name][key], rel=1e-4, abs=1e-4)
      if name in evaluated['methods']:
        assert evaluated['methods'][name][key] == pytest.approx(fig[key], rel=1e-4, abs=1e-4)
  assert 'gradient_x_input' not in evaluated['methods']
  lines = tmp_path / 'lines.txt'
  lines.write_text('abc\n\ncba\n')
  proc = command(f'--input={lines}', '--methods=gradient,erasure', '--erase=unk', '--figures=1',
                 f'--out_dir={tmp_path / "out"}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  with open(tmp_path / 'out' / 'attributions.jsonl') as f:
    records = [json.loads(x) for x in f]
  assert [r['source'] for r in records] == ['abc', '', 'cba']
  for name in ('gradient', 'erasure'):
    assert np.asarray(records[0][name]).shape == (len(records[0]['tgt_tokens']), 4)
  assert sorted(os.listdir(tmp_path / 'out')) == ['attributions.jsonl', 'line_1.png']
  proc = command('--methods=gradcam')
  assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(
      "error: attribution method 'gradcam' needs images sources")


@pytest.mark.extended   # every layer's and head's map of 16 sentences (6 s): in CI
def test_attribute_split_reports_a_transformers_layers_and_heads_and_chance(tmp_path):
  """A Transformer's report holds every layer's and head's map, its last layer's mean is the
  explicit map, and the random ranking's accuracy is near chance (1 / source length)."""
  cfg = smoke(reverse, str(tmp_path / 'tfds'))
  cfg.model.update(arch='transformer', d_model=16, heads=2, ff_dim=16, transformer_layers=2)
  task = aj.data.load_task(cfg.data, seed=0)
  model = build(train.model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size),
                rngs=nnx.Rngs(0))
  g, params = nnx.split(model, nnx.Param)
  report = alignment.attribute_split(g, params, task, 'test', ['gradient'], num=16,
                                     train_max_len=cfg.data.max_len)
  maps = report['methods']
  assert {'attention_L1', 'attention_L2', 'attention_L1H1', 'attention_L2H2'} <= set(maps)
  for key in ('alignment_accuracy', 'gold_mass', 'aopc'):
    assert maps['attention_L2'][key] == pytest.approx(maps['attention'][key])
  assert maps['attention_L1']['alignment_accuracy'] != maps['attention_L2']['alignment_accuracy'] \
      or maps['attention_L1']['gold_mass'] != maps['attention_L2']['gold_mass']
  lengths = [len(s) + 1 for s, _ in task.texts('test')[:16]]
  chance = 100 * np.mean([1 / n for n in lengths])
  assert abs(report['random']['alignment_accuracy'] - chance) < 15


def test_eval_attribution_is_checked_before_training(tmp_path):
  """An unknown method, or a task without gold alignments, fails in one line before a step."""
  cfg = smoke(reverse, str(tmp_path / 'tfds'))
  cfg.eval.attribution = 'gradient,saliency'
  with pytest.raises(ValueError, match="unknown attribution method 'saliency'.*gradient"):
    train.check_config(cfg)
  cfg = smoke(dates, str(tmp_path / 'tfds'))
  cfg.eval.attribution = 'all'
  workdir = tmp_path / 'dates'
  with pytest.raises(ValueError, match="task 'dates' does not have"):
    train.train_and_evaluate(cfg, str(workdir))
  assert not any(p.name.isdigit() for p in workdir.rglob('*'))   # no checkpoint step saved


def test_pointing_game_against_hand_counts():
  """The argmax (a grid cell's centre, or a pixel) within the tolerance of the box is a hit;
  the mass in the box is the map's share there (a grid cell's mass spread over its pixels)."""
  boxes = np.array([[0, 8, 8, 16], [0, 0, 4, 4], [-1, -1, -1, -1]])           # [T, 4]
  grid = np.zeros((3, 2, 4))                                                  # cells of 4 x 4 px
  grid[0, 0, 2] = 1.0        # centre (2, 10): inside box 0
  grid[1, 1, 3] = 3.0        # centre (6, 14): outside box 1 ...
  grid[1, 0, 0] = 1.0        # ... which holds a quarter of the mass
  f = alignment.pointing(grid, boxes, (8, 16), tolerance=0.0)
  assert (f['steps'], f['hits']) == (2, 1.0)
  assert f['gold_mass'] == pytest.approx(1.0 + 0.25)
  assert alignment.pointing(grid, boxes, (8, 16), tolerance=10.0)['hits'] == 2.0
  pixels = np.zeros((3, 8, 16))
  pixels[0, 3, 9] = pixels[1, 7, 15] = 1.0
  f = alignment.pointing(pixels, boxes, (8, 16), tolerance=0.0)
  assert (f['hits'], f['gold_mass']) == (1.0, 1.0)
  assert alignment.pointing(np.zeros((3, 2, 4)), boxes, (8, 16), 0.0, attended_only=True)[
      'steps'] == 0


@pytest.mark.extended   # digit_strips prepared, three methods over 12 images (12 s): in CI
def test_attribute_images_plays_the_pointing_game_on_digit_strips(tmp_path):
  """digit_strips' recorded boxes: the pixel gradient, Grad-CAM and erasure (both over the
  grid) and the explicit weights are scored on every output digit; a random ranking lands
  near the boxes' share of the image."""
  cfg = digit_strips.get_config('smoke')
  cfg.data.update(num_train=16, num_valid=4, num_test=12, data_dir=str(tmp_path / 'tfds'))
  task = aj.data.load_task(cfg.data, seed=0)
  mcfg = train.model_config(cfg, task.src_tok.vocab_size, task.tgt_tok.vocab_size)
  g, params = nnx.split(build(mcfg, rngs=nnx.Rngs(0)), nnx.Param)
  grid = encoders.grid_shape(mcfg, task.image_shape)
  report = alignment.attribute_images(g, params, task, 'test', ['gradient', 'gradcam', 'erasure'],
                                      grid, num=12, batch_size=8)
  digits = sum(len(tgt) for _, tgt in task.texts('test'))
  assert report['sentences'] == 12 and report['steps'] == digits
  assert set(report['methods']) == {'attention', 'gradient', 'gradcam', 'erasure'}
  for fig in report['methods'].values():
    assert fig['steps'] == digits and 0 <= fig['alignment_accuracy'] <= 100
  share = np.mean([(b[2] - b[0]) * (b[3] - b[1]) / np.prod(task.image_shape)
                   for x in task.features('test')['boxes']
                   for b in strips.parse_boxes(x)])
  assert abs(report['random']['gold_mass'] - 100 * share) < 5
  assert '| gradcam |' in alignment.format_report(report, 'test')
  reverse_task = aj.data.load_task(smoke(reverse, str(tmp_path / 'tfds')).data, seed=0)
  with pytest.raises(ValueError, match="task 'reverse' has no gold boxes"):
    alignment.attribute_images(g, params, reverse_task, 'test', ['gradient'], grid)


def test_attribute_refuses_bad_input_in_one_line_before_loading_and_leaves_nothing(tmp_path):
  """Each careless `attribute` is one `error:` line, exit 2, with nothing on stdout and no
  folder made. The run here has its saved configs and no checkpoint at all, so each refusal
  is shown to come before the model is loaded (loading would fail on the missing checkpoint)."""
  run = tmp_path / 'run'
  run.mkdir()
  cfg = dates.get_config('smoke')
  (run / workdir_lib.CONFIG).write_text(cfg.to_json())
  mcfg = train.model_config(cfg, 20, 20)
  (run / workdir_lib.MODEL_CONFIG).write_text(json.dumps(mcfg.to_dict()))
  one, two, empty = tmp_path / 'one.txt', tmp_path / 'two.txt', tmp_path / 'empty.txt'
  one.write_text('hello\n')
  two.write_text('a\nb\n')
  empty.write_text('')
  out = tmp_path / 'out'
  cases = {   # flags -> the start of the error line
      ('--methods=nope', f'--input={one}'): "error: unknown attribution method 'nope'; valid",
      ('--methods=gradcam', f'--input={one}'): "error: attribution method 'gradcam' needs images",
      ('--erase=mean', f'--input={one}'): "error: erase 'mean' is not for tokens sources; valid",
      (): "error: task 'dates' has no gold alignments: without --input",
      (f'--input={empty}',): f'error: {empty} has no lines: nothing to attribute',
      (f'--input={tmp_path}',): f'error: {tmp_path}: cannot read it as UTF-8 text',
      (f'--input={tmp_path / "missing.txt"}',): f'error: {tmp_path / "missing.txt"}: cannot read',
      (f'--input={one}', f'--reference={two}'): 'error: --reference has 2 lines, --input 1',
      (f'--reference={two}',): 'error: --reference gives the outputs of the --input lines',
  }
  procs = helpers.run_modules('experiments.attribute', [
      [f'--workdir={run}', f'--out_dir={out}', *flags] for flags in cases])
  procs.append(helpers.run_module('experiments.attribute', f'--workdir={run}',
                                  f'--out_dir={one}', f'--input={one}'))
  cases[('out_dir=file',)] = f'error: {one}: is a file, not a folder for --out_dir'
  for (flags, start), proc in zip(cases.items(), procs):
    assert proc.returncode == 2, (flags, proc.stderr[-1000:])
    assert proc.stdout == '' and len(proc.stderr.strip().splitlines()) == 1, (flags, proc.stderr)
    assert proc.stderr.startswith(start), (flags, proc.stderr)
  assert not out.exists() and sorted(p.name for p in run.iterdir()) == sorted(
      [workdir_lib.CONFIG, workdir_lib.MODEL_CONFIG])   # no attributions/ folder either


def test_magnitudes_chunk_rows_by_backward_passes_and_skip_filler_chunks():
  """alignment.magnitudes with the attributors' options: rows go in power-of-two chunks of at
  most PASSES backward passes (rows x T x Jacobians held); a chunk of filler rows is never
  computed; the magnitudes equal one call over the whole batch."""
  b, s, t = 16, 5, 8
  calls = []

  def fn(params, src, tin, tout):   # a stand-in attributor: scores from the ids themselves
    calls.append(len(src))
    scores = src[:, None, :].astype(np.float32) * tin[:, :, None] - 3.0       # [n, T, S]
    return attribution.Attribution(scores, np.zeros((len(src), t)), np.ones((len(src), t, s)))
  rng = np.random.default_rng(0)
  src, tin = rng.integers(1, 9, (b, s)), rng.integers(1, 9, (b, t))
  real = np.arange(b) < 5                                    # 5 examples, 11 filler rows
  ig = attribution.Options(steps=8)                          # 8 Jacobians held per row
  whole, _ = alignment.magnitudes({'integrated_gradients': fn}, None, src, tin, tin,
                                  {'integrated_gradients': 0.0})
  assert calls == [b]
  calls.clear()
  got, _ = alignment.magnitudes({'integrated_gradients': fn}, None, src, tin, tin,
                                {'integrated_gradients': 0.0}, ig, real)
  k = alignment._power_of_two(alignment.PASSES // (t * 8))   # pylint: disable=protected-access
  assert k < b and k * t * 8 <= alignment.PASSES
  assert calls == [k] * -(-5 // k)                           # only chunks holding a real row
  np.testing.assert_array_equal(got['integrated_gradients'][:5], whole['integrated_gradients'][:5])
  assert not got['integrated_gradients'][-1].any()           # a filler chunk: zeros
