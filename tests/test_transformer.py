"""The Transformer and its multi-head attention: NumPy references for every content score,
causality, padding, KV-cache decoding == the teacher-forced pass, beam 1 == greedy, config
errors, and a smoke `reverse` run that learns (exact resume: tests/test_train.py)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax.data.tokenizers import BOS, EOS, PAD
from attention_jax.decoding import beam as beam_lib
from attention_jax.decoding import greedy
from attention_jax.models import multihead, transformer
from attention_jax.models.transformer import sinusoids

from helpers import assert_buckets_change_no_output, train_optimised
from test_scores import NUMPY_REFERENCES, randomise

CONTENT = multihead.content_scores()


def test_content_scores_are_those_that_compare_a_query_with_keys():
  """The seven classic content scores (a score registered later joins them if it compares a
  query with keys); location and none do not, so no head takes them."""
  assert {'additive', 'cosine', 'dot', 'general', 'normed_additive', 'scaled_dot',
          'scaled_general'} <= set(CONTENT)
  assert CONTENT == sorted(CONTENT) and not {'location', 'none'} & set(CONTENT)


# ---- multi-head attention against NumPy -----------------------------------------------------
def _softmax(e, mask):
  e = np.where(mask, e, -np.inf)
  p = np.exp(e - e.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True)


@pytest.mark.parametrize('score', CONTENT)
def test_multihead_attention_equals_numpy_for_every_score(score):
  d, h, b, t, s = 8, 2, 2, 3, 5
  mha = multihead.MultiHeadAttention(d, heads=h, score=score, memory_dim=6, attn_dim=3,
                                     rngs=nnx.Rngs(0))
  randomise(mha, 1)
  x = np.asarray(jax.random.normal(jax.random.key(2), (b, t, d)))
  m = np.asarray(jax.random.normal(jax.random.key(3), (b, s, 6)))
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)[:, None, :]   # [B, 1, S]
  y, w = mha(jnp.asarray(x), jnp.asarray(m), jnp.asarray(mask))
  wq, wkv = np.asarray(mha.q.kernel[...], np.float64), np.asarray(mha.kv.kernel[...], np.float64)
  wo = np.asarray(mha.out.kernel[...], np.float64)
  q = (x @ wq).reshape(b, t, h, d // h)
  kv = (m @ wkv).reshape(b, s, 2, h, d // h)
  heads = []
  for i in range(h):
    e = NUMPY_REFERENCES[score](q[:, :, i], kv[:, :, 0, i], mha.scores[i])     # [B, T, S]
    a = _softmax(e, mask)
    np.testing.assert_allclose(np.asarray(w[:, i]), a, atol=2e-5)
    heads.append(a @ kv[:, :, 1, i])
  np.testing.assert_allclose(np.asarray(y), np.concatenate(heads, -1) @ wo, atol=2e-4)
  assert (np.asarray(w[1, :, :, 3:]) == 0).all()


@pytest.mark.parametrize('score', ['scaled_dot', 'additive', 'cosine'])
def test_grouped_queries_read_like_copied_memory(score):
  """Beam search's G rows per sentence (N = B·G) against the memory tiled G times."""
  mha = multihead.MultiHeadAttention(8, heads=2, score=score, rngs=nnx.Rngs(0))
  m = jax.random.normal(jax.random.key(1), (2, 5, 8))
  x = jax.random.normal(jax.random.key(2), (6, 1, 8))                          # G = 3
  mask = jnp.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)[:, None, :]
  y, w = mha.read(x, mha.memory(m), mask)
  y2, w2 = mha.read(x, mha.memory(jnp.repeat(m, 3, 0)), jnp.repeat(mask, 3, 0))
  np.testing.assert_allclose(np.asarray(y), np.asarray(y2), atol=1e-5)
  np.testing.assert_allclose(np.asarray(w), np.asarray(w2), atol=1e-6)


def test_sinusoids_match_the_paper():
  p = np.asarray(sinusoids(7, 6, offset=3))
  pos = np.arange(3, 10)[:, None]
  i = np.arange(3)[None, :]
  np.testing.assert_allclose(p[:, 0::2], np.sin(pos / 10000 ** (2 * i / 6)), atol=1e-5)
  np.testing.assert_allclose(p[:, 1::2], np.cos(pos / 10000 ** (2 * i / 6)), atol=1e-5)


