"""Beam search: beam 1 is greedy on real models; on hand-built Markov chains it escapes greedy's
trap, returns the score computed by hand, and finds the exact optimum; padding does not change
it; weights are distributions over the real source positions; jit equals no-jit."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax.data.tokenizers import BOS, EOS, PAD
from attention_jax.decoding import beam, greedy, inference
from attention_jax.models import contract

A, B = 3, 4          # the chain's two content tokens (V = 5: PAD, BOS, EOS, A, B)
V = 5
MAX_LEN = 5


# ---- a hand-built model: a second-order Markov chain ---------------------------------------
def _dist(**p):
  """A next-token distribution over the 5 tokens; what is not named shares the rest."""
  ids = dict(pad=PAD, bos=BOS, eos=EOS, a=A, b=B)
  d = np.full(V, np.nan)
  for name, prob in p.items():
    d[ids[name]] = prob
  rest = np.isnan(d)
  if rest.any():
    d[rest] = (1.0 - np.nansum(d)) / rest.sum()
  return d


def _tables():
  """P[table, y_{t-2}, y_{t-1}, y_t] (BOS, BOS before the first token); a sentence's table is
  its first source token mod 5."""
  p = np.tile(_dist(), (5, V, V, 1))
  # 0: greedy takes A (0.55), whose continuations are poor; B then EOS is better.
  p[0, :, :] = _dist(pad=.005, bos=.005, eos=.01, a=.55, b=.43)
  p[0, :, A] = _dist(pad=.01, bos=.01, eos=.36, a=.33, b=.29)
  p[0, :, B] = _dist(pad=.01, bos=.01, eos=.9, a=.04, b=.04)
  # 1: the trap is two steps deep and second order: (B, A) ends well, (A, A) does not; B A
  # stays second of the alive beams until it ends (so its weights must follow its beam).
  p[1, :, :] = _dist(pad=.01, bos=.01, eos=.02, a=.56, b=.4)
  p[1, :, A] = _dist(pad=.01, bos=.01, eos=.18, a=.5, b=.3)
  p[1, BOS, B] = _dist(pad=.01, bos=.01, eos=.01, a=.6)
  p[1, B, A] = _dist(pad=.01, bos=.01, eos=.96, a=.01, b=.01)
  p[1, A, A] = _dist(pad=.01, bos=.01, eos=.30, a=.35, b=.33)
  p[1, A, B] = _dist(pad=.01, bos=.01, eos=.30, a=.33, b=.35)
  # 2: a random chain.
  p[2] = np.random.default_rng(0).dirichlet(np.ones(V), size=(V, V))
  # 3: (almost) never ends: every hypothesis reaches max_len without EOS.
  p[3] = _dist(eos=1e-4, a=.6)
  # 4: EOS at once (0.45) beats A A EOS (0.42) on log P, but not length-normalised (alpha 0.6).
  p[4, :, :] = _dist(pad=.02, bos=.02, eos=.45, a=.44, b=.07)
  p[4, :, A] = _dist(a=.98)
  p[4, A, A] = _dist(eos=.98)
  p[4, :, B] = _dist(b=.96)
  return np.log(p)


LOGP = _tables()                                      # [5, V, V, V] float64


class Chain(contract.EncoderDecoder):
  """start/step like `Seq2Seq`: carry = y_{t-2} [B]; memory = (mask [B, S], table [B], an
  empty [B, S, 0]); weights [B, S] ∝ exp(-(s - y_{t-1})² / 2) over the real source positions."""

  def __init__(self):
    self.logp = jnp.asarray(LOGP, jnp.float32)

  def source_mask(self, src):
    return src != PAD

  def start(self, src, max_len=None):
    b, s = src.shape
    mask = (src != PAD).astype(jnp.float32)
    return jnp.full((b,), BOS, jnp.int32), (mask, src[:, 0] % 5, jnp.zeros((b, s, 0)))

  def step(self, carry, y_prev, mem):
    # beam search passes the memory of B sentences with rows [B*K] (K adjacent per sentence)
    mask, table, _ = (jnp.repeat(x, carry.shape[0] // x.shape[0], axis=0) for x in mem)
    logp = self.logp[table, carry, y_prev]                               # [B, V]
    pos = jnp.arange(mask.shape[1], dtype=jnp.float32)
    w = mask * jnp.exp(-0.5 * (pos[None, :] - y_prev[:, None]) ** 2)     # [B, S]
    return y_prev, logp, w / jnp.maximum(w.sum(-1, keepdims=True), 1e-9)


# rows: tables 0, 1, a filler row, tables 2, 3, 4
CHAIN_SRC = np.array([[5, 9, 9, 0, 0], [6, 8, 0, 0, 0], [0, 0, 0, 0, 0],
                      [7, 5, 8, 9, 6], [8, 9, 0, 0, 0], [9, 6, 7, 0, 0]], np.int32)
TABLE = CHAIN_SRC[:, 0] % 5
TRAPS = [0, 1]
REAL = [0, 1, 3, 4, 5]


def lp(n, alpha):
  return ((5.0 + n) / 6.0) ** alpha


def hand_score(table, tokens, alpha, max_len=MAX_LEN):
  """NumPy: log P / lp of a returned row (up to its EOS, or all max_len tokens)."""
  y = list(tokens)
  y = y[:y.index(EOS) + 1] if EOS in y else y
  prev = (BOS, BOS)
  total = 0.0
  for tok in y:
    total += LOGP[table, prev[0], prev[1], tok]
    prev = (prev[1], tok)
  return total / lp(len(y) if EOS in y else max_len, alpha)


def hand_weights(src_row, tokens):
  """NumPy: the chain's weights at each real step of a returned row, zero after EOS."""
  mask = (src_row != PAD).astype(np.float64)
  w = np.zeros((len(tokens), len(src_row)))
  y = list(tokens)
  n = y.index(EOS) + 1 if EOS in y else len(y)
  for t, prev in enumerate(([BOS] + y)[:n]):
    w[t] = mask * np.exp(-0.5 * (np.arange(len(src_row)) - prev) ** 2)
    w[t] /= w[t].sum()
  return w


