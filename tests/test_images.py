"""Image sources (images.py, encoders.py): the encoders' grids, masks and padding invariance,
every image encoder with every decoder, Xu et al. 2015's context gate and doubly stochastic
regulariser against NumPy, and the clear errors of combinations that are not defined."""

import dataclasses
import functools
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import PIL.Image
import pytest
from flax import nnx

from attention_jax import data
from attention_jax.analysis import saved_run
from attention_jax.data import image_builders, strips
from attention_jax.decoding import beam, greedy
from attention_jax.evaluation import evaluators, plots
from attention_jax.loaded import loading
from attention_jax.models import encoders, images, transformer
from attention_jax.models import model as model_lib
from attention_jax.models.attention import Attention
from attention_jax.models.model import ModelConfig, build
from attention_jax.state import templates
from attention_jax.training import objective, train
from attention_jax.training import update
from experiments import data_info
from experiments.configs import common, digit_strips, image_dates
from helpers import covering, run_module, smoke

IMAGE_ENCODERS = encoders.names('images')
# every image encoder, the CNN with its row encoder (model.cnn_row_rnn), its per-pixel
# LayerNorm (model.cnn_norm), its columns (model.cnn_columns) and narrower cells
# (model.cnn_cell_width), and the ViT with a convolutional stem (model.vit_stem) and learned
# positions (model.vit_positions)
VARIANTS = [(name, {}) for name in IMAGE_ENCODERS] + [
    ('cnn', {'cnn_row_rnn': True}), ('cnn', {'cnn_norm': True}),
    ('cnn', {'cnn_columns': True, 'cnn_norm': True}),
    ('cnn', {'cnn_columns': True, 'cnn_row_rnn': True, 'cnn_cell_width': 2,
             'cnn_positions': 'rnn_input'}),
    ('vit', {'vit_stem': 1, 'vit_positions': 'learned_2d'}), ('vit', {'vit_stem': 2})]
VARIANT_IDS = [n + ''.join(f'-{k}' for k in kw) for n, kw in VARIANTS]
# small sizes of every encoder and decoder: each config keeps those its model reads (small)
SMALL = dict(src_vocab=1, tgt_vocab=11, image_dim=12, cnn_layers=2, cnn_width=4, patch_size=4,
             d_model=16, heads=2, ff_dim=24, transformer_layers=1, emb_dim=8, dec_hidden=12,
             attn_dim=8)


def small(arch='rnn', encoder='') -> dict:
  """SMALL's fields that the model of (arch, encoder) reads."""
  return model_lib.migrate({**SMALL, 'arch': arch, 'encoder': encoder})


def config(encoder, decoder='bahdanau', **kw):
  arch = 'transformer' if decoder == 'transformer' else 'rnn'
  return ModelConfig(**{**small(arch, encoder),
                        **({} if arch == 'transformer' else {'decoder': decoder}), **kw})


def batch_of(*sizes, seed=0):
  """Images of `sizes` (h, w) padded with -1 to the largest -> [B, H, W], and the originals."""
  rng = np.random.RandomState(seed)
  originals = [rng.rand(h, w).astype(np.float32) for h, w in sizes]
  hh, ww = max(h for h, _ in sizes), max(w for _, w in sizes)
  out = np.full((len(sizes), hh, ww), -1.0, np.float32)
  for i, im in enumerate(originals):
    out[i, :im.shape[0], :im.shape[1]] = im
  return jnp.asarray(out), originals


def test_image_encoders_are_registered_beside_the_token_encoder():
  assert set(IMAGE_ENCODERS) >= {'cnn', 'vit'} and encoders.names('tokens') == ['rnn']
  with pytest.raises(ValueError, match=r"unknown encoder 'resnet'; valid encoders: cnn, rnn, vit"):
    config('resnet')