# ---- the model ------------------------------------------------------------------------------
def model(seed=0, **kw):
  cfg = dict(src_vocab=11, tgt_vocab=9, arch='transformer', d_model=16, heads=2, ff_dim=24,
             transformer_layers=2)
  cfg.update(kw)
  return aj.build(aj.ModelConfig(**cfg), rngs=nnx.Rngs(seed))


# a model's calls, compiled (run eagerly, each of a pass's ~100 operations compiles alone)
_call = nnx.jit(lambda m, s, t: m(s, t))
_forward = nnx.jit(lambda m, s, t: m.forward(s, t))
_start = nnx.jit(lambda m, s, n: m.start(s, n), static_argnums=2)
_step = nnx.jit(lambda m, c, y, mem: m.step(c, y, mem))

SRC = jnp.array([[4, 5, 6, 7, 2], [3, 4, 2, 0, 0]], jnp.int32)
TGT = jnp.array([[1, 4, 5, 6, 3], [1, 3, 3, 0, 0]], jnp.int32)
VARIANTS = [{}, {'positions': 'learned'}, {'positions': 'none'}, {'norm_first': False},
            {'cross_attention_score': 'additive', 'self_attention_score': 'general'},
            {'normaliser': 'sparsemax'}, {'share_embeddings': True, 'tgt_vocab': 11,
                                          'tie_output': True}]


@pytest.mark.parametrize('kw', VARIANTS, ids=lambda kw: '-'.join(f'{k}={v}' for k, v in kw.items()) or 'default')
def test_causal_mask_hides_the_future(kw):
  m = model(**kw)
  logits, w = _call(m, SRC, TGT)
  np.testing.assert_allclose(np.asarray(w[0].sum(-1)), 1.0, atol=1e-5)
  future = TGT.at[0, 3:].set(jnp.array([8, 7]))
  logits2, _ = _call(m, SRC, future)
  np.testing.assert_allclose(np.asarray(logits[0, :3]), np.asarray(logits2[0, :3]), atol=1e-5)
  assert not np.allclose(np.asarray(logits[0, 3:]), np.asarray(logits2[0, 3:]))


@pytest.mark.parametrize('kw', VARIANTS[:2] + VARIANTS[4:5], ids=['default', 'learned', 'mixed'])
def test_padding_gets_zero_weight_and_changes_nothing(kw):
  m = model(**kw)
  logits, read = _forward(m, SRC, TGT)
  logits2, read2 = _forward(m, jnp.pad(SRC, ((0, 0), (0, 4))), jnp.pad(TGT, ((0, 0), (0, 2))))
  np.testing.assert_allclose(np.asarray(logits2[:, :5]), np.asarray(logits), atol=1e-5)
  lw = np.asarray(read2.layers)                                             # [B, N, H, T, S]
  assert lw.shape == (2, 2, 2, 7, 9)
  assert (lw[:, :, :, :, 5:] == 0).all() and (lw[1, :, :, :, 3:] == 0).all()
  np.testing.assert_allclose(lw[:, :, :, :5, :5], np.asarray(read.layers), atol=1e-6)


@pytest.mark.parametrize('kw', VARIANTS, ids=lambda kw: '-'.join(f'{k}={v}' for k, v in kw.items()) or 'default')
def test_kv_cache_decoding_equals_the_teacher_forced_pass(kw):
  """Greedy with the cache: each step's log-probabilities and weights equal the full pass over
  the prefix it produced (to 1e-5), so the tokens are the same too."""
  m = model(seed=1, **kw)
  L = 7
  carry, mem = _start(m, SRC, L)
  y, steps_logp, steps_w = jnp.full((2,), 1, jnp.int32), [], []
  prefix = [y]
  for _ in range(L):
    carry, logp, w = _step(m, carry, y, mem)
    y = jnp.argmax(greedy.emittable(logp), -1).astype(jnp.int32)
    steps_logp.append(logp)
    steps_w.append(w)
    prefix.append(y)
  tgt_in = jnp.stack(prefix[:-1], 1)                                             # [B, L]
  logits, w_full = _call(m, SRC, tgt_in)
  np.testing.assert_allclose(np.stack(steps_logp, 1), np.asarray(jax.nn.log_softmax(logits)),
                             atol=1e-5)
  np.testing.assert_allclose(np.stack(steps_w, 1), np.asarray(w_full), atol=1e-5)
  tokens, _ = jax.jit(lambda s: greedy.greedy(m, s, L))(SRC)
  np.testing.assert_array_equal(np.asarray(tokens[:, 0]), np.asarray(prefix[1]))