def best_by_search(table, alpha, max_len=MAX_LEN):
  """NumPy: the best-scoring sequence ending in EOS, by enumerating all of them."""
  best = (-np.inf, None)
  for n in range(max_len):
    for body in itertools.product((A, B), repeat=n):   # PAD, BOS are never emitted
      y = [*body, EOS]
      best = max(best, (hand_score(table, y, alpha, max_len), y))
  return best


@functools.cache
def chain_beam(k, alpha, max_len=MAX_LEN):
  return jax.jit(functools.partial(beam.beam_search, Chain(), beam_size=k, max_len=max_len,
                                   alpha=alpha))


@functools.cache
def chain_greedy(max_len=MAX_LEN):
  return jax.jit(lambda src: greedy.greedy(Chain(), src, max_len))


def padded(y):
  return list(y) + [PAD] * (MAX_LEN - len(y))


@pytest.mark.parametrize('alpha', [0.6, 0.0])
def test_beam_escapes_greedy_trap_and_scores_by_hand(alpha):
  g_tok, _ = map(np.asarray, chain_greedy()(CHAIN_SRC))
  tok, score, w = map(np.asarray, chain_beam(2, alpha)(CHAIN_SRC))
  assert tok.shape == (6, MAX_LEN) and score.shape == (6,) and w.shape == (6, MAX_LEN, 5)
  assert tok.dtype == np.int32 and score.dtype == np.float32 and w.dtype == np.float32
  for row in TRAPS:
    assert not np.array_equal(tok[row], g_tok[row]), row
    assert hand_score(TABLE[row], tok[row], alpha) > hand_score(TABLE[row], g_tok[row], alpha) + .1
  np.testing.assert_array_equal(tok[0], padded([B, EOS]))
  np.testing.assert_array_equal(tok[1], padded([B, A, EOS]))
  # the length penalty: A A EOS wins only when normalised; greedy stops at once either way
  np.testing.assert_array_equal(tok[5], padded([A, A, EOS] if alpha else [EOS]))
  np.testing.assert_array_equal(g_tok[5], padded([EOS]))
  for row in (0, 1, 5):  # here beam 2 finds the exact optimum
    best, y = best_by_search(TABLE[row], alpha)
    np.testing.assert_array_equal(tok[row], padded(y))
    np.testing.assert_allclose(score[row], best, rtol=1e-5)
  for row in REAL:
    np.testing.assert_allclose(score[row], hand_score(TABLE[row], tok[row], alpha), rtol=1e-5)
    np.testing.assert_allclose(w[row], hand_weights(CHAIN_SRC[row], tok[row]), atol=1e-6)
  assert score[3] <= best_by_search(TABLE[3], alpha)[0] + 1e-5
  # the row that never ends: no finished hypothesis, so the best alive one, scored at max_len
  assert EOS not in tok[4] and PAD not in tok[4]
  assert (tok[2] == PAD).all() and (w[2] == 0).all() and score[2] == 0
  assert np.isfinite(score).all()


