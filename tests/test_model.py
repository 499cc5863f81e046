"""The Seq2Seq model: every score x decoder x cell builds, trains (finite gradients), is
padding-invariant, agrees with its own step-by-step decoding, and can memorise data."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import attention_jax as aj
from helpers import covering

SCORES = sorted(aj.SCORES)
DECODERS = sorted(aj.DECODERS)
CELLS = sorted(aj.CELLS)
V_SRC, V_TGT = 11, 9
SRC = np.array([[5, 6, 7, 8, 2, 0], [4, 9, 2, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
TGT_IN = np.array([[1, 5, 6, 7], [1, 4, 0, 0], [0, 0, 0, 0]], np.int32)


def config(score='additive', decoder='bahdanau', cell='gru', **kw):
  base = dict(src_vocab=V_SRC, tgt_vocab=V_TGT, emb_dim=8, enc_hidden=6, dec_hidden=12,
              attn_dim=5, max_src_len=16, score=score, decoder=decoder, cell=cell)
  return aj.ModelConfig(**{**base, **kw})


def build(cfg, seed=0):
  return aj.Seq2Seq(cfg, rngs=nnx.Rngs(seed))


@nnx.jit
def forward(model, src, tgt_in):
  return model(src, tgt_in)


# every score with both decoders, its cell alternating so that every score x cell and
# decoder x cell pair occurs too: the pairs of the full product in half its models
COMBOS = [(s, d, CELLS[(i + j) % len(CELLS)])
          for i, s in enumerate(SCORES) for j, d in enumerate(DECODERS)]


@pytest.mark.parametrize('score,decoder,cell', COMBOS)
def test_finite_gradients_every_score_decoder_cell(score, decoder, cell):
  model = build(config(score, decoder, cell, dropout=0.1))

  @nnx.jit
  def grads(model, src, tgt_in, key):
    def loss_fn(model):
      logits, w = model(src, tgt_in, dropout_key=key)
      ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tgt_in[:, 1:])
      return jnp.sum(ce * (tgt_in[:, 1:] != 0)), (logits, w)
    return nnx.grad(loss_fn, has_aux=True)(model)

  g, (logits, w) = grads(model, SRC, TGT_IN, jax.random.key(1))
  assert logits.shape == (3, 4, V_TGT) and w.shape == (3, 4, 6)
  leaves = jax.tree.leaves(g)
  assert leaves and all(np.isfinite(np.asarray(x)).all() for x in leaves)
  assert sum(float(jnp.abs(x).sum()) for x in leaves) > 0
  w = np.asarray(w)
  if aj.SCORES[score].attends:
    np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(w[1].sum(-1), 1.0, rtol=1e-5)
    assert (w[1, :, 3:] == 0).all() and (w[0, :, 5:] == 0).all()
  else:
    assert (w == 0).all()
  assert (w[2] == 0).all()



@pytest.mark.parametrize('score,mode,coverage,decoder', [
    ('general', 'global', False, 'luong'), ('general', 'global', False, 'bahdanau'),
    ('scaled_general', 'local_p', False, 'luong'), ('cosine', 'global', False, 'bahdanau'),
    ('additive', 'global', True, 'bahdanau'), ('location', 'global', False, 'luong'),
    ('additive', 'hard', False, 'luong')])
def test_deferred_memory_gradient_equals_plain_autodiff(score, mode, coverage, decoder):
  """Decoder.features defers the gradient of the attention memory (keys, and `pre` of
  bilinear scores) to after the time loop; it must equal autodiff of the plain scan."""
  model = build(config(score, decoder, 'lstm', attention_mode=mode, coverage=coverage))
  graphdef, params = nnx.split(model)

  def loss(params, plain):
    m = nnx.merge(graphdef, params)
    if plain:
      m.decoder.features = m.decoder.scan
    logits, r = m.forward(SRC, TGT_IN, sample_key=jax.random.key(3))
    # a loss that reaches every output: the logits, the weights and the coverage loss
    return (jnp.sum(jax.nn.log_softmax(logits)[..., 4] * (TGT_IN != 0))
            + jnp.sum(r.weights ** 2) + jnp.sum(r.coverage_loss))

  soft = mode != 'hard'
  calls = lambda plain: str(jax.make_jaxpr(lambda p: loss(p, plain))(params)).count(
      'custom_vjp_call')                        # (the encoder's RNN has one too)
  assert calls(False) == calls(True) + soft
  deferred = jax.jit(jax.grad(lambda p: loss(p, False)))(params)
  plain = jax.jit(jax.grad(lambda p: loss(p, True)))(params)
  flat_plain = jax.tree.leaves(plain)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(deferred), flat_plain,
                          strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4,
                               atol=2e-5 * float(jnp.max(jnp.abs(b)) + 1e-6),
                               err_msg=jax.tree_util.keystr(path))
  assert any(float(jnp.abs(x).sum()) > 0 for x in jax.tree.leaves(deferred))


# every score, with each decoder in turn (every pair in the extended tier)
@pytest.mark.parametrize('score,decoder', covering(SCORES, DECODERS))
def test_extra_padding_does_not_change_a_sentence(score, decoder):
  model = build(config(score, decoder, 'lstm', enc_layers=2))
  logits, w = forward(model, SRC, TGT_IN)
  src2 = np.pad(SRC, ((0, 0), (0, 5)))
  tgt2 = np.pad(TGT_IN, ((0, 0), (0, 3)))
  logits2, w2 = forward(model, src2, tgt2)
  np.testing.assert_allclose(np.asarray(logits2[:2, :4]), np.asarray(logits[:2]),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(w2[:2, :4, :6]), np.asarray(w[:2]), atol=1e-6)
  assert (np.asarray(w2[:, :, 6:]) == 0).all()
  assert np.isfinite(np.asarray(logits2)).all()


# each decoding path with one score in turn (every pair in the extended tier)
@pytest.mark.parametrize('score,decoder,feed', covering(
    ['additive', 'general', 'none'], [('bahdanau', True), ('luong', True), ('luong', False)]))
def test_teacher_forcing_equals_step_by_step(score, decoder, feed):
  """The scan (or batched Luong attention) and the decoding step compute the same thing."""
  model = build(config(score, decoder, 'gru', input_feeding=feed, dec_layers=2))
  logits, w = forward(model, SRC, TGT_IN)

  @nnx.jit
  def stepwise(model, src, tgt_in):
    carry, mem = model.start(src)

    def body(carry, y):
      carry, logp, w = model.step(carry, y, mem)
      return carry, (logp, w)

    _, (logp, w) = jax.lax.scan(body, carry, tgt_in.T)
    return jnp.swapaxes(logp, 0, 1), jnp.swapaxes(w, 0, 1)

  logp, w_step = stepwise(model, SRC, TGT_IN)
  np.testing.assert_allclose(np.asarray(logp[:2]), np.asarray(jax.nn.log_softmax(logits)[:2]),
                             atol=1e-5)
  np.testing.assert_allclose(np.asarray(w_step), np.asarray(w), atol=1e-6)
  # at least as many rows as target symbols: the step looks projected embeddings up instead
  reps = -(-model.decoder.embed.num_embeddings // len(SRC))
  logp_many, w_many = stepwise(model, np.tile(SRC, (reps, 1)), np.tile(TGT_IN, (reps, 1)))
  np.testing.assert_allclose(np.asarray(logp_many[:3]), np.asarray(logp), atol=1e-5)
  np.testing.assert_allclose(np.asarray(w_many[:3]), np.asarray(w_step), atol=1e-6)


@pytest.mark.parametrize('decoder', DECODERS)
def test_jit_equals_no_jit(decoder):
  model = build(config('general', decoder, 'lstm'))
  eager = model(SRC, TGT_IN)
  jitted = forward(model, SRC, TGT_IN)
  for a, b in zip(eager, jitted):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_bfloat16_compute_runs_and_stays_close_to_float32():
  f32 = build(config('additive', 'luong', 'lstm'))
  bf16 = build(config('additive', 'luong', 'lstm', dtype='bfloat16'))
  nnx.update(bf16, nnx.state(f32, nnx.Param))          # same float32 parameters
  l32, _ = forward(f32, SRC, TGT_IN)
  l16, w16 = forward(bf16, SRC, TGT_IN)
  assert l16.dtype == jnp.float32 and w16.dtype == jnp.float32
  assert jax.tree.leaves(nnx.state(bf16, nnx.Param))[0].dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(l16), np.asarray(l32), atol=0.1)


@pytest.mark.parametrize('field,value,needle', [
    ('score', 'bilinear', 'additive'),
    ('decoder', 'transformer', 'bahdanau'),
    ('cell', 'rnn', 'lstm'),
    ('dtype', 'float16', 'bfloat16'),
    ('enc_hidden', -4, 'positive'),
    ('dropout', 1.5, '[0, 1)'),
])
def test_bad_config_values_name_the_field_and_valid_values(field, value, needle):
  with pytest.raises(ValueError) as err:
    config(**{field: value})
  assert f'model.{field}' in str(err.value) and needle in str(err.value)


def test_dot_with_unequal_sizes_fails_at_config_time():
  with pytest.raises(ValueError) as err:
    config('dot', enc_hidden=6, dec_hidden=10)      # annotations 2 x 6 = 12
  assert '10' in str(err.value) and '12' in str(err.value)


def test_a_model_class_given_another_archs_config_names_build():
  """aj.Seq2Seq is the RNN and aj.Transformer the Transformer: given the other's config,
  each fails in one line that points to aj.build (which picks the class by model.arch)."""
  for cls, arch in ((aj.Seq2Seq, 'transformer'), (aj.Transformer, 'rnn')):
    cfg = aj.ModelConfig(src_vocab=7, tgt_vocab=7, arch=arch)
    with pytest.raises(ValueError, match=rf"aj.{cls.__name__} is the model of model.arch=.*"
                                         rf"model.arch='{arch}': aj.build\(cfg"):
      cls(cfg, rngs=nnx.Rngs(0))
    assert type(aj.build(cfg, rngs=nnx.Rngs(0))).__name__ == (
        'Transformer' if arch == 'transformer' else 'Seq2Seq')


def test_from_dict_rejects_unknown_fields():
  with pytest.raises(ValueError, match='hiden'):
    aj.ModelConfig.from_dict({'src_vocab': 5, 'tgt_vocab': 5, 'hiden': 3})


@pytest.mark.parametrize('decoder', DECODERS)
def test_memorises_16_random_pairs(decoder):
  """Each decoder with the additive score learns 16 random pairs to 100% token accuracy."""
  rng = np.random.default_rng(0)
  n, s, t = 16, 7, 6
  src = rng.integers(4, V_SRC, (n, s)).astype(np.int32)
  src[:, -1] = 2
  body = rng.integers(4, V_TGT, (n, t - 1)).astype(np.int32)
  tgt_in = np.concatenate([np.ones((n, 1), np.int32), body], 1)
  tgt_out = np.concatenate([body, np.full((n, 1), 2, np.int32)], 1)
  cfg = config('additive', decoder, 'gru', emb_dim=32, enc_hidden=32, dec_hidden=64,
               attn_dim=32)
  model = build(cfg)
  opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

  @nnx.jit
  def train_step(model, opt):
    def loss_fn(model):
      logits, _ = model(src, tgt_in)
      return optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out).mean(), logits
    (loss, logits), g = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    opt.update(model, g)
    return loss, jnp.mean(jnp.argmax(logits, -1) == tgt_out)

  for _ in range(150):
    loss, acc = train_step(model, opt)
  logits, _ = forward(model, src, tgt_in)
  acc = float(np.mean(np.argmax(np.asarray(logits), -1) == tgt_out))
  assert acc == 1.0, f'{decoder}: token accuracy {acc:.3f} after 150 steps (loss {loss:.4f})'


def test_every_model_implements_the_contract():
  """aj.Seq2Seq and aj.Transformer are contract.EncoderDecoder's: each overrides the methods
  the base leaves to it; only the Transformer's carry grows (its cache_lengths)."""
  from attention_jax.models import contract  # pylint: disable=g-import-not-at-top
  base = contract.EncoderDecoder
  required = ('forward', 'source_mask', 'encode', 'start', 'step')   # the base raises
  for name in required:
    with pytest.raises(NotImplementedError):
      getattr(base(), name)(*[None] * (getattr(base, name).__code__.co_argcount - 1))
  for cls in (aj.Seq2Seq, aj.Transformer):
    assert issubclass(cls, base)
    assert all(getattr(cls, n) is not getattr(base, n) for n in required), cls
  assert aj.Seq2Seq.cache_lengths is base.cache_lengths
  assert aj.Transformer.cache_lengths is not base.cache_lengths