def test_beam_of_one_is_greedy_and_beam_finds_no_worse():
  """Beam 1 gives greedy's tokens and weights; beam 4's best output has the score a
  teacher-forced pass gives it, and no lower a one than greedy's output."""
  m = model(seed=2)
  g_tok, g_w = jax.jit(lambda s: greedy.greedy(m, s, 8))(SRC)
  b_tok, _, b_w = jax.jit(lambda s: beam_lib.beam_search(m, s, beam_size=1, max_len=8))(SRC)
  np.testing.assert_array_equal(np.asarray(g_tok), np.asarray(b_tok))
  np.testing.assert_allclose(np.asarray(g_w), np.asarray(b_w), atol=1e-6)
  tok, scores, _ = jax.jit(lambda s: beam_lib.beam_search(m, s, beam_size=4, max_len=8, alpha=0.0,
                                                          nbest=2))(SRC)
  assert tok.shape == (2, 2, 8) and (np.diff(np.asarray(scores), axis=1) <= 1e-6).all()
  # beam 4 finds no worse than greedy, each output scored by one teacher-forced pass
  best = np.asarray(tok[:, 0])
  np.testing.assert_allclose(forced_log_prob(m, best), np.asarray(scores[:, 0]), atol=1e-4)
  assert (forced_log_prob(m, best) >= forced_log_prob(m, np.asarray(g_tok)) - 1e-5).all()


def forced_log_prob(m, tokens: np.ndarray) -> np.ndarray:
  """tokens [B, L] (an output: up to its EOS, padding after) -> [B] its log-probability
  under one teacher-forced pass over SRC (EOS counted; nothing after it)."""
  tgt_in = np.concatenate([np.full((len(tokens), 1), BOS), tokens[:, :-1]], 1)
  logp = np.asarray(jax.nn.log_softmax(_call(m, SRC, jnp.asarray(tgt_in, jnp.int32))[0]))
  picked = np.take_along_axis(logp, tokens[..., None], -1)[..., 0]                  # [B, L]
  ended = np.cumsum(tokens == EOS, 1) - (tokens == EOS) > 0      # after the first EOS
  return np.where(ended | (tokens == PAD), 0.0, picked).sum(1)


def test_config_errors_name_the_valid_values():
  base = dict(src_vocab=11, tgt_vocab=9, arch='transformer')
  for score in ('location', 'none'):
    with pytest.raises(ValueError, match=f"needs a content score.*got '{score}'; valid: "
                                         'additive, cosine, dot, general'):
      aj.ModelConfig(**base, cross_attention_score=score)
  with pytest.raises(ValueError, match="unknown score 'bogus'"):
    aj.ModelConfig(**base, self_attention_score='bogus')
  with pytest.raises(ValueError, match='positive divisor of the model size 128, got 3'):
    aj.ModelConfig(**base, heads=3)
  with pytest.raises(ValueError, match="unknown model.positions 'rope'; valid: sinusoidal, "
                                       'learned, none'):
    aj.ModelConfig(**base, positions='rope')
  with pytest.raises(ValueError, match='share_embeddings needs one vocabulary.*11 and 9'):
    aj.ModelConfig(**base, share_embeddings=True)
  with pytest.raises(ValueError, match="model.arch='transformer', model.encoder='' does not "
                                       "read model.attention_mode='local_m'"):
    aj.ModelConfig(**base, attention_mode='local_m')
  with pytest.raises(ValueError, match="unknown model.arch 'lstm'; valid: rnn, transformer"):
    aj.ModelConfig(src_vocab=3, tgt_vocab=3, arch='lstm')
  m = model(positions='learned', max_positions=6)
  with pytest.raises(ValueError, match='max_positions=6, got a source of 9 positions'):
    m(jnp.ones((1, 9), jnp.int32), jnp.ones((1, 3), jnp.int32))
  with pytest.raises(ValueError, match='max_positions=6, got an output limit of 8'):
    m.start(SRC, 8)