def test_larger_beams_never_score_lower_than_beam_one():
  for alpha in (0.6, 0.0):
    _, s1, _ = chain_beam(1, alpha)(CHAIN_SRC)
    for k in (2, 3, 4):
      tok, sk, w = map(np.asarray, chain_beam(k, alpha)(CHAIN_SRC))
      assert (sk[TRAPS] > np.asarray(s1)[TRAPS]).all(), (alpha, k)
      assert (sk >= np.asarray(s1) - 1e-6).all(), (alpha, k)
      for row in REAL:  # whichever beams the winner went through
        table = TABLE[row]
        np.testing.assert_allclose(sk[row], hand_score(table, tok[row], alpha), rtol=1e-5)
        np.testing.assert_allclose(w[row], hand_weights(CHAIN_SRC[row], tok[row]), atol=1e-6)


def test_beam_one_is_greedy_on_the_chain_and_jit_equals_no_jit():
  g_tok, g_w = chain_greedy()(CHAIN_SRC)
  tok, score, w = chain_beam(1, 0.6)(CHAIN_SRC)
  np.testing.assert_array_equal(np.asarray(tok), np.asarray(g_tok))
  np.testing.assert_allclose(np.asarray(w), np.asarray(g_w), atol=1e-6)
  for row in REAL:
    np.testing.assert_allclose(score[row], hand_score(TABLE[row], g_tok[row], 0.6), rtol=1e-5)
  tok2, score2, w2 = beam.beam_search(Chain(), jnp.asarray(CHAIN_SRC), beam_size=3,
                                      max_len=MAX_LEN, alpha=0.6)
  tok3, score3, w3 = chain_beam(3, 0.6)(CHAIN_SRC)
  np.testing.assert_array_equal(np.asarray(tok2), np.asarray(tok3))
  np.testing.assert_allclose(np.asarray(score2), np.asarray(score3), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(w2), np.asarray(w3), atol=1e-6)


