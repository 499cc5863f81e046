"""Ensembles (ensemble.py): an ensemble of one model is that model, of two equal models either
of them; beam search on an RNN + Transformer ensemble scores each n-best hypothesis as the
teacher-forced ensemble does (the mean of the members' log-probabilities, not renormalised) and
greedy takes its argmax; weights are the members' mean; runs of other tokenizers and empty
lists are refused in one line; aj.load([run, run]) translates as aj.load(run)."""

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax.analysis import saved_run
from attention_jax.data import tokenizers
from attention_jax.decoding import greedy, inference
from attention_jax.loaded import ensemble, loading, translator
from attention_jax.symbols import BOS, EOS, PAD
from attention_jax.training import train
from experiments.configs import reverse

import helpers

V_SRC, V_TGT = 11, 9
L = 20           # the output limit (max_len) of the in-process models
ALPHA = 0.6
SRC = np.array([[5, 6, 7, 8, 2, 0], [4, 9, 2, 0, 0, 0], [0, 0, 0, 0, 0, 0],
                [3, 2, 0, 0, 0, 0], [10, 4, 6, 5, 7, 2]], np.int32)
REAL = (SRC != PAD).any(1)


def rnn(seed=0):
  return aj.build(aj.ModelConfig(src_vocab=V_SRC, tgt_vocab=V_TGT, emb_dim=8, enc_hidden=6,
                                 dec_hidden=12, attn_dim=5), rngs=nnx.Rngs(seed))


def transformer(seed=0):
  return aj.build(aj.ModelConfig(src_vocab=V_SRC, tgt_vocab=V_TGT, arch='transformer',
                                 d_model=16, heads=2, ff_dim=24, transformer_layers=1),
                  rngs=nnx.Rngs(seed))


@functools.cache
def decoder(graphdef, beam: int, nbest: int):
  """One compiled decoder per model structure (models of one config share it)."""
  return inference.make_decoder(graphdef, beam, ALPHA, nbest)


def run_decoder(model, beam: int, nbest: int = 0, max_len: int = L):
  """inference.make_decoder on `model` (merged inside jit) over SRC: greedy (beam 1, nbest 0)
  -> (tokens, weights); else -> (tokens, scores, weights) of the n-best."""
  graphdef, state = nnx.split(model)
  fn = decoder(graphdef, beam, nbest)
  return [np.asarray(x) for x in fn(nnx.to_pure_dict(state), SRC, max_len)]