@pytest.mark.parametrize('name,kw', VARIANTS, ids=VARIANT_IDS)
def test_grid_shapes_and_masks_of_padded_images(name, kw):
  """8x16 and 4x8 images in one batch: the grid of 4-pixel cells is 2 x 4 (1 x 4 in columns,
  1 x 8 with cells 2 pixels wide); the small image's real cells are its own 1 x 2 (1 x 4);
  padded cells are zero and masked."""
  cfg = config(name, **kw)
  enc = build(cfg, rngs=nnx.Rngs(0)).encoder
  src, _ = batch_of((8, 16), (4, 8))
  out = enc(src)
  assert enc.grid(src.shape) == (2, 4)
  gh, gw = type(enc).grid_shape(cfg, (8, 16))
  per_row = 16 // (kw.get('cnn_cell_width') or 4)
  assert (gh, gw) == ((1, per_row) if kw.get('cnn_columns') else (2, per_row))
  assert out.annotations.shape == (2, gh * gw, cfg.image_dim) and out.summary.shape == (2, 12)
  expected = np.zeros((2, 2, per_row), bool)
  expected[0] = True
  expected[1, 0, :per_row // 2] = True
  if gh == 1:
    expected = expected.any(axis=1, keepdims=True)
  np.testing.assert_array_equal(out.mask, expected.reshape(2, gh * gw))
  np.testing.assert_array_equal(enc.source_mask(src), out.mask)
  np.testing.assert_array_equal(out.annotations[~np.asarray(out.mask)], 0.0)
  real = np.asarray(out.annotations[1])[np.asarray(out.mask[1])]
  np.testing.assert_allclose(out.summary[1], real.mean(0), rtol=1e-5, atol=1e-6)


# each variant with one decoder in turn (the whole product in the extended tier: half a minute)
@pytest.mark.parametrize('name,kw,decoder', covering(VARIANTS, ['bahdanau', 'luong', 'transformer'],
                                                     ids=VARIANT_IDS))
def test_padding_gets_no_attention_and_changes_no_output(name, kw, decoder):
  """An image decoded alone and padded in a batch with a larger one: the same annotations,
  logits, attention and greedy output; its padded cells get zero weight."""
  model = build(config(name, decoder, **kw), rngs=nnx.Rngs(1))
  src, originals = batch_of((8, 16), (4, 8), seed=1)
  alone = jnp.asarray(originals[1])[None]
  tgt = jnp.asarray([[1, 4, 5, 6, 3], [1, 7, 8, 3, 0]])
  call = nnx.jit(lambda m, s, t: m(s, t))   # (eagerly, each operation compiles alone)
  decode = nnx.jit(lambda m, s: greedy.greedy(m, s, 6))
  logits, w = call(model, src, tgt)
  logits1, w1 = call(model, alone, tgt[1:])
  mask = np.asarray(model.source_mask(src))
  np.testing.assert_array_equal(np.asarray(w[1])[:, ~mask[1]], 0.0)
  np.testing.assert_allclose(np.asarray(w[1])[:, mask[1]], w1[0], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(logits[1, :4], logits1[0, :4], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(w).sum(-1)[:, :4], 1.0, rtol=1e-5)   # weights sum to 1
  toks, ws = decode(model, src)
  toks1, _ = decode(model, alone)
  np.testing.assert_array_equal(toks[1], toks1[0])
  cfg = config(name, decoder, **kw)
  assert ws.shape == (2, 6, int(np.prod(encoders.lookup(name).grid_shape(cfg, (8, 16)))))


@pytest.mark.parametrize('name', IMAGE_ENCODERS)
@pytest.mark.parametrize('score,mode,normaliser', [
    ('additive', 'global', 'softmax'), ('general', 'hard', 'softmax'),
    ('scaled_dot', 'hard_st', 'softmax'), ('dot', 'global', 'sparsemax'),
    ('cosine', 'global', 'softmax')])
def test_rnn_decoders_read_an_image_with_scores_and_modes(name, score, mode, normaliser):
  """Beam search's best equals greedy's output with beam 1, over an image memory."""
  cfg = config(name, 'luong', score=score, attention_mode=mode, normaliser=normaliser,
               dec_hidden=12)
  model = build(cfg, rngs=nnx.Rngs(2))
  src, _ = batch_of((8, 16), (8, 8), seed=2)
  greedy_ids, _ = greedy.greedy(model, src, 5)
  best, _, weights = beam.beam_search(model, src, beam_size=1, max_len=5)
  np.testing.assert_array_equal(best, greedy_ids)
  assert weights.shape == (2, 5, 8)


def test_sinusoids_2d_are_the_row_then_the_column():
  p = np.asarray(images.sinusoids_2d(3, 5, 8))
  i, j = 2, 4
  np.testing.assert_allclose(p[i * 5 + j, :4], [np.sin(i), np.cos(i), np.sin(i / 100), np.cos(i / 100)],
                             rtol=1e-5)
  np.testing.assert_allclose(p[i * 5 + j, 4:], [np.sin(j), np.cos(j), np.sin(j / 100), np.cos(j / 100)],
                             rtol=1e-5)


@pytest.mark.parametrize('norm,columns,cell_width,positions', [
    (False, False, 0, 'annotations'), (True, False, 0, 'annotations'),
    (True, True, 0, 'annotations'), (False, True, 1, 'none')])
def test_cnn_grid_against_numpy(norm, columns, cell_width, positions):
  """One conv block (3x3 SAME, [LayerNorm over channels,] ReLU, 2x2 max pool or 2x1 with
  cells 1 pixel wide), [the max over each column,] the linear map [and the positions], by hand."""
  enc = build(config('cnn', cnn_layers=1, cnn_width=3, cnn_norm=norm, cnn_columns=columns,
                     cnn_cell_width=cell_width, cnn_positions=positions),
              rngs=nnx.Rngs(3)).encoder
  x = np.random.RandomState(3).rand(1, 4, 6).astype(np.float32)
  k = np.asarray(enc.convs[0].kernel[...])                         # [3, 3, 1, 3]
  pad = np.pad(x[0], 1)
  conv = np.stack([[np.einsum('ab,abc->c', pad[i:i + 3, j:j + 3], k[:, :, 0])
                    for j in range(6)] for i in range(4)]) + np.asarray(enc.convs[0].bias[...])
  if norm:         # per pixel, over the 3 channels (scale 1, bias 0 at init: set others)
    ln = enc.norms[0]
    ln.scale[...] = jnp.asarray([0.5, 1.5, 2.0])
    ln.bias[...] = jnp.asarray([0.1, -0.2, 0.3])
    mu, var = conv.mean(-1, keepdims=True), conv.var(-1, keepdims=True)
    conv = (conv - mu) / np.sqrt(var + 1e-6) * [0.5, 1.5, 2.0] + [0.1, -0.2, 0.3]
  pw = cell_width or 2
  pooled = np.maximum(conv, 0).reshape(2, 2, 6 // pw, pw, 3).max(axis=(1, 3))   # [2, W', C]
  if columns:
    pooled = pooled.max(axis=0, keepdims=True)                            # [1, W', C]
  gh, gw = pooled.shape[:2]
  ann = pooled.reshape(gh * gw, 3) @ np.asarray(enc.proj.kernel[...]) + np.asarray(
      enc.proj.bias[...])
  if positions == 'annotations':
    ann += np.asarray(images.sinusoids_2d(gh, gw, ann.shape[1]))          # 2-D positions
  np.testing.assert_allclose(enc(jnp.asarray(x)).annotations[0], ann, rtol=1e-4, atol=1e-5)


# ---- the ViT's convolutional stem and learned positions (model.vit_stem, vit_positions) --------
@pytest.mark.parametrize('stem', [0, 1, 2, 3])
def test_a_vit_stem_keeps_the_grid_of_patch_size_cells(stem):
  """0-3 stride-2 convolutions before 8-pixel patches: the same 2 x 4 grid over 16 x 32 images
  (cells of 8 pixels, as the heatmaps draw them), the same masks; stem widths doubling up to
  d_model (16: 4, 8, 16), and patches of 8 / 2^stem stem pixels."""
  cfg = config('vit', patch_size=8, vit_stem=stem)
  enc = build(cfg, rngs=nnx.Rngs(0)).encoder
  src, _ = batch_of((16, 32), (8, 16))
  out = enc(src)
  assert encoders.grid_shape(cfg, (16, 32)) == enc.grid(src.shape) == (2, 4) and enc.cell == 8
  assert out.annotations.shape == (2, 8, 12) and out.summary.shape == (2, 12)
  np.testing.assert_array_equal(out.mask, [[True] * 8, [True] * 2 + [False] * 6])
  np.testing.assert_array_equal(out.annotations[~np.asarray(out.mask)], 0.0)
  widths = [conv.kernel.shape[-1] for conv in enc.stem or ()]
  assert widths == [16 // 2 ** (stem - 1 - i) for i in range(stem)]
  assert enc.embed.kernel.shape == ((8 // 2 ** stem) ** 2 * (widths[-1] if stem else 1), 16)


def test_a_vit_without_a_stem_is_the_linear_patch_embedding_it_always_was():
  """vit_stem=0 with sinusoid_2d positions (the defaults): only the parameters saved runs have
  (embed, layers, norm, proj), and the annotations are the Transformer layers over
  patches · W + b + the 2-D sinusoids, the patch embedding written out here. (Its figures over
  five train steps are pinned in tests/test_golden.py.)"""
  enc = build(config('vit', image_dim=16), rngs=nnx.Rngs(0)).encoder
  assert sorted(nnx.state(enc, nnx.Param)) == ['embed', 'layers', 'norm']
  assert enc.stem is None and enc.pos_rows is None and enc.proj is None
  src, _ = batch_of((8, 16), (8, 16), seed=4)
  patches = np.asarray(src).reshape(2, 2, 4, 4, 4).transpose(0, 1, 3, 2, 4).reshape(2, 8, 16)
  h = (jnp.asarray(patches) @ enc.embed.kernel[...] + enc.embed.bias[...][None, None]
       + images.sinusoids_2d(2, 4, 16)[None])
  for layer in enc.layers:
    h = layer(h, jnp.ones((2, 1, 8), bool), transformer.DropoutKeys(None))
  np.testing.assert_allclose(enc(src).annotations, enc.norm(h), rtol=1e-5, atol=1e-6)


def test_learned_2d_positions_are_parameters_that_get_gradient_within_their_bound():
  """vit_positions='learned_2d': a vector per row and per column (max_positions of each), row
  i's then column j's at s = i * W' + j; the rows and columns of the grid get gradient, the
  others none; a grid wider than max_positions is refused by name."""
  enc = build(config('vit', vit_positions='learned_2d', max_positions=6),
              rngs=nnx.Rngs(0)).encoder
  rows, cols = np.asarray(enc.pos_rows[...]), np.asarray(enc.pos_cols[...])
  assert rows.shape == cols.shape == (6, 8)
  np.testing.assert_array_equal(enc.positions(2, 4)[1 * 4 + 3], np.concatenate([rows[1], cols[3]]))
  src, _ = batch_of((8, 16), (4, 8), seed=5)
  grads = nnx.jit(nnx.grad(lambda e: jnp.sum(e(src).annotations ** 2)))(enc)
  g_rows, g_cols = np.asarray(grads['pos_rows'][...]), np.asarray(grads['pos_cols'][...])
  assert (np.abs(g_rows[:2]).sum(-1) > 0).all() and (np.abs(g_cols[:4]).sum(-1) > 0).all()
  np.testing.assert_array_equal(g_rows[2:], 0.0)
  np.testing.assert_array_equal(g_cols[4:], 0.0)
  with pytest.raises(ValueError, match=r"model.vit_positions='learned_2d' are defined for up to "
                                       r'model.max_positions=6 rows and columns of patches, got '
                                       r'a grid of 2 x 7'):
    enc(jnp.zeros((1, 8, 28)))


# an image run (15 s): in CI; the suite's image models: padding, grids, gradients and a train step
@pytest.mark.extended
def test_digit_strips_vit_stem_trains_and_attends_over_the_same_4_x_20_grid(data_dir, tmp_path):
  """digit_strips.py:vit_stem (a 3-layer stem before 8-pixel patches, learned positions) at its
  smoke sizes: two train steps, an evaluation, a checkpoint; the loaded model's attention is
  over the CNN's 4 x 20 grid of 8 x 8 cells."""
  cfg = digit_strips.get_config('vit_stem,smoke')
  cfg.data.update(data_dir=data_dir, num_train=32, num_valid=8, num_test=8)
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2, log_every=1)
  workdir = str(tmp_path / 'run')
  summary = train.train_and_evaluate(cfg, workdir)
  mcfg = summary['model_config']
  assert (mcfg['encoder'], mcfg['vit_stem'], mcfg['vit_positions']) == ('vit', 3, 'learned_2d')
  assert cfg.train.lr == 1e-3 and digit_strips.get_config('vit').train.lr == 3e-3
  assert summary['step'] == 2 and np.isfinite(summary['results']['test']['loss'])
  t = loading.load(workdir)
  image = data.load_task(dict_cfg(cfg.data, data_dir)).image('test', 0)
  _, weights, _, tokens = t.attend(image)
  assert weights.shape == (len(tokens), 4, 20)


def test_sizes_that_do_not_divide_into_cells_are_refused():
  model = build(config('cnn'), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r'images of 6 x 8 pixels do not divide into 4 x 4 cells'):
    model(jnp.zeros((1, 6, 8)), jnp.ones((1, 2), jnp.int32))


@pytest.mark.parametrize('kw,needle', [
    (dict(encoder='cnn', attention_mode='local_m'), r"local_m' places a window p_t ± D on a 1-D"),
    (dict(encoder='vit', attention_mode='local_p'), r'use global, hard, hard_st or the sparsemax'),
    (dict(encoder='rnn', arch='transformer'), r"reads tokens; the transformer's token encoder"),
    (dict(encoder='cnn', arch='transformer', context_gate=True),
     r"model.arch='transformer', model.encoder='cnn' does not read model.context_gate=True"),
    (dict(encoder='cnn', image_channels=0), r'model.image_channels must be a positive integer'),
    (dict(encoder='cnn', cnn_cell_width=8), r'cnn_cell_width must be 0 \(square cells of '
                                            r'2\^cnn_layers = 4 pixels\) or a power of 2 up to 4, got 8'),
    (dict(encoder='cnn', cnn_positions='rnn_input'), r"cnn_positions='rnn_input' adds the "
                                                     r"positions to the row RNN's input: set "
                                                     r"model.cnn_row_rnn=True"),
    (dict(encoder='cnn', cnn_positions='rope'), r"unknown model.cnn_positions 'rope'; valid: "
                                                r"annotations, rnn_input, none"),
    (dict(encoder='vit', patch_size=4, vit_stem=3), r'model.vit_stem=3 halves the image 3 times '
                                                    r'\(by 2\^3 = 8\) before the patches, and '
                                                    r'model.patch_size=4 is not a multiple of 8'),
    (dict(encoder='vit', patch_size=6, vit_stem=2), r'model.patch_size=6 is not a multiple of 4'),
    (dict(encoder='vit', vit_stem=-1), r'model.vit_stem must be an integer >= 0 .*got -1'),
    (dict(encoder='vit', vit_positions='learned'), r"unknown model.vit_positions 'learned'; "
                                                   r"valid: sinusoid_2d, learned_2d"),
    (dict(encoder='cnn', vit_stem=1), r"model.encoder='cnn' does not read model.vit_stem=1"),
])
def test_undefined_combinations_are_refused_by_name(kw, needle):
  with pytest.raises(ValueError, match=needle):
    ModelConfig(**{**small(kw.get('arch', 'rnn'), kw['encoder']), **kw})


# ---- Xu et al. 2015's own parts --------------------------------------------------------------
def test_context_gate_scales_the_context_by_a_sigmoid_of_the_query():
  attn = Attention('general', query_dim=5, key_dim=4, attn_dim=3, max_src_len=8, gate=True,
                   rngs=nnx.Rngs(4))
  rng = np.random.RandomState(4)
  q, keys = rng.randn(2, 3, 5).astype(np.float32), rng.randn(2, 6, 4).astype(np.float32)
  mask = np.ones((2, 6), bool)
  mem = attn.memory(jnp.asarray(keys), jnp.asarray(mask), jnp.zeros((2, 4)))
  gated = attn.read(jnp.asarray(q), mem)
  w, b = np.asarray(attn.gate.kernel[...]), np.asarray(attn.gate.bias[...])
  beta = 1 / (1 + np.exp(-(q @ w + b)))                                  # [2, 3, 1]
  ungated = np.einsum('bts,bsk->btk', np.asarray(gated.weights), keys)
  np.testing.assert_allclose(gated.context, beta * ungated, rtol=1e-5, atol=1e-6)
  assert Attention('general', query_dim=5, key_dim=4, attn_dim=3, max_src_len=8,
                   rngs=nnx.Rngs(4)).gate is None


def test_doubly_stochastic_term_against_numpy():
  rng = np.random.RandomState(5)
  w = rng.dirichlet(np.ones(4), size=(2, 3)).astype(np.float32)          # [B, T, S]
  tgt = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
  src = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
  expected = [sum(src[b, i] * (1 - sum(tgt[b, t] * w[b, t, i] for t in range(3))) ** 2
                  for i in range(4)) for b in range(2)]
  np.testing.assert_allclose(objective.doubly_stochastic(w, tgt, src), expected, rtol=1e-5)
  # in the loss: λ_ds times the sum over real sentences, per real target token
  logits = jnp.zeros((2, 3, 6))
  batch = {'tgt_out': jnp.asarray([[4, 3, 0], [4, 5, 3]]), 'weight': jnp.asarray([1.0, 1.0])}
  read = type('Read', (), {'weights': jnp.asarray(w)})
  base, _, _ = objective.loss(objective.Objective(), logits, read, batch, None)
  obj = dataclasses.replace(objective.Objective(), doubly_stochastic_weight=0.5)
  with_ds, sums, _ = objective.loss(obj, logits, read, batch, None, src_mask=jnp.asarray(src > 0))
  np.testing.assert_allclose(with_ds - base, 0.5 * sum(expected) / 5, rtol=1e-5)
  np.testing.assert_allclose(sums['doubly_stochastic_sum'], sum(expected), rtol=1e-5)


def test_train_step_with_the_regulariser_and_gate_lowers_the_loss():
  """A few optimiser steps on one batch of images: the objective with λ_ds and the gate is
  differentiable end to end and goes down."""
  cfg = config('cnn', 'bahdanau', context_gate=True)
  obj = dataclasses.replace(objective.Objective(), doubly_stochastic_weight=1.0)
  tx = update.OptimizerConfig(lr=3e-3, warmup_steps=0, decay='constant', steps=None,
                                 weight_decay=0.0, clip_norm=1.0).build()
  graphdef, state = templates.init_state(cfg, tx, 0)
  src, _ = batch_of((8, 16), (4, 8), seed=6)
  batch = {'src': src, 'tgt_in': jnp.asarray([[1, 4, 5, 6], [1, 7, 8, 0]]),
           'tgt_out': jnp.asarray([[4, 5, 6, 3], [7, 8, 3, 0]]), 'weight': jnp.ones((2,))}
  step = jax.jit(lambda s, b: update.train_step(graphdef, tx, obj, 0, s, b))
  losses = []
  for _ in range(6):
    state, m = step(state, batch)
    losses.append(float(m['objective']))
  assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
  assert float(m['doubly_stochastic_sum']) > 0


# ---- the image_dates task, end to end ---------------------------------------------------------
def test_image_dates_are_drawn_deterministically_and_test_strings_are_unseen(tmp_path):
  cfg = image_dates.get_config('smoke').data
  cfg.update(num_train=24, num_valid=8, num_test=8)
  first, second = (data.load_task(dict_cfg(cfg, str(tmp_path / d))) for d in ('a', 'b'))
  for split in ('train', 'test'):
    a, b = first._images[split], second._images[split]
    assert a.shape == (len(first.texts(split)), 32, 256) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)                 # regenerated elsewhere: the same pixels
    assert (a.reshape(len(a), -1).max(1) > 150).all()   # every image has ink
  train = {s for s, _ in first.texts('train')}
  assert not train & {s for s, _ in first.texts('test')}
  assert set(first.features('test')['font']) <= set(image_builders.FONT_SETS[cfg.image_fonts])
  # the held-out split: the test strings again, every one in a family never drawn elsewhere
  assert first.test_splits == ('test', image_builders.HELDOUT_SPLIT)
  heldout = first.features(image_builders.HELDOUT_SPLIT)['font']
  assert sorted(first.texts(image_builders.HELDOUT_SPLIT)) == sorted(first.texts('test'))
  assert set(heldout) <= set(image_builders.HELDOUT_FONTS)
  for split in ('train', 'validation', 'test'):
    assert not set(first.features(split)['font']) & set(heldout), split
  # the held-out family (STIX General) is in no font set that data.image_fonts can name
  assert all(f.startswith('STIXGeneral') for f in image_builders.HELDOUT_FONTS)
  for fonts in image_builders.FONT_SETS.values():
    assert not any(f.startswith('STIX') for f in fonts), fonts
  batch = next(iter(first.eval_batches('test', 16)))
  assert batch['src'].shape == (16, 32, 256) and batch['src'].dtype == np.float32
  real = batch['weight'] > 0
  assert batch['src'][real].min() >= 0 and batch['src'][real].max() <= 1
  np.testing.assert_array_equal(batch['src'][~real], -1.0)          # filler rows: padding


def test_wide_fonts_come_from_pip_packages_and_a_missing_package_is_named(monkeypatch):
  """data.image_fonts='wide': 'all' and the pip packages' faces (never STIX), each of which
  loads and draws digits, letters and accents; a package that is not installed is one
  ValueError naming it, raised by make_config before anything is drawn."""
  wide = image_builders.FONT_SETS['wide']
  assert wide[:17] == image_builders.FONT_SETS['all'] and len(set(wide)) == len(wide) == 48
  text = '0123456789 /.-, abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ éû'
  for face in wide[17:]:
    assert os.path.isfile(image_builders.font_path(face)), face
    assert image_builders.covers(face, text), face
    image, font = image_builders.render('14 févr. 2018', np.random.default_rng(0), 32, 256,
                                        (face,))
    assert font == face and image.max() > 150, face
  cfg = image_dates.get_config('smoke').data
  cfg.image_fonts = 'wide'
  assert '_fontswide' in image_builders.make_config('image_dates', cfg).name
  find_spec = image_builders.importlib.util.find_spec
  monkeypatch.setattr(image_builders.importlib.util, 'find_spec',
                      lambda name, *a: None if name == 'font_lato' else find_spec(name, *a))
  with pytest.raises(ValueError, match=r"font_lato, which is not installed: pip install"):
    image_builders.make_config('image_dates', cfg)
  cfg.image_fonts = 'all'                       # a set without the package still works
  image_builders.make_config('image_dates', cfg)


def test_image_augmentation_draws_training_images_only_and_names_bad_values(tmp_path):
  """data.image_* change the training images (and the data set's name), never validation or
  the test splits; a value out of range is refused with its name and range."""
  cfg = image_dates.get_config('smoke').data
  cfg.update(num_train=12, num_valid=6, num_test=6, image_augment_p=1.0)   # every one augmented
  plain = cfg.copy_and_resolve_references()
  for f in dataclasses.fields(image_builders.Augment):
    plain[f'image_{f.name}'] = 0.0
  augmented, clean = (data.load_task(dict_cfg(c, str(tmp_path / d)))
                      for c, d in ((cfg, 'a'), (plain, 'p')))
  assert augmented.location != clean.location
  for split in ('validation', 'test', image_builders.HELDOUT_SPLIT):
    np.testing.assert_array_equal(augmented._images[split], clean._images[split])
  assert not np.array_equal(augmented._images['train'], clean._images['train'])
  assert augmented.texts('train') == clean.texts('train')
  half = cfg.copy_and_resolve_references()        # data.image_augment_p: some drawn plainly
  half.image_augment_p = 0.5
  half = data.load_task(dict_cfg(half, str(tmp_path / 'h')))
  same = [np.array_equal(a, b) for a, b in zip(half._images['train'], clean._images['train'])]
  assert 0 < sum(same) < len(same), same
  assert all(np.array_equal(a, b) for a, b, plain in zip(
      half._images['train'], augmented._images['train'], same) if not plain)
  bad = cfg.copy_and_resolve_references()
  bad.image_blur = 9.0
  with pytest.raises(ValueError, match=r'data.image_blur must be in \[0, 3.0\], got 9.0'):
    image_builders.make_config('image_dates', bad)
  bad = cfg.copy_and_resolve_references()
  bad.image_fonts = 'stix'
  with pytest.raises(ValueError, match="unknown data.image_fonts 'stix'; valid: all, dejavu"):
    image_builders.make_config('image_dates', bad)


def dict_cfg(cfg, data_dir):
  c = cfg.copy_and_resolve_references()
  c.data_dir = data_dir
  return c


# half a minute: in CI; the suite's image models: padding, grids, gradients and a train step
@pytest.mark.extended
def test_image_dates_smoke_trains_evaluates_and_draws_heatmaps_over_the_image(data_dir, tmp_path):
  cfg = smoke(image_dates, data_dir, **{'eval.heatmaps': 2})
  workdir = str(tmp_path / 'run')
  summary = train.train_and_evaluate(cfg, workdir)
  assert summary['model_config']['encoder'] == 'cnn'
  assert np.isfinite(summary['results']['test']['loss'])
  heldout = image_builders.HELDOUT_SPLIT    # reported beside test, with its own heatmaps
  assert np.isfinite(summary['results'][heldout]['loss'])
  assert [os.path.basename(p) for m in summary['results'].values() for p in m.get('heatmaps', [])
          ] == [
      'test_0.png', 'test_1.png', 'test_grid.png',
      f'{heldout}_0.png', f'{heldout}_1.png', f'{heldout}_grid.png']
  report = saved_run.evaluate_run(workdir, split='test', beam=2, num_heatmaps=1, verbose=False)
  assert report['sentences'] == 32 and len(report['heatmaps']) == 2
  report = saved_run.evaluate_run(workdir, split=heldout, beam=2, num_heatmaps=0, verbose=False)
  assert report['split'] == heldout and report['sentences'] == 32
  # reloaded in Python: images as arrays or files, weights over each image's own grid
  t = loading.load(workdir)
  task = data.load_task(dict_cfg(cfg.data, data_dir))
  image = task.image('test', 0)                                   # float32 [32, 256]
  u8 = np.round(image * 255).astype(np.uint8)
  path = str(tmp_path / 'scan.png')
  PIL.Image.fromarray(u8).save(path)                               # 8-bit grayscale PNG
  small = image[:16, :96]        # a smaller image: 2 x 24 cells of 8 x 4 pixels, pooled to 1 x 24
  outs = t.translate([u8, path, (small * 255).astype(np.uint8)], beam=2)
  assert outs[0] == outs[1] and all(isinstance(o, str) for o in outs)
  out, weights, _, tokens = t.attend(small)
  assert weights.shape == (len(tokens), 1, 24)     # the config's columns (model.cnn_columns)
  alone = t.attend(u8)     # (an untrained model's near-ties may decode otherwise in a batch of 3)
  assert alone[0] == t.translate([path])[0] and alone[1].shape[1:] == (1, 64)
  # implicit attention over the same image: pixels [T, H, W], Grad-CAM on the grid [T, H', W']
  pixels, cam = t.saliency(small), t.saliency(small, method='gradcam')
  assert pixels.output == out and pixels.scores.shape == (len(tokens), 16, 96)
  assert cam.scores.shape == cam.weights.shape == weights.shape and (cam.scores >= 0).all()
  np.testing.assert_allclose(cam.weights, weights, atol=1e-5)
  with pytest.raises(ValueError, match=r'images\[0\]: pixels must be in \[0, 1\]'):
    t.translate([image * 3])
  with pytest.raises(TypeError, match='this model reads images: pass a list of images'):
    t.translate(image)
  bad_image_files_are_one_line_and_big_ones_are_refused(t, path, u8, workdir, tmp_path)
  wrong = smoke(image_dates, data_dir)   # a token encoder (the CNN's fields back at defaults)
  wrong.update_from_flattened_dict(common.switch(wrong, encoder=''))
  with pytest.raises(ValueError, match=r"data.name='image_dates' gives images as sources, but "
                                       r"model.encoder='' reads tokens; valid encoders for "
                                       r"images: cnn, vit"):
    train.train_and_evaluate(wrong, str(tmp_path / 'wrong'))


def bad_image_files_are_one_line_and_big_ones_are_refused(t, good, u8, workdir, tmp_path):
  """A file that is not an image, a broken or truncated PNG, a missing file: one ValueError
  `images[i]: <file>: ...` (the image library's SyntaxError used to escape, and end the CLI
  in a traceback, exit 1); an image over MAX_SCALE times the training canvas is refused from
  its header, before its pixels are decoded (4000 x 4000 took 10 s and 5.4 GB)."""
  png = open(good, 'rb').read()
  broken = bytearray(png)
  broken[29] ^= 0xFF                                # IHDR checksum: Pillow's SyntaxError
  files = {'text.png': b'not an image', 'broken.png': bytes(broken), 'cut.png': png[:len(png) // 2]}
  for name, content in files.items():
    (tmp_path / name).write_bytes(content)
  big = str(tmp_path / 'big.png')
  PIL.Image.new('L', (4000, 4000)).save(big)
  cases = [(str(tmp_path / n), 'not a readable image \\(') for n in files] + [
      (str(tmp_path / 'missing.png'), 'no such file$'),
      (big, '4000 x 4000 pixels is over the bound of 128 x 1024 '
            '\\(height x width: 4 times the training canvas\\)')]
  for f, needle in cases:
    with pytest.raises(ValueError, match=f'^images\\[1\\]: {re.escape(f)}: {needle}'):
      t.translate([u8, f])
    with pytest.raises(ValueError, match=f'^images\\[0\\]: {re.escape(f)}: {needle}'):
      t.attend_heads(f)
  assert t.max_image_shape == (4 * 32, 4 * 256)     # the config's 32 x 256 canvas
  with pytest.raises(ValueError, match=r'^images\[0\]: the image: 129 x 8 pixels is over'):
    t.translate([np.zeros((129, 8), np.uint8)])
  # the CLI: every line checked before any is decoded; one `error:` line, exit 2
  for f, needle in cases[1:2]:                      # the broken PNG (Pillow's SyntaxError)
    proc = run_module('experiments.translate', f'--workdir={workdir}', stdin=f'{good}\n{f}\n')
    assert proc.returncode == 2 and proc.stdout == '', proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(f'error: stdin line 2: {re.escape(f)}: {needle}',
                                        lines[0]), proc.stderr[-2000:]


def test_image_heatmaps_draw_the_encoder_s_own_grid(tmp_path, monkeypatch):
  """The weights are drawn on the grid the model's encoder makes: 32 columns over a 32 x 256
  image (model.cnn_columns) as 1 x 32, not as the 2 x 16 square cells that 32 would also tile."""
  cfg = config('cnn', cnn_layers=3, cnn_columns=True)
  drawn = []
  monkeypatch.setattr(evaluators.plots, 'plot_image_attention',
                      lambda image, weights, *a, **k: drawn.append(weights.shape) or 'x.png')
  monkeypatch.setattr(evaluators.plots, 'plot_image_attention_grid', lambda *a, **k: 'grid.png')
  task = type('Task', (), {'tgt_tok': type('Tok', (), {'id_to_piece': staticmethod(str)})()})()
  ids = np.asarray([5, 6, 2])                                       # two tokens, then EOS
  weights = np.full((3, 32), 1 / 32, np.float32)
  kept = [('src', 'hyp', 'hyp', ids, weights, np.zeros((32, 256), np.float32))]
  evaluators.heatmaps(task, kept, str(tmp_path), 'test',
                     grid=functools.partial(encoders.grid_shape, cfg))
  assert drawn == [(3, 1, 32)]


@pytest.mark.extended   # a second image run (half a minute): after the suite, in CI
def test_transformer_decoder_over_an_image_draws_each_layer_and_head(data_dir, tmp_path):
  """A Transformer decoder's cross-attention per layer and head over an image: the run's
  heatmaps include them (test_heads.png, a column per head), and attend_heads gives them over
  the grid, the last layer's mean being what attend returns."""
  cfg = smoke(image_dates, data_dir, **{'eval.heatmaps': 1})
  cfg = smoke(image_dates, data_dir, **{'eval.heatmaps': 1}, **common.switch(
      cfg, arch='transformer', encoder='vit', patch_size=8, d_model=16, heads=2, ff_dim=24,
      transformer_layers=2))
  workdir = str(tmp_path / 'run')
  summary = train.train_and_evaluate(cfg, workdir)
  assert [os.path.basename(p) for m in summary['results'].values() for p in m.get('heatmaps', [])
          ] == [
      f'{split}_{name}.png' for split in ('test', image_builders.HELDOUT_SPLIT)
      for name in ('0', 'grid', 'heads')]
  t = loading.load(workdir)
  image = data.load_task(dict_cfg(cfg.data, data_dir)).image('test', 0)
  out, heads, _, tokens = t.attend_heads(image)
  assert out == t.translate([image])[0] and tokens
  assert heads.shape == (2, 2, len(tokens), 4, 32)
  np.testing.assert_allclose(heads.sum(axis=(-2, -1)), 1.0, rtol=1e-5)
  np.testing.assert_allclose(heads[-1].mean(0), t.attend(image)[1], rtol=1e-4, atol=1e-6)


def test_digit_strips_read_their_digits_and_test_digit_images_are_never_trained_on(tmp_path):
  digits, labels = strips.mnist_5k()
  assert digits.shape == (5000, 28, 28) and set(labels) == set(range(10))
  test_pool, train_pool = (set(strips.digit_pool(s, 5000)) for s in ('test', 'train'))
  assert len(test_pool) == 1000 and len(train_pool) == 4000 and not test_pool & train_pool
  assert len({labels[i] for i in test_pool}) == 10                  # every digit in both pools
  cfg = digit_strips.get_config('smoke').data
  cfg.update(num_train=40, num_valid=8, num_test=20)
  task = data.load_task(dict_cfg(cfg, str(tmp_path / 'tfds')))
  for split, pool in (('train', train_pool), ('validation', train_pool), ('test', test_pool)):
    for (src, tgt), ids in zip(task.texts(split), task.features(split)['digit_ids']):
      rows = [int(r) for r in ids.split()]
      assert src == tgt == ''.join(str(labels[r]) for r in rows) and 1 <= len(rows) <= 5
      assert set(rows) <= pool, (split, rows)
  assert task.image_shape == (32, 160)
  cfg_all = digit_strips.get_config('smoke')
  cfg_all.data = dict_cfg(cfg, str(tmp_path / 'tfds'))
  report = data_info.describe(cfg_all)          # bash launch.sh data-info on an image task
  assert 'first training batch: src (16, 32, 160)' in report and "image (32, 160) of '" in report
  drawn = data_info.draw(task, str(tmp_path / 'strips.png'), num=1)      # --draw
  assert PIL.Image.open(drawn).size[0] > 160


def test_distorted_training_digits_leave_validation_and_test_strips_as_they_were(tmp_path):
  """data.digit_distortion redraws the training strips through distort_digit; the validation and
  test strips are the same images whatever its value (results stay comparable)."""
  digit = strips.mnist_5k()[0][7].astype(np.float32) / 255.0
  same = strips.distort_digit(np.random.default_rng(0), digit, 0.0)
  np.testing.assert_allclose(same, digit, atol=1e-6)                  # strength 0: the identity
  moved = strips.distort_digit(np.random.default_rng(0), digit, 1.0)
  assert moved.shape == digit.shape and 0.0 <= moved.min() and moved.max() <= 1.0
  assert np.abs(moved - digit).mean() > 0.01
  tasks = {}
  for strength in (0.0, 0.6):
    cfg = digit_strips.get_config('smoke').data
    cfg.update(num_train=12, num_valid=4, num_test=6, digit_distortion=strength)
    tasks[strength] = data.load_task(dict_cfg(cfg, str(tmp_path / 'tfds')))
  plain, distorted = tasks[0.0], tasks[0.6]
  for split, n in (('validation', 4), ('test', 6)):
    for i in range(n):
      np.testing.assert_array_equal(plain.image(split, i), distorted.image(split, i))
  assert not all(np.array_equal(plain.image('train', i), distorted.image('train', i))
                 for i in range(12))
  cfg.digit_distortion = 5.0
  with pytest.raises(ValueError, match=r'data.digit_distortion must be 0-4 \(digit_strips only\), '
                                       r'got 5.0 for digit_strips'):
    image_builders.make_config('digit_strips', cfg)
  cfg.digit_distortion = 0.5
  with pytest.raises(ValueError, match=r'got 0.5 for image_dates'):
    image_builders.make_config('image_dates', cfg)
  cfg.digit_distortion, cfg.digit_distortion_p = 0.5, 0.0
  with pytest.raises(ValueError, match=r'data.digit_distortion_p must be in \(0, 1\], got 0.0'):
    image_builders.make_config('digit_strips', cfg)
  cfg.digit_distortion_p = 0.5      # half the training digits distorted: a data set of its own
  assert image_builders.make_config('digit_strips', cfg).name.endswith('_distort0.5p0.5')


def test_image_heatmaps_put_each_steps_attention_on_its_cells_and_grow_with_the_output(tmp_path):
  """plots: a step's attention, upsampled from the grid onto the image, is brightest over the
  cell it attends (and as bright across the cell's rows); a constant grid upsamples to a
  constant; the heatmap PNG has a row per output token."""
  np.testing.assert_allclose(plots._upsample(np.full((2, 8), 0.3), 16, 64), 0.3)
  grid = np.random.RandomState(0).rand(3, 5)       # NumPy's np.interp along each axis in turn
  centres = lambda n_in, n_out: np.clip((np.arange(n_out) + .5) * n_in / n_out - .5, 0, n_in - 1)
  rows = np.stack([np.interp(centres(5, 11), np.arange(5), r) for r in grid])     # [3, 11]
  want = np.stack([np.interp(centres(3, 7), np.arange(3), c) for c in rows.T], axis=1)
  np.testing.assert_allclose(plots._upsample(grid, 7, 11), want, rtol=1e-12, atol=1e-12)
  image = np.zeros((16, 64), np.float32)
  grid = np.zeros((2, 8), np.float32)
  grid[:, 5] = 1.0                                   # cell column 5: pixels 40..47
  rgb = plots._overlay(image, grid)
  assert rgb.shape == (16, 64, 3) and 0 <= rgb.min() and rgb.max() <= 1
  brightness = rgb.sum(-1)
  assert 40 <= int(np.argmax(brightness[8])) < 48
  np.testing.assert_allclose(brightness[0], brightness[15], atol=1e-6)
  weights = np.repeat(grid[None], 6, axis=0)
  heights = [PIL.Image.open(plots.plot_image_attention(
      image, weights[:t], list('abcdef')[:t], str(tmp_path / f'{t}.png'))).size[1]
             for t in (2, 6)]
  assert heights[1] > 2 * heights[0], heights


def test_a_huge_image_file_is_refused_without_pillows_warning(tmp_path):
  """A 10,000 x 10,000 PNG (past Pillow's decompression-bomb warning) is refused from its
  header in one ValueError, and Pillow's warning is not printed before it."""
  path = tmp_path / 'huge.png'
  PIL.Image.new('1', (10_000, 10_000)).save(path)
  with warnings.catch_warnings():
    warnings.simplefilter('error')   # any warning would fail the read
    with pytest.raises(ValueError, match=r'huge.png: 10000 x 10000 pixels is over the bound'):
      images.read_image(str(path), max_shape=(64, 256))


def test_a_file_that_is_not_an_image_or_is_broken_is_one_value_error_naming_it(tmp_path):
  """Not an image, a PNG cut short, a missing file, a folder: a ValueError naming the file
  each (the image library's SyntaxError or OSError used to escape as a long traceback)."""
  text, cut, good = tmp_path / 'notes.png', tmp_path / 'cut.png', tmp_path / 'good.png'
  text.write_text('not an image')
  noise = np.random.default_rng(0).integers(0, 256, (20, 40), dtype=np.uint8)
  PIL.Image.fromarray(noise).save(good)   # (noise: pixel data past the header to cut into)
  cut.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
  assert images.read_image(str(good), max_shape=(64, 256)).shape == (20, 40)
  for path, needle in ((text, 'not a readable image'), (cut, 'not a readable image'),
                       (tmp_path / 'nope.png', 'no such file'),
                       (tmp_path, 'not a readable image (not a file)')):
    with pytest.raises(ValueError, match=f'^{re.escape(str(path))}: {re.escape(needle)}'):
      images.read_image(str(path), max_shape=(64, 256))
