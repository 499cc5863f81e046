"""image_dates read in typefaces never trained on: what the training fonts and the drawing
augmentations gain on the held-out split (test_heldout_fonts: the test dates in STIX General).

  bash launch.sh sweep experiments/configs/image_fonts.py --seeds=2 --only=augmented
  bash launch.sh sweep experiments/configs/image_fonts.py --only=plain,dejavu_plain
  bash launch.sh compare runs/image_fonts/wide_half_w{24,16} --split=test_heldout_fonts

Variants go to runs/image_fonts[_smoke]/<variant>, each measured from BASE: image_dates.py's
5,000-step config before this sweep's best variant became its default. `augmented` is BASE
as it is (17 typefaces, every data.image_* augmentation); `augmented_half`
draws half of the training images so and half plainly; `plain` the same
typefaces drawn without augmentation; `dejavu_plain` also without the Computer Modern and
DejaVu bold-italic faces (the six DejaVu faces of the data set's version 1); `wide_half` is
`augmented_half` with 31 faces of seven more families in training (data.image_fonts='wide':
pip packages' typefaces, image_builders.PIP_FONTS; none of them STIX or Times-like);
`wide_half_10k` trains it twice as long (10,000 steps); `wide_half_w16` also widens the CNN
(16-32-64 channels instead of 12-24-48): with 48 faces, validation stopped rising near 96%;
`wide_half_w24` widens it to 24-48-96 (the 16-wide CNN read 98.1% in-font, 94.0% held out);
`wide_half_w16_120k` is `wide_half_w16` with twice the distinct training images (120,000
drawn once: the 24-wide CNN's validation loss rose over its last 1,000 steps of 60,000 images);
`wide_half_w16_120k_20k` trains that twice as long (20,000 steps: both seeds' validation was
still rising at 10,000, seed 2's far behind seed 1's); `wide_half_w16_120k_ema` is
`wide_half_w16_120k` (10,000 steps) evaluated and saved as an exponential moving average of
its weights (train.ema_decay 0.999: about the last 1,000 steps; Polyak & Juditsky 1992);
`wide_half_w16_120k_30k` trains `wide_half_w16_120k` for 30,000 steps (the 20,000-step pair
read 98.75% in-font, 95.35% held out, seed 2's validation still rising at its end);
`wide_half_w16_120k_20k_d256` is the 20,000-step run with twice the row GRU and decoder
(model.image_dim and model.dec_hidden 256: 1.03M parameters against 306k; about 1.25x the
step time here): 30,000 steps of the small model read 97.9% in-font for seed 2, and its
in-font errors are often a field read from the wrong place (`3 May 1960` -> 1960-03-03);
`wide_half_w16_120k_20k_cov` is the 20,000-step run with a coverage vector in the additive
score (model.coverage: the attention sees how much each column was read so far; Tu et al. 2016,
and Zhang et al. 2017's "Watch, Attend and Parse" against reading a part of an image twice or
not at all), without a coverage loss (98.80% in-font, 95.95% held out over 2 seeds); `wide_half_w16_240k_20k_cov` draws it twice the distinct
training images (240,000: 5,000 per typeface); `wide_half_w16_120k_b32_25k_cov` trains the
coverage run on batches of 32 for 25,000 steps (800,000 images against 1,280,000; 5.8 steps/s
alone here against 3.6-4.1 for batches of 64): both seeds fitted one session side by side, and
read far worse (89.05% in-font, 81.15% held out; docs/images.md);
`wide_half_w16_120k_b96_14k_cov` goes the other way: batches of 96 for 14,000 steps (1,344,000
images), since halving the batch slowed learning per step far more than it sped each step:
the best pair (99.05% in-font, 96.50% held out over 2 seeds), now image_dates.py's config.
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
