"""The implicit-attention study: does a model's explicit attention show what it uses, and does
a model without attention attend implicitly? (Jain & Wallace 2019; Wiegreffe & Pinter 2019;
Ding et al. 2019.)

  bash launch.sh sweep experiments/configs/implicit_attention.py --parallel=2
  bash launch.sh sweep experiments/configs/implicit_attention.py:digits --parallel=2
  python -m experiments.sweep_report runs/implicit_attention    # the report again

On `reverse` (trained on lengths 1-12, tested on 1-24: within and beyond the training
lengths): every RNN score, `none` included, with both decoders (Bahdanau, Luong), the
additive score with coverage, and a two-layer Transformer; every variant under seeds 1-3. At
the end of each run its first 100 test sentences are attributed by every method (gradient,
gradient x input, integrated gradients, SmoothGrad, erasure) and measured against the gold
alignment beside the explicit weights (eval.attribution: attention_jax/implicit/alignment.py); the
sweep report adds implicit_attention.md (means over seeds with 95% intervals, paired tests
over seeds, Holm-adjusted). Small models (embeddings and encoder 16, decoder 32; Transformer
d_model 32) so that 60 runs fit a 2-core CPU.

With `:digits`, on `digit_strips` (runs/implicit_attention_digits): soft attention, hard
attention (Xu et al. 2015) and no attention, seeds 1-3, 3,000 steps; the pointing game (is
the argmax of a map inside the box of the digit being read?) for the explicit weights, the
pixel gradients, gradient x input, integrated gradients, Grad-CAM and erasure (digits_config).
"""

from attention_jax.models import scores
from experiments.configs import common, digit_strips, reverse

SEEDS = 3   # every variant under seeds 1, 2, 3 (--seeds=N overrides)


def digits_config(arg: str | None = None):
  """digit_strips (32 x 160 strips of 1-5 MNIST digits, each digit's box recorded) with a
  smaller CNN and decoder than experiments/configs/digit_strips.py (16-32-64: 14 steps/s of 32
  here, against 0.56 steps/s of 64 for its 32-64-128 CNN) and undistorted training strips,
  3,000 steps of 32, so that 9 runs fit about half an hour of this 2-core CPU. At the end, the pointing game of the explicit weights, the pixel
  gradients, gradient x input, integrated gradients, Grad-CAM and erasure (each grid cell set
  to black, the background, in turn) on the first 64 test strips."""
  c = digit_strips.get_config('smoke' if arg == 'digits_smoke' else None)
  c.model.cnn_width, c.model.image_dim = 16, 64
  c.model.emb_dim = c.model.attn_dim = 32
  c.model.dec_hidden = 64
  c.data.batch_size = 32
  c.eval.attribution = 'gradient,gradient_x_input,integrated_gradients,gradcam,erasure'
  c.eval.attribution_num = 64
  c.eval.attribution_steps = 16
  c.eval.heatmaps = 0
  if arg == 'digits':
    c.data.digit_distortion = 0.0
    c.data.num_train, c.data.num_valid, c.data.num_test = 20_000, 200, 200
    c.train.steps = 3000
    c.train.eval_every = c.train.checkpoint_every = 1000
  else:
    c.eval.attribution_num, c.eval.attribution_steps = 4, 2
  return c


def get_config(arg: str | None = None):
  if arg in ('digits', 'digits_smoke'):
    return digits_config(arg)
  c = reverse.get_config(arg)
  c.data.max_len, c.data.test_max_len = 12, 24
  c.data.max_src_len = c.data.max_tgt_len = 32
  c.data.num_buckets = 1       # one shape per split: compiling is most of a small run
  c.data.batch_size = 32
  c.model.emb_dim = c.model.enc_hidden = c.model.attn_dim = 16
  c.model.dec_hidden = 32
  c.eval.attribution = 'all'
  c.eval.attribution_num = 100   # test sentences attributed: about half beyond length 12
  c.eval.heatmaps = 0
  if arg == 'smoke':
    c.eval.attribution_num = 8
    c.eval.attribution_steps = 4
  else:
    c.data.num_train, c.data.num_valid, c.data.num_test = 4000, 200, 200
    c.train.steps = 1500
    c.train.eval_every = c.train.checkpoint_every = 500
  return c


def get_sweep(arg: str | None = None):
  if arg in ('digits', 'digits_smoke'):   # soft (Bahdanau additive), hard, and no attention
    return [('soft', {}), ('hard', {'model.attention_mode': 'hard'}),
            ('none', {'model.score': 'none'})]
  rnn = [(f'{score}_{decoder}', {'model.score': score, 'model.decoder': decoder})
         for score in sorted(scores.SCORES) for decoder in ('bahdanau', 'luong')]
  return rnn + [
      ('additive_coverage_bahdanau', {'model.score': 'additive', 'model.coverage': True,
                                      'train.coverage_weight': 1.0}),
      ('transformer', common.switch(get_config(arg), **TRANSFORMER))]


# the 'transformer' variant's model (its RNN sizes put back to their defaults: common.switch)
TRANSFORMER = {'arch': 'transformer', 'd_model': 32, 'heads': 2, 'ff_dim': 64,
               'transformer_layers': 2}
