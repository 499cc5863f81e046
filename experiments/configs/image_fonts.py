"""image_dates read in typefaces never trained on: a sweep over the training typefaces, the
drawing augmentations, the CNN's width, the data, the steps and the batch, measured on both
test splits (`test`, drawn in the training typefaces, and test_heldout_fonts, the test dates
in STIX General, a family no training image uses).

  bash launch.sh sweep experiments/configs/image_fonts.py --seeds=2 --only=augmented_half
  bash launch.sh sweep experiments/configs/image_fonts.py:smoke --seeds=1 --only=augmented
  bash launch.sh compare runs/image_fonts/plain runs/image_fonts/augmented_half --split=test_heldout_fonts

BASE is image_dates.py with 17 typefaces ('all': DejaVu and Computer Modern), every training
image augmented, 60,000 training images, a CNN of 12-24-48 channels, no coverage, 5,000 steps
of 64. Each variant changes BASE as its name says (runs/image_fonts[_smoke]/<variant>/seed_<k>):

  augmented                        BASE as it is
  augmented_half                   half of the training images augmented (data.image_augment_p=0.5)
  plain, dejavu_plain              no augmentation; dejavu_plain: the six DejaVu faces only
  wide_half                        augmented_half in 48 typefaces (data.image_fonts='wide')
  wide_half_10k                    wide_half, 10,000 steps
  wide_half_w16, wide_half_w24     wide_half_10k with a CNN of 16-32-64 or 24-48-96 channels
  wide_half_w16_120k               wide_half_w16 on 120,000 training images
  wide_half_w16_120k_ema           ... evaluated as an EMA of its weights (train.ema_decay=0.999)
  wide_half_w16_120k_20k, _30k     ... 20,000 or 30,000 steps
  wide_half_w16_120k_20k_d256      ... 20,000 steps, row GRU and decoder 256 wide
  wide_half_w16_120k_20k_cov       ... 20,000 steps, a coverage vector in the score
  wide_half_w16_240k_20k_cov       the same on 240,000 training images
  wide_half_w16_120k_b32_25k_cov   the coverage variant on batches of 32, 25,000 steps
  wide_half_w16_120k_b96_14k_cov   the coverage variant on batches of 96, 14,000 steps:
                                   image_dates.py's config

What each variant measured: docs/images.md ("What was tried").
"""

import dataclasses

from attention_jax.data import image_builders
from experiments.configs import common, image_dates

# image_dates.py's defaults that its current config changed: the variants below add to these
BASE = {'data.image_fonts': 'all', 'data.image_augment_p': 1.0, 'data.num_train': 60000,
        'model.cnn_width': 12, 'model.coverage': False, 'train.steps': 5000,
        'data.batch_size': 64}

NO_AUGMENT = {f'data.image_{f.name}': 0.0 for f in dataclasses.fields(image_builders.Augment)}
WIDE_HALF = {'data.image_augment_p': 0.5, 'data.image_fonts': 'wide'}
WIDE_HALF_10K = {**WIDE_HALF, 'train.steps': 10000}
W16_120K = {**WIDE_HALF_10K, 'model.cnn_width': 16, 'data.num_train': 120000}
W16_120K_20K = {**W16_120K, 'train.steps': 20000}
COV_20K = {**W16_120K_20K, 'model.coverage': True}
VARIANTS = [('augmented', {}),
            ('augmented_half', {'data.image_augment_p': 0.5}),
            ('plain', dict(NO_AUGMENT)),
            ('dejavu_plain', {**NO_AUGMENT, 'data.image_fonts': 'dejavu'}),
            ('wide_half', dict(WIDE_HALF)),
            ('wide_half_10k', dict(WIDE_HALF_10K)),
            ('wide_half_w16', {**WIDE_HALF_10K, 'model.cnn_width': 16}),
            ('wide_half_w24', {**WIDE_HALF_10K, 'model.cnn_width': 24}),
            ('wide_half_w16_120k', dict(W16_120K)),
            ('wide_half_w16_120k_20k', dict(W16_120K_20K)),
            ('wide_half_w16_120k_ema', {**W16_120K, 'train.ema_decay': 0.999}),
            ('wide_half_w16_120k_30k', {**W16_120K, 'train.steps': 30000}),
            ('wide_half_w16_120k_20k_d256', {**W16_120K_20K, 'model.image_dim': 256,
                                             'model.dec_hidden': 256}),
            ('wide_half_w16_120k_20k_cov', dict(COV_20K)),
            ('wide_half_w16_240k_20k_cov', {**COV_20K, 'data.num_train': 240000}),
            ('wide_half_w16_120k_b32_25k_cov', {**COV_20K, 'data.batch_size': 32,
                                                'train.steps': 25000, 'train.eval_every': 1000}),
            ('wide_half_w16_120k_b96_14k_cov', {**COV_20K, 'data.batch_size': 96,
                                                'train.steps': 14000})]


def get_config(arg: str | None = None):
  c = image_dates.get_config()
  c.update_from_flattened_dict(BASE)
  return common.apply_arg(c, arg)


def get_sweep(arg: str | None = None):
  return list(VARIANTS)