class Smoothed(contract.EncoderDecoder):
  """The optimum of label smoothing 0.1 for one target: at step t, TARGET[t] has probability
  0.9 + 0.1/V and every other symbol (PAD, BOS and EOS too) 0.1/V, whatever the prefix. A
  confident model with ties below its choice: the case where beam search once stopped on K
  truncated outputs (a Transformer's beam 5 fell to 67% exact match where greedy had 99%)."""

  TARGET = (A, B, A, A, B, B, A, B, EOS)

  def source_mask(self, src):
    return src != PAD

  def start(self, src, max_len=None):
    return jnp.zeros((src.shape[0],), jnp.int32), (src != PAD).astype(jnp.float32)

  def step(self, t, y_prev, mask):
    n = t.shape[0]
    mask = jnp.repeat(mask, n // mask.shape[0], axis=0)                  # [N, S]
    target = jnp.asarray(self.TARGET)[jnp.minimum(t, len(self.TARGET) - 1)]
    p = jnp.full((n, V), 0.1 / V).at[jnp.arange(n), target].add(0.9)
    return t + 1, jnp.log(p), mask / mask.sum(-1, keepdims=True)

  @classmethod
  def log_p(cls, tokens):
    y = list(tokens)
    y = y[:y.index(EOS) + 1] if EOS in y else y
    return sum(np.log(0.9 + 0.1 / V if tok == cls.TARGET[min(t, 8)] else 0.1 / V)
               for t, tok in enumerate(y))


@pytest.mark.parametrize('k', [2, 3, 5])
def test_a_confident_model_with_ties_below_gets_its_output_from_every_beam(k):
  """Beam k returns the model's output, scored as by hand, never below greedy; no PAD or BOS
  in any hypothesis (they tied with EOS and the other unlikely symbols)."""
  src = jnp.asarray([[5, 6, 7], [8, 9, 3]], jnp.int32)
  max_len, alpha, target = 12, 0.6, np.asarray(Smoothed.TARGET)
  g_tok, _ = greedy.greedy(Smoothed(), src, max_len)
  np.testing.assert_array_equal(np.asarray(g_tok)[:, :9], np.tile(target, (2, 1)))
  greedy_score = Smoothed.log_p(target) / lp(9, alpha)
  tok, score, _ = jax.jit(functools.partial(beam.beam_search, Smoothed(), beam_size=k,
                                            max_len=max_len, alpha=alpha, nbest=k))(src)
  tok, score = np.asarray(tok), np.asarray(score)
  np.testing.assert_array_equal(tok[:, 0, :9], np.tile(target, (2, 1)))
  np.testing.assert_allclose(score[:, 0], greedy_score, rtol=1e-5)
  for row in range(2):
    for j in range(k):
      y = list(tok[row, j])
      n = y.index(EOS) + 1 if EOS in y else max_len
      assert PAD not in y[:n] and BOS not in y[:n], y
      np.testing.assert_allclose(score[row, j], Smoothed.log_p(y) / lp(n, alpha), rtol=1e-5)


def test_bad_arguments_fail_clearly():
  src = jnp.asarray(CHAIN_SRC)
  with pytest.raises(ValueError, match='beam_size'):
    beam.beam_search(Chain(), src, beam_size=0, max_len=3)
  with pytest.raises(ValueError, match='max_len'):
    beam.beam_search(Chain(), src, beam_size=2, max_len=0)
  with pytest.raises(ValueError, match='alpha'):
    beam.beam_search(Chain(), src, beam_size=2, max_len=3, alpha=-1.0)


# ---- real (tiny, randomly initialised) models ------------------------------------------------
V_SRC, V_TGT, L = 11, 9, 7
SRC = np.array([[5, 6, 7, 8, 2, 0], [4, 9, 2, 0, 0, 0], [0, 0, 0, 0, 0, 0],
                [3, 2, 0, 0, 0, 0], [10, 4, 6, 5, 7, 2]], np.int32)


def tiny(decoder, seed=0):
  cfg = aj.ModelConfig(src_vocab=V_SRC, tgt_vocab=V_TGT, emb_dim=8, enc_hidden=6,
                       dec_hidden=12, attn_dim=5, max_src_len=16, decoder=decoder)
  return nnx.split(aj.Seq2Seq(cfg, rngs=nnx.Rngs(seed)))


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5))
def beam_step(graphdef, params, src, k, max_len, alpha):
  return beam.beam_search(nnx.merge(graphdef, params), src, beam_size=k, max_len=max_len,
                          alpha=alpha)


@functools.partial(jax.jit, static_argnums=(0, 3))
def greedy_step(graphdef, params, src, max_len):
  return greedy.greedy(nnx.merge(graphdef, params), src, max_len)


@functools.partial(jax.jit, static_argnums=0)
def log_prob(graphdef, params, src, tokens):
  """Teacher-forced log P of each row of tokens [B, L] (up to its EOS, or all L)."""
  tgt_in = jnp.concatenate([jnp.full_like(tokens[:, :1], BOS), tokens[:, :-1]], 1)
  logits, _ = nnx.merge(graphdef, params)(src, tgt_in)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1)[..., 0]
  real = jnp.cumsum(tokens == EOS, axis=1) - (tokens == EOS) == 0    # up to and with EOS
  return jnp.sum(logp * real, axis=1)