def test_linear_is_nnx_linear_as_one_2d_product_and_its_weight_gradient_is_row_major():
  """layers.Linear: the outputs and gradients of nnx.Linear for 1-, 2- and 3-D inputs (a
  NumPy reference), the same parameters; on the CPU its weight gradient from [B, T, in] is
  X^T dY (contracting dims 0 and 0), not the A^T B^T that XLA lowers the 3-D contraction to
  at a quarter of the speed on an AVX2 CPU (issue 87)."""
  from attention_jax.models import layers
  ours = layers.Linear(6, 5, rngs=nnx.Rngs(0))
  ref = nnx.Linear(6, 5, rngs=nnx.Rngs(0))
  assert jax.tree.map(jnp.shape, nnx.state(ours)) == jax.tree.map(jnp.shape, nnx.state(ref))
  w, b = np.asarray(ref.kernel[...]), np.asarray(ref.bias[...])
  for shape in ((6,), (4, 6), (3, 4, 6)):
    x = np.random.default_rng(len(shape)).normal(size=shape).astype(np.float32)
    np.testing.assert_allclose(ours(jnp.asarray(x)), x @ w + b, rtol=1e-5, atol=1e-5)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4, 6)), jnp.float32)
  graphdef, state = nnx.split(ours)
  loss = lambda state: jnp.sum(jnp.tanh(nnx.merge(graphdef, state)(x)))
  g = jax.grad(loss)(state)['kernel'][...]
  dy = 1 - np.tanh(np.asarray(x) @ w + b) ** 2                              # [3, 4, 5]
  np.testing.assert_allclose(g, np.einsum('btk,btm->km', np.asarray(x), dy), rtol=1e-4,
                             atol=1e-5)
  if jax.default_backend() == 'cpu':   # (nnx.Linear: the A^T B^T form)
    hlo = jax.jit(jax.grad(loss)).lower(state).compile().as_text()
    dots = [l for l in hlo.splitlines() if ' dot(' in l]
    assert len(dots) == 2 and not any(
        'lhs_contracting_dims={0}, rhs_contracting_dims={1}' in l for l in dots), dots