def test_shared_and_tied_embeddings_save_parameters():
  count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
  plain = model(tgt_vocab=11)
  tied = model(tgt_vocab=11, share_embeddings=True, tie_output=True)
  assert count(plain) - count(tied) == 11 * 16 + 11 * 16 + 11   # target table, W_out, b_out


# ---- end to end -----------------------------------------------------------------------------
@pytest.mark.extended   # learning to 90% (a minute): after the suite, in CI (.ci/run)
def test_transformer_learns_smoke_reverse_and_reloads(data_dir, tmp_path):
  """`reverse` (2,000 sequences of length 1-7: one padded length, one compiled step) with a
  2-layer d_model-32 Transformer: 300 steps of 32 reach >= 90% token accuracy on validation
  (94.5% when written; 300 steps on the 256 smoke sequences only memorise them: 34%)."""
  run = tmp_path / 'run'
  results = train_optimised(
      'experiments/configs/reverse.py:smoke', run, **{
          'data.data_dir': data_dir, 'model.arch': 'transformer', 'model.d_model': 32,
          'model.ff_dim': 64, 'model.transformer_layers': 2, 'model.dropout': 0.0,
          'train.steps': 300, 'train.eval_every': 300, 'train.checkpoint_every': 300,
          'train.lr': 3e-3, 'train.warmup_steps': 30, 'data.num_train': 2000,
          'data.max_len': 7, 'data.test_max_len': 7, 'data.batch_size': 32,
          'eval.heatmaps': 1})
  assert results['results']['validation']['token_accuracy'] >= 90.0, results['results']
  t = aj.load(str(run))
  assert t.config.arch == 'transformer'
  out, weights, src_tokens, tgt_tokens = t.attend('a b c', beam=3)
  assert weights.shape == (len(tgt_tokens), len(src_tokens))
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
  out2, heads, _, _ = t.attend_heads('a b c', beam=3)       # teacher-forced on the output
  assert out2 == out and heads.shape == (2, 4) + weights.shape
  np.testing.assert_allclose(heads[-1].mean(0), weights, atol=1e-5)
  assert (run / 'heatmaps' / 'test_heads.png').exists()
  _beam_scores_are_teacher_forced_and_never_below_greedy(t)
  # greedy only, buckets growing 3x (8, 24, 72: a Transformer decoder compiles a loop per KV
  # cache segment, so short buckets keep this check's programs few and small): the last text
  # (10 tokens with EOS) in bucket 24, not 16; tests/test_translate.py: the default growth on
  # an RNN, beam and padding rows too
  assert_buckets_change_no_output(t, ['a b c', 'c c c a', 'a b c a b'],
                                  chunk_size=4, settings=({},), growth=3.0)


def _teacher_forced(t, pairs):
  """log P of each output ids [T_i] (EOS last if it ended) given its text, by one
  teacher-forced pass over all the pairs -> [N]."""
  srcs = [t.src_tok.encode(text) + [EOS] for text, _ in pairs]
  src = np.zeros((len(pairs), max(map(len, srcs))), np.int32)
  tgt_in = np.zeros((len(pairs), max(len(ids) for _, ids in pairs)), np.int32)
  for i, (x, (_, ids)) in enumerate(zip(srcs, pairs)):
    src[i, :len(x)], tgt_in[i, :len(ids)] = x, [BOS, *ids[:-1]]
  logits, _ = jax.jit(lambda p, s, y: nnx.merge(t.graphdef, p)(s, y))(t.params, src, tgt_in)
  logp = np.asarray(jax.nn.log_softmax(logits))
  return np.array([logp[i, np.arange(len(ids)), ids].sum() for i, (_, ids) in enumerate(pairs)])


