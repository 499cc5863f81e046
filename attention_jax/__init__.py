"""attention_jax: attention for sequence-to-sequence models in JAX / Flax NNX.

  import attention_jax as aj
  sorted(aj.SCORES)        # the alignment score functions, by name
  sorted(aj.MODES)         # attention modes: global, local_m, local_p, hard, hard_st
  model = aj.build(aj.ModelConfig(src_vocab=40, tgt_vocab=40, score='general'),
                   rngs=flax.nnx.Rngs(0))   # the model of model.arch: aj.Seq2Seq (rnn) or
  logits, weights = model(src, tgt_in)     # aj.Transformer; [B, T, V], [B, T, S]

  t = aj.load('runs/dates_additive')     # a trained run, best checkpoint
  t.translate(['22. November 2026'])     # ['2026-11-22']
  t.translate(['Nov 3, 1999'], beam=5, nbest=2)   # [[('1999-11-03', -0.01), (..., ...)]]
  t = aj.load(['runs/a', 'runs/b'])      # an ensemble: the mean of the runs' log-probabilities
  aj.evaluate_run('runs/dates_additive', src='my.src', ref='my.ref', beam=5)
"""

from attention_jax.decoding.beam import beam_search
from attention_jax.decoding.ensemble import Ensemble, EnsembleTranslator, load, load_ensemble
from attention_jax.decoding.greedy import greedy
from attention_jax.decoding.translator import Hypotheses, Translator
from attention_jax.evaluation import metrics  # metrics.register(metrics.Metric(...)): a new metric
from attention_jax.evaluation.plots import plot_attention, plot_attention_grid
from attention_jax.evaluation.run_eval import evaluate_run
from attention_jax.models.attention import (MODES, NORMALISERS, Attention, masked_softmax,
                                            masked_sparsemax)
from attention_jax.models.cells import CELLS
from attention_jax.models.model import ARCHS, ModelConfig, Seq2Seq, build
from attention_jax.models.multihead import MultiHeadAttention
from attention_jax.models.rnn_decoder import DECODERS
from attention_jax.models.scores import SCORES, Score, register
from attention_jax.models.transformer import Transformer

__all__ = ['ARCHS', 'MultiHeadAttention', 'Transformer', 'build', 'Attention', 'Hypotheses', 'beam_search', 'evaluate_run', 'greedy', 'CELLS', 'DECODERS', 'MODES', 'ModelConfig',
           'NORMALISERS', 'SCORES', 'Score', 'Seq2Seq', 'Translator', 'load', 'masked_softmax',
           'masked_sparsemax', 'plot_attention', 'plot_attention_grid', 'register',
           'Ensemble', 'EnsembleTranslator', 'load_ensemble']
