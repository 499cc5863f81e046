"""Dates drawn as images -> ISO 8601: soft visual attention (Xu et al. 2015, "Show, Attend and
Tell") on rendered text.

  bash launch.sh train experiments/configs/image_dates.py --workdir=runs/image_dates
  bash launch.sh train experiments/configs/image_dates.py:smoke --workdir=/tmp/image_dates_smoke
  bash launch.sh train experiments/configs/image_dates.py:vit --workdir=runs/image_dates_vit
  bash launch.sh train experiments/configs/image_dates.py --config.model.attention_mode=hard --workdir=runs/image_dates_hard

The source is a 32 x 256 grayscale image of a `dates` string (48 typefaces, sizes, offsets, a
small rotation and noise; half of the 120,000 training images drawn further: stroke, blur,
contrast, distortions; attention_jax/data/image_builders.py); the model must read it. A small
CNN (3 blocks of 3x3 convolutions and max pooling, 16-32-64 channels, the last block pooling
only down) gives a 4 x 64 grid (cells of 8 x 4 pixels) whose rows are max-pooled into 64
columns and read both ways by a GRU that also takes the 2-D positions (CRNN-style annotations);
a Bahdanau decoder attends over the columns with the additive score and a coverage vector in it
(Tu et al. 2016), with Xu et al.'s gate on the context; their doubly stochastic regulariser is
off (it asks every cell for attention, which reading a line does not need); no dropout; 14,000
steps of 96 images. Besides `test`, drawn in the training typefaces, every run reads the test
dates in a family never trained on (test_heldout_fonts, STIX General), and draws the test
heatmaps (runs/<name>/heatmaps/: each output character's attention upsampled onto the image)
for both. Over seeds 1 and 2: 99.05% test exact match in-font, 96.50% held out (about 2 h 40
min for the two side by side on 2 CPU cores, plus about 4 minutes drawing the images once;
docs/images.md). `image_dates.py:vit` (VARIANTS) uses 8 x 8 patches (a 4 x 32 grid) and 2
Transformer encoder layers of width 128 instead of the CNN (`:vit,smoke` shrinks it).
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'image_dates'
  c.data.tokenizer = 'char'       # the target's characters (and the drawn string's, for display)
  c.data.max_src_len = 64         # the drawn string, in characters (length buckets, records)
  c.data.max_tgt_len = 16
  c.data.num_buckets = 1          # every image has one size and every target ten characters
  c.data.image_height, c.data.image_width = 32, 256
  c.data.num_train = 120000       # drawn once, about 4 minutes; 20,000 overfit (docs/images.md)
  # typefaces: 48 faces of DejaVu, Computer Modern and seven pip-packaged families
  # (image_builders.FONT_SETS['wide']); the split test_heldout_fonts reads the test dates drawn
  # in STIX General, a family never trained on
  c.data.image_fonts = 'wide'
  # training images only, drawn further as OCR systems train (image_builders.Augment; 0: off)
  c.data.image_stroke = 0.7       # stroke weight: ink ** g, g in [0.6, 1.6]
  c.data.image_blur = 0.5         # Gaussian blur up to sigma 0.5 px
  c.data.image_contrast = 0.4     # ink 0.6-1 over a background of the rest
  c.data.image_noise = 0.04       # noise sigma 0.04-0.08 (0.04 in every split)
  c.data.image_affine = 0.7       # shear up to 0.21, width +-10%, height +-7%
  c.data.image_elastic = 0.6      # a smooth random displacement of up to 0.6 px
  c.data.image_baseline = 1.0     # baseline jitter: columns moved along a curve, up to 1 px
  c.data.image_augment_p = 0.5    # the share of training images drawn so (the rest plainly)
  c.model.encoder = 'cnn'
  c.model.cnn_layers = 3          # 3 blocks: 32 -> 4 rows ...
  c.model.cnn_cell_width = 4      # ... of 4-pixel columns (the last block pools 2 x 1): 4 x 64
  c.model.cnn_width = 16          # 16-32-64 channels: with 48 faces 12-24-48 stalled near 96%
  c.model.dropout = 0.0           # 11 epochs of 120,000: validation loss falls to the end
  # CRNN-style (Shi et al. 2016): the grid's rows max-pooled into 64 columns, read both ways by
  # a GRU, so each annotation knows the whole line (the date's format), with the positions
  # entering the GRU (docs/images.md has what each of these gained)
  c.model.cnn_columns = True
  c.model.cnn_row_rnn = True
  c.model.cnn_positions = 'rnn_input'
  c.model.image_dim = 128
  c.model.context_gate = True
  c.model.coverage = True         # the score sees what each column received (Tu et al. 2016)
  c.train.doubly_stochastic_weight = 0.0   # Xu et al. eq. 14 (see the module docstring)
  c.eval.bleu_tokenize = 'char'
  c.eval.length_edges = (10, 15, 20, 25, 30, 35, 40)   # characters drawn
  c.data.batch_size = 96          # 64 learned less per step and per image (docs/images.md)
  c.train.steps = 14000           # 1.6-1.7 steps/s each for two seeds side by side here
  c.train.eval_every = 500
  return common.apply_arg(c, arg, VARIANTS)


# image_dates.py:vit: the encoder 'vit' in place of the CNN, 8 x 8 patches (a 4 x 32 grid)
VARIANTS = {'vit': {'encoder': 'vit', 'patch_size': 8, 'd_model': 128, 'transformer_layers': 2}}