def _beam_scores_are_teacher_forced_and_never_below_greedy(t, alpha=0.6):
  """Every hypothesis of beam 5's 5-best scores log P / lp(|Y|) of a teacher-forced pass (the
  KV cache reordered with the hypotheses holds what a pass over the prefix computes), none
  holds PAD or BOS, and the best scores at least greedy's output. The texts share one length
  bucket (8 with EOS): one greedy and one beam program to compile."""
  texts = ['a b c', 'c a b', 'b', 'a c b a', 'c c c a']
  lp = lambda n: ((5.0 + n) / 6.0) ** alpha
  greedy, beam = t.decode(texts), t.decode(texts, beam=5, alpha=alpha, nbest=5)
  pairs = [(text, ids) for text, h in zip(texts, beam) for ids in h.ids]
  pairs += [(text, h.ids[0]) for text, h in zip(texts, greedy)]
  scores = _teacher_forced(t, pairs) / np.array([lp(len(ids)) for _, ids in pairs])
  beam_scores = np.array([h.scores for h in beam])                               # [5, 5]
  assert not any(PAD in ids or BOS in ids for _, ids in pairs)
  np.testing.assert_allclose(beam_scores.ravel(), scores[:25], rtol=1e-4, atol=1e-5)
  assert (beam_scores[:, 0] >= scores[25:] - 1e-5).all(), (beam_scores[:, 0], scores[25:])


def test_one_multihead_attention_serves_both_families():
  """The RNN encoder's self-attention and every Transformer attention are the same class."""
  rnn = aj.Seq2Seq(aj.ModelConfig(src_vocab=7, tgt_vocab=7, emb_dim=8, enc_hidden=4,
                                  self_attention_layers=1, self_attention_heads=2),
                   rngs=nnx.Rngs(0))
  assert type(rnn.encoder.self_attention[0].attn) is multihead.MultiHeadAttention
  t = model()
  for layer in t.dec_layers:
    assert type(layer.self_attn) is type(layer.cross) is multihead.MultiHeadAttention
  assert type(t.enc_layers[0].attn) is multihead.MultiHeadAttention


def test_rnn_only_fields_are_refused_not_checked_for_the_transformer():
  """The transformer does not read model.score / dec_hidden: set, they are refused as unread
  (not checked by the RNN's rules: dot with unequal sizes); its own normaliser is checked."""
  with pytest.raises(ValueError, match="needs equal query and key sizes"):
    aj.ModelConfig(src_vocab=5, tgt_vocab=5, score='dot', dec_hidden=7)
  with pytest.raises(ValueError, match=r"^model.arch='transformer', model.encoder='' does not "
                                       r"read model.dec_hidden=7, model.score='dot' \("):
    aj.ModelConfig(src_vocab=5, tgt_vocab=5, arch='transformer', score='dot', dec_hidden=7)
  with pytest.raises(ValueError, match="unknown normaliser 'entmax'"):
    aj.ModelConfig(src_vocab=5, tgt_vocab=5, arch='transformer', normaliser='entmax')


# ---- the fused path and the batched cache (issue 32) ----------------------------------------
def test_fused_attention_equals_the_einsum_path():
  """scaled_dot + softmax without weights or dropout may go through
  jax.nn.dot_product_attention: the same outputs as the per-head path to 1e-5, for a padded
  memory, a causal mask and a query with nothing to attend to (0 on both paths)."""
  fused = multihead.MultiHeadAttention(8, heads=2, score='scaled_dot', rngs=nnx.Rngs(0),
                                       fused_attention=True)
  plain = multihead.MultiHeadAttention(8, heads=2, score='scaled_dot', rngs=nnx.Rngs(0),
                                       fused_attention=False)
  assert fused.fusable and not plain.fusable
  x = jax.random.normal(jax.random.key(1), (2, 4, 8))
  m = jax.random.normal(jax.random.key(2), (2, 5, 8))
  padded = jnp.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)[:, None, :]
  causal = jnp.tril(jnp.ones((4, 4), bool))[None] & jnp.array([[1, 1, 1, 1], [1, 1, 1, 0]],
                                                               bool)[:, None, :]
  empty = padded.at[1].set(False)
  for mem, mask in ((m, padded), (x, causal), (m, empty)):
    y, none = fused(x, mem, mask, weights=False)
    y2, w = plain(x, mem, mask)
    assert none is None and w.shape == (2, 2, 4, mem.shape[1])
    np.testing.assert_allclose(np.asarray(y), np.asarray(y2), atol=1e-5)
    # asking for the weights (or for dropout on them) takes the per-head path
    np.testing.assert_array_equal(np.asarray(fused(x, mem, mask)[1]), np.asarray(w))
  assert not np.asarray(fused(x, m, empty, weights=False)[0][1]).any()
  for score in ('general', 'additive'):   # other scores keep their own path
    assert not multihead.MultiHeadAttention(8, heads=2, score=score, rngs=nnx.Rngs(0),
                                            fused_attention=True).fusable