def assert_same_decoding(a, b):
  """Greedy tokens and weights, and beam 3's 3-best tokens, scores and weights, of a and b."""
  (ga, wa), (gb, wb) = run_decoder(a, 1), run_decoder(b, 1)
  np.testing.assert_array_equal(ga, gb)
  np.testing.assert_allclose(wa, wb, atol=1e-6)
  (ta, sa, va), (tb, sb, vb) = run_decoder(a, 3, 3), run_decoder(b, 3, 3)
  np.testing.assert_array_equal(ta, tb)
  np.testing.assert_allclose(sa, sb, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(va, vb, atol=1e-6)
  assert np.isfinite(sa[REAL]).all() and (ta[REAL, 0] != PAD).any()


def test_an_ensemble_of_one_decodes_as_that_model():
  m = rnn(seed=1)
  assert_same_decoding(m, ensemble.Ensemble([m]))


def test_an_ensemble_of_two_equal_models_decodes_as_either():
  """Two RNNs of one seed (separate modules, equal parameters) decode as one of them."""
  m = rnn(seed=3)
  assert_same_decoding(m, ensemble.Ensemble([rnn(seed=3), rnn(seed=3)]))


@functools.cache
def members():
  """(graphdef, params) of an RNN and a Transformer of other seeds."""
  return nnx.split(rnn(seed=0)), nnx.split(transformer(seed=2))


@functools.partial(jax.jit, static_argnums=0)
def _teacher_forced(graphdef, params, src, tokens):
  """logits [N, L, V] and weights [N, L, S] of a teacher-forced pass over tokens."""
  tgt_in = jnp.concatenate([jnp.full_like(tokens[:, :1], BOS), tokens[:, :-1]], 1)
  return nnx.merge(graphdef, params)(src, tgt_in)


def _members_teacher_forced(src, tokens):
  """Each member's log P of each token [2, N, L], all its log-probabilities [2, N, L, V] and
  its weights [2, N, L, S]."""
  outs = [_teacher_forced(g, p, src, tokens) for g, p in members()]
  full = np.stack([np.asarray(jax.nn.log_softmax(o[0])) for o in outs])
  logp = np.take_along_axis(full, np.broadcast_to(tokens[None, ..., None], full.shape[:3] + (1,)),
                            -1)[..., 0]
  return logp, full, np.stack([np.asarray(o[1]) for o in outs])


def _real_steps(tokens: np.ndarray) -> np.ndarray:
  """[N, L] -> [N, L] bool: the positions up to and with the first EOS (all L without one)."""
  return np.cumsum(tokens == EOS, axis=1) - (tokens == EOS) == 0


def test_beam_scores_are_the_teacher_forced_ensemble_and_greedy_its_argmax():
  """RNN + Transformer: each of beam 3's 3-best hypotheses scores sum_t mean_m log p_m(y_t)
  / lp(|Y|) (no renormalisation), greedy's token at each step is the argmax of that mean over
  the emittable symbols, and greedy's weights are the members' mean weights (rows sum to 1);
  the ensemble's own teacher-forced pass gives the same means."""
  model = ensemble.Ensemble([nnx.merge(g, p) for g, p in members()])
  # an output limit at which the Transformer's KV cache grows in segments: decoding restarts
  # there, resizing its carry (the RNN's as is)
  n = next((n for n in range(L, 1024, 8) if len(model.members[1].cache_lengths(n)) > 1), None)
  assert n, 'no output limit below 1024 decodes a Transformer in segments: raise this one'
  assert model.cache_lengths(n) == model.members[1].cache_lengths(n)
  assert model.members[0].cache_lengths(n) == (n,)
  tok, scores, _ = run_decoder(model, 3, 3, n)                 # [B, 3, n], [B, 3]
  greedy_ids, weights = run_decoder(model, 1, 0, n)             # [B, n], [B, n, S]
  rows = np.flatnonzero(REAL)
  r = len(rows)
  # one teacher-forced batch: the R*3 beam hypotheses, then the R greedy outputs
  hyps = np.concatenate([tok[rows].reshape(-1, n), greedy_ids[rows]])      # [R*4, n]
  src = np.concatenate([np.repeat(SRC[rows], 3, axis=0), SRC[rows]])
  logp, full, w = _members_teacher_forced(src, hyps)
  real = _real_steps(hyps)
  assert not (hyps[real] == PAD).any() and not (hyps == BOS).any()
  lp = ((5.0 + real.sum(1)) / 6.0) ** ALPHA
  expected = (logp.mean(0) * real).sum(1) / lp                 # [R*4]
  np.testing.assert_allclose(scores[rows].ravel(), expected[:3 * r], rtol=1e-5, atol=1e-5)
  assert not np.allclose(logp[0], logp[1], atol=1e-2)          # the members do differ

  g, real, w, mean = greedy_ids[rows], real[3 * r:], w[:, 3 * r:], full.mean(0)
  ens_logits, ens_w = map(np.asarray, _teacher_forced(*nnx.split(model), src, hyps))
  np.testing.assert_allclose(ens_logits, mean, atol=1e-5)       # the mean, not renormalised
  mean, ens_w = mean[3 * r:], ens_w[3 * r:]                     # greedy's rows: [R, L, ...]
  best = np.asarray(jnp.argmax(greedy.emittable(jnp.asarray(mean.reshape(-1, V_TGT))), -1))
  np.testing.assert_array_equal(best.reshape(g.shape)[real], g[real])
  assert weights.shape == (len(SRC), n, SRC.shape[1])
  np.testing.assert_allclose(weights[rows][real], w.mean(0)[real], atol=1e-5)
  np.testing.assert_allclose(weights[rows][real].sum(-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(ens_w[real], w.mean(0)[real], atol=1e-6)


def test_an_empty_ensemble_is_refused():
  with pytest.raises(ValueError, match='at least one model, got none'):
    ensemble.Ensemble([])
  with pytest.raises(ValueError, match=r'^an ensemble needs at least one run, got an empty list'):
    aj.load([])
  with pytest.raises(TypeError, match='loading.load reads one run'):
    loading.load(['a', 'b'])


# ---- saved runs -----------------------------------------------------------------------------
@pytest.fixture(scope='module')
def run(tmp_path_factory, data_dir):
  """A reverse smoke run of 2 steps whose test results were decoded greedily: (workdir, the
  results of its test split)."""
  workdir = str(tmp_path_factory.mktemp('ensemble') / 'reverse')
  summary = train.train_and_evaluate(
      helpers.smoke(reverse, data_dir, **{'train.steps': 2, 'eval.beam_size': 1}), workdir)
  return workdir, summary['results']['test']


TEXTS = ['a b c', '', 'tsrq', 'abcabca']   # one length bucket (8 tokens): one compile


def test_a_loaded_ensemble_of_one_run_twice_translates_as_the_run(run):
  run, _ = run
  one, two = aj.load(run), aj.load([run, run])
  assert type(aj.load([run])) is translator.Translator                # a list of one: loading.load
  assert isinstance(two, ensemble.EnsembleTranslator) and two.step == (one.step, one.step)
  outputs = lambda t: [[out for out, _ in h] for h in t.translate(TEXTS, beam=3, nbest=2)]
  assert outputs(two) == outputs(one)
  for a, b in zip(one.decode(TEXTS, beam=3, nbest=2), two.decode(TEXTS, beam=3, nbest=2)):
    assert a.outputs == b.outputs and a.src_tokens == b.src_tokens
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-5)
    for wa, wb in zip(a.weights, b.weights):                   # [T, S] each
      np.testing.assert_allclose(wb, wa, atol=1e-6)
      np.testing.assert_allclose(wb.sum(-1), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match='saliency of an ensemble'):
    two.saliency('a b c')


def test_an_ensemble_evaluation_never_writes_into_its_runs(run, tmp_path):
  """Printed only, or written into `out`; its figures are the run's own (greedy)."""
  run, results = run
  before = sorted(os.listdir(run))
  printed = saved_run.evaluate_run([run, run], beam=1, num_heatmaps=0, verbose=False)
  report = saved_run.evaluate_run([run, run], beam=1, num_heatmaps=0, verbose=False,
                                 out=str(tmp_path / 'ens'))
  assert sorted(os.listdir(run)) == before
  assert 'eval_test_beam1_a0.6.json' in os.listdir(tmp_path / 'ens')
  for k in ('sentences', 'exact_match', 'bleu', 'chrf'):
    assert printed[k] == report[k] == pytest.approx(results[k], abs=1e-6), k
  assert report['loss'] == pytest.approx(results['loss'], rel=1e-4)


@pytest.mark.parametrize('side', ['src', 'tgt'])
def test_runs_of_other_tokenizers_are_refused_in_one_line_naming_both(run, tmp_path, side):
  run, _ = run
  other = str(tmp_path / 'other')
  shutil.copytree(run, other, ignore=shutil.ignore_patterns('.lock'))
  tok_dir = os.path.join(other, 'tokenizers', side)
  tok = tokenizers.load_tokenizer(tok_dir)
  tokenizers.CharTokenizer(tok.symbols[::-1]).save(tok_dir)     # same size, other ids
  with pytest.raises(ensemble.EnsembleMismatch) as e:
    aj.load([run, other])
  msg = str(e.value)
  what = {'src': 'source', 'tgt': 'target'}[side]
  assert '\n' not in msg and repr(run) in msg and repr(other) in msg, msg
  assert f'their {what} tokenizers differ (char, {tok.vocab_size} symbols vs char' in msg, msg
