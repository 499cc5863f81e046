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
  aj.explore(['runs/dates_additive'], out='explore/dates')   # an offline page: docs/explorer.md
"""

import os

from attention_jax import lazy

# Same seed, same bits, on GPUs too: XLA's GPU scatter-adds (an embedding's gradient) use
# atomics whose order varies between runs unless XLA_FLAGS asks for deterministic ops. Set
# before JAX starts its backend; a user's own --xla_gpu_deterministic_ops=false wins (faster,
# and no bit-identical resume: docs/reliability.md). CPU and TPU ignore the flag.
if 'xla_gpu_deterministic_ops' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                             + ' --xla_gpu_deterministic_ops=true').strip()

# Each name is imported from its module when first used (lazy.py), so that a process that
# needs only part of the package (`translate`: decoding, no TFDS, Matplotlib or SciPy)
# does not import all of it: about 0.7 s of a translation's start (docs/performance.md).
__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    'attention_jax.decoding.beam': ['beam_search'],
    'attention_jax.loaded.ensemble': ['Ensemble', 'EnsembleTranslator', 'load',
                                      'load_ensemble'],
    'attention_jax.decoding.greedy': ['greedy'],
    'attention_jax.loaded.translator': ['Hypotheses', 'Translator'],
    'attention_jax.analysis.explorer': ['explore'],
    'attention_jax.evaluation.plots': ['plot_attention', 'plot_attention_grid'],
    'attention_jax.analysis.saved_run': ['evaluate_run'],
    'attention_jax.models.attention': ['MODES', 'NORMALISERS', 'Attention', 'masked_softmax',
                                       'masked_sparsemax'],
    'attention_jax.models.cells': ['CELLS'],
    'attention_jax.models.model': ['ARCHS', 'ModelConfig', 'Seq2Seq', 'build'],
    'attention_jax.models.multihead': ['MultiHeadAttention'],
    'attention_jax.models.rnn_decoder': ['DECODERS'],
    'attention_jax.models.scores': ['SCORES', 'Score', 'register'],
    'attention_jax.models.transformer': ['Transformer'],
}, modules={'metrics': 'attention_jax.evaluation.metrics'})  # metrics.register(Metric(...))