def test_a_transformer_with_fused_self_attention_computes_what_the_per_head_path_does():
  """On every backend: the reference is the per-head path, switched on explicitly (the auto
  setting fuses on GPUs and TPUs, where comparing auto with fused compared fused with fused)."""
  m = model(seed=4)
  heads = [a for _, a in nnx.iter_graph(m) if isinstance(a, multihead.MultiHeadAttention)]
  assert len(heads) == 3 * 2                 # 2 layers: encoder self, decoder self and cross
  for a in heads:
    a.fusable = False
  logits, read = m.forward(SRC, TGT[:, :-1])
  for layer in [*m.enc_layers, *m.dec_layers]:
    layer_attn = layer.attn if hasattr(layer, 'attn') else layer.self_attn
    layer_attn.fusable = True
  logits2, read2 = m.forward(SRC, TGT[:, :-1])
  np.testing.assert_allclose(np.asarray(logits), np.asarray(logits2), atol=1e-5)
  np.testing.assert_allclose(np.asarray(read.layers), np.asarray(read2.layers), atol=1e-5)


# beam_search(model(seed=5, **kw), GOLDEN_SRC, beam_size=3, max_len=7, alpha=0.6, nbest=3) as
# it was on 2026-11-25 (per-head KV cache, one array per head): (tokens, scores, sum of
# weights x source position). A batched-heads cache [N, H, L, .] returned the same and was not
# kept (no faster on the CPU; docs/performance.md, "The Transformer against OpenNMT-py's").
GOLDEN_SRC = [[10, 9, 7, 8, 9, 9], [7, 5, 8, 10, 7, 0], [7, 5, 4, 8, 5, 7], [3, 3, 6, 0, 0, 0]]
GOLDEN_BEAMS = [
    ({}, [[[4, 8, 5, 8, 5, 8, 5], [5, 8, 5, 8, 5, 8, 5], [4, 8, 5, 8, 5, 5, 8]],
          [[3, 5, 5, 5, 5, 5, 5], [4, 7, 8, 5, 8, 5, 5], [4, 7, 8, 5, 5, 5, 5]],
          [[3, 5, 5, 5, 5, 5, 5], [3, 5, 5, 5, 8, 5, 5], [3, 5, 5, 5, 5, 8, 5]],
          [[7, 5, 5, 5, 5, 5, 5], [7, 5, 5, 5, 5, 8, 5], [7, 5, 5, 8, 5, 5, 5]]],
     [[-5.05657, -5.1143, -5.45946], [-5.35842, -5.68338, -5.78689],
      [-5.48402, -5.66454, -5.69373], [-4.54707, -4.63609, -4.71498]], 232.2286500558257),
    ({'cross_attention_score': 'additive', 'self_attention_score': 'general'},
     [[[6, 2, 0, 0, 0, 0, 0], [6, 8, 2, 0, 0, 0, 0], [5, 6, 2, 0, 0, 0, 0]],
      [[6, 3, 3, 3, 3, 3, 3], [3, 3, 3, 3, 3, 3, 3], [6, 3, 3, 3, 3, 3, 6]],
      [[6, 6, 6, 6, 5, 6, 6], [6, 6, 5, 6, 5, 6, 6], [6, 6, 6, 5, 6, 6, 6]],
      [[5, 6, 2, 0, 0, 0, 0], [6, 5, 6, 2, 0, 0, 0], [5, 6, 5, 6, 2, 0, 0]]],
     [[-3.11329, -4.12933, -4.44695], [-5.34317, -5.44062, -5.72532],
      [-6.93935, -7.00452, -7.0382], [-4.39711, -5.24094, -5.94009]], 187.9952912926674)]


@pytest.mark.parametrize('kw,tokens,scores,fingerprint', GOLDEN_BEAMS,
                         ids=['scaled_dot', 'general-self_additive-cross'])