@pytest.mark.parametrize('decoder', sorted(aj.DECODERS))
def test_beam_one_is_greedy_on_a_real_model(decoder):
  ends = set()
  for seed in (0, 2):  # same graph, new parameters: no recompilation
    graphdef, params = tiny(decoder, seed)
    g_tok, g_w = map(np.asarray, greedy_step(graphdef, params, SRC, L))
    logp = np.asarray(log_prob(graphdef, params, SRC, jnp.asarray(g_tok)))
    n = np.where((g_tok == EOS).any(1), (g_tok == EOS).argmax(1) + 1, L)   # |Y|
    real = (SRC != PAD).any(1)
    ends |= {'eos' if (g_tok[r] == EOS).any() else 'max_len' for r in np.flatnonzero(real)}
    for alpha in (0.6, 0.0):
      tok, score, w = map(np.asarray, beam_step(graphdef, params, SRC, 1, L, alpha))
      np.testing.assert_array_equal(tok, g_tok)
      np.testing.assert_allclose(w, g_w, atol=1e-6)
      np.testing.assert_allclose(score[real], (logp / lp(n, alpha))[real], rtol=1e-4, atol=1e-5)
      assert score[2] == 0 and np.isfinite(score).all()
  assert ends == {'eos', 'max_len'}, f'pick seeds whose outputs cover both endings: {ends}'


@pytest.mark.parametrize('decoder', sorted(aj.DECODERS))
def test_padding_does_not_change_beam_outputs_and_weights_are_distributions(decoder):
  graphdef, params = tiny(decoder, seed=2)
  tok, score, w = map(np.asarray, beam_step(graphdef, params, SRC, 3, L, 0.6))
  src2 = np.pad(SRC, ((0, 0), (0, 4)))
  tok2, score2, w2 = map(np.asarray, beam_step(graphdef, params, src2, 3, L, 0.6))
  np.testing.assert_array_equal(tok2, tok)
  np.testing.assert_allclose(score2, score, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w2[:, :, :SRC.shape[1]], w, atol=1e-6)
  assert (w2[:, :, SRC.shape[1]:] == 0).all()
  assert np.isfinite(score).all()
  for row in np.flatnonzero((SRC != PAD).any(1)):
    n = (tok[row] == EOS).argmax() + 1 if (tok[row] == EOS).any() else L   # real steps
    s = (SRC[row] != PAD).sum()
    np.testing.assert_allclose(w[row, :n].sum(-1), 1.0, rtol=1e-5)
    assert (w[row, :n, s:] == 0).all() and (w[row, n:] == 0).all()
    assert (tok[row, n:] == PAD).all()
  assert (tok[2] == PAD).all() and (w[2] == 0).all() and score[2] == 0


@pytest.mark.parametrize('k', [1, 3])
def test_an_output_does_not_depend_on_the_batch_it_is_decoded_in(k):
  """With the run's length factor each sentence stops at its own limit (greedy.output_limits):
  a batch padded wider, as beside a longer sentence, changes no output, also of outputs that
  run to their limit without EOS (they used to run to the batch's limit)."""
  from attention_jax.decoding import inference
  graphdef, params = tiny('bahdanau', seed=2)
  fn = inference.make_decoder(graphdef, beam=k)
  factor, wide = 1.0, np.pad(SRC, ((0, 0), (0, 6)))
  narrow_tok = np.asarray(fn(params, SRC, greedy.max_output_len(6, factor), factor)[0])
  wide_tok = np.asarray(fn(params, wide, greedy.max_output_len(12, factor), factor)[0])
  np.testing.assert_array_equal(wide_tok[:, :narrow_tok.shape[1]], narrow_tok)
  assert (wide_tok[:, narrow_tok.shape[1]:] == PAD).all()
  n = (SRC != PAD).sum(1)
  unended = [r for r in range(len(SRC)) if n[r] and EOS not in narrow_tok[r]]
  assert unended or k > 1, 'pick a seed whose greedy output runs to its limit'
  for r in unended:
    assert (narrow_tok[r] != PAD).sum() == int(factor * n[r]) + 10


@pytest.mark.parametrize('arch', sorted(aj.DECODERS) + ['transformer'])
def test_scored_greedy_is_beam_one_with_nbest_in_tokens_scores_and_weights(arch):
  """make_decoder(beam=1, nbest=1) decodes with greedy.greedy_scored, a smaller loop than
  beam search: it gives beam_search(beam_size=1, nbest=1)'s tokens, weights and scores
  (log P / lp, each row stopping at its own limit), for both length penalties; filler rows
  score 0. Sentences both ending in EOS and stopped at their limit are covered."""
  limit = jnp.asarray([7, 7, 7, 4, 7], jnp.int32)   # [B]: each row's own output limit
  ends = set()
  for seed, alpha in itertools.product((0, 2), (0.6, 0.0)):
    if arch == 'transformer':   # untrained, it never ends: EOS raised to end some rows
      m = aj.build(aj.ModelConfig(src_vocab=V_SRC, tgt_vocab=V_TGT, arch='transformer',
                                  d_model=16, heads=2, ff_dim=24, transformer_layers=1),
                   rngs=nnx.Rngs(seed))
      m.out.bias[...] = m.out.bias[...].at[EOS].add(seed)
      graphdef, params = nnx.split(m)
    else:
      graphdef, params = tiny(arch, seed)
    want = jax.jit(lambda p, s, a=alpha, g=graphdef: beam.beam_search(
        nnx.merge(g, p), s, beam_size=1, max_len=L, alpha=a, nbest=1, limit=limit))(
            params, jnp.asarray(SRC))
    got = jax.jit(lambda p, s, a=alpha, g=graphdef: greedy.greedy_scored(
        nnx.merge(g, p), s, L, limit, a))(params, jnp.asarray(SRC))
    (wt, ws, ww), (gt, gs, gw) = map(np.asarray, want), map(np.asarray, got)
    assert gt.shape == wt.shape and gs.shape == ws.shape and gw.shape == ww.shape
    np.testing.assert_array_equal(gt, wt)
    np.testing.assert_allclose(gs, ws, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gw, ww, atol=1e-7)
    assert gs[2, 0] == 0 and (gt[2] == PAD).all()
    ends |= {'eos' if (gt[r, 0] == EOS).any() else 'limit' for r in (0, 1, 3, 4)}
  assert ends == {'eos', 'limit'}, ends


@pytest.mark.parametrize('arch', ['bahdanau', 'transformer'])
def test_decoding_without_weights_gives_the_same_tokens_and_scores(arch):
  """make_decoder(with_weights=False), as translate() decodes: the same tokens and scores as
  with weights for greedy, scored greedy, beam search and its n-best, and weights with a last
  axis of 0 (none kept while decoding)."""
  if arch == 'transformer':
    graphdef, params = nnx.split(aj.build(aj.ModelConfig(
        src_vocab=V_SRC, tgt_vocab=V_TGT, arch='transformer', d_model=16, heads=2, ff_dim=24,
        transformer_layers=1), rngs=nnx.Rngs(0)))
  else:
    graphdef, params = tiny(arch, 1)
  src = jnp.asarray(SRC)
  for beam_size, nbest in ((1, 0), (1, 1), (3, 0), (3, 2)):
    one = jax.local_devices()[:1]
    want = inference.make_decoder(graphdef, beam_size, 0.6, nbest, one)(params, src, L, 2.0)
    got = inference.make_decoder(graphdef, beam_size, 0.6, nbest, one,
                                 with_weights=False)(params, src, L, 2.0)
    assert len(got) == len(want)
    for g, w in zip(got[:-1], want[:-1]):   # tokens (and scores)
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert got[-1].shape == want[-1].shape[:-1] + (0,) and want[-1].shape[-1] == SRC.shape[1]