def test_beam_search_returns_what_it_did_before(kw, tokens, scores,
                                                                 fingerprint):
  """A regression pin: if this fails after a change to the attention or the cache, the change
  altered what beam search finds (tokens exactly, scores to 1e-5): find out why before
  updating the numbers."""
  m = model(seed=5, **kw)
  tok, sc, w = beam_lib.beam_search(m, jnp.array(GOLDEN_SRC, jnp.int32), beam_size=3,
                                    max_len=7, alpha=0.6, nbest=3)
  np.testing.assert_array_equal(np.asarray(tok), np.array(tokens))
  np.testing.assert_allclose(np.asarray(sc), np.array(scores), atol=1e-5)
  assert float((np.asarray(w) * np.arange(1, 7)).sum()) == pytest.approx(fingerprint, abs=1e-3)


def test_the_cache_grows_in_doubling_segments_that_end_at_max_len():
  m = model()
  for n in (1, 7, 16, 17, 72, 127, 128, 256, 266, 1000):
    ends = m.cache_lengths(n)
    assert ends[-1] == n and list(ends) == sorted(set(ends)), (n, ends)
    assert len(ends) <= transformer.MAX_SEGMENTS and min(ends) >= min(n, transformer.CACHE_SEGMENT)
    assert all(e % 8 == 0 for e in ends[:-1]) and all(b <= 2 * a for a, b in zip(ends, ends[1:]))
  assert m.cache_lengths(127) == (127,) and m.cache_lengths(128) == (64, 128)
  assert m.cache_lengths(250) == (64, 128, 250) and m.cache_lengths(1000) == (256, 504, 1000)
  # the finer bounds of beam search on one core (shapes.kv_segments)
  assert m.cache_lengths(250, 32, 6) == (32, 64, 128, 250)
  assert m.cache_lengths(1000, 32, 6) == (32, 64, 128, 256, 504, 1000)
  assert m.cache_lengths(63, 32, 6) == (63,) and m.cache_lengths(64, 32, 6) == (32, 64)
  with pytest.raises(ValueError, match='shortest >= 1 and most >= 1, got shortest=0, most=6'):
    m.cache_lengths(100, 0, 6)


@pytest.mark.extended   # 9 s each: in CI; the suite's: test_translate's kv_cache_segments
@pytest.mark.parametrize('kw', [{}, VARIANTS[4]], ids=['scaled_dot', 'general-self_additive-cross'])
def test_decoding_in_segments_returns_what_one_loop_does(kw, monkeypatch):
  """Greedy and beam search over a KV cache grown segment by segment (decode.segments; 40
  positions with segments of at least 8: 3 segments, or beam search's 4 with kv_segments
  (8, 6)) give what one loop over a 40-position
  cache gives: the same tokens, scores and weights to 1e-5 (EOS suppressed, as in the
  benchmark: every output runs to the limit)."""
  monkeypatch.setattr(transformer, 'CACHE_SEGMENT', 8)
  m = model(seed=5, **kw)
  m.out.bias[...] = m.out.bias[...].at[EOS].set(-1e9)
  src = jnp.array(GOLDEN_SRC, jnp.int32)
  assert greedy.segments(m, 40) == (16, 24, 40)

  assert greedy.segments(m, 40, (8, 6)) == (8, 16, 24, 40)   # beam search on one core

  def run(kv=None):
    g_tok, g_w = jax.jit(lambda s: greedy.greedy(m, s, 40))(src)
    tok, sc, w = jax.jit(lambda s: beam_lib.beam_search(m, s, beam_size=3, max_len=40,
                                                        alpha=0.0, nbest=3,
                                                        kv_segments=kv))(src)
    return g_tok, tok, (g_w, sc, w)

  seg, finer = run(), run((8, 6))
  monkeypatch.setattr(transformer.Transformer, 'cache_lengths', lambda self, n: (n,))
  assert greedy.segments(m, 40) == (40,)
  one = run()
  assert (np.asarray(seg[0]) != PAD).all()   # ran to the limit, through every segment
  for got in (seg, finer):
    for a, b in zip(got[:2], one[:2]):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(got[2], one[2]):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
