"""digit_strips' gold boxes (strips.draw_strip, the builder's `boxes` feature,
Task.batch_boxes): each box is its own digit's ink, in output order; the strips themselves are
the ones drawn before the boxes existed; batches map every target digit to its box."""

import hashlib

import numpy as np
import pytest

from attention_jax import data
from attention_jax.data import builders, strips
from experiments.configs import digit_strips

# (split, distortion, p, (height, width)): plain test strips, half-distorted training strips,
# and a narrow canvas where digits run off the right edge
SETTINGS = [('test', 0.0, 1.0, (32, 160)), ('train', 0.6, 0.5, (32, 160)),
            ('train', 1.0, 1.0, (20, 60))]
# sha256 (first 16 hex digits) of 12 strips per setting, measured with draw_strip as it was
# before the boxes (commit acebd22): the boxes must not move a single pixel or draw
DIGESTS = ['942ee248bda262e5', '02a64e1617840b0e', '5357bfd6c8798941']


def draw(setting, count, seed=7, digits=None):
  """count draw_strip outputs of one setting, from default_rng([seed, 1])."""
  split, distortion, p, (h, w) = setting
  all_digits, labels = strips.mnist_5k()
  digits = all_digits if digits is None else digits
  pool = strips.digit_pool(split, len(all_digits))
  rng = np.random.default_rng([seed, 1])
  return [strips.draw_strip(rng, digits, labels, pool, h, w, distortion, p)
          for _ in range(count)]


@pytest.mark.parametrize('setting,digest', list(zip(SETTINGS, DIGESTS)))
def test_strips_are_the_images_and_strings_drawn_before_the_boxes(setting, digest):
  h = hashlib.sha256()
  for image, text, rows, _ in draw(setting, 12):
    h.update(image.tobytes())
    h.update(text.encode())
    h.update(str(rows).encode())
  assert h.hexdigest()[:16] == digest, (
      'draw_strip draws other strips than before: keep its rng calls in the same order (a '
      'numpy or scipy upgrade that changes zoom or the generators would also do it: then '
      'measure the digests again and bump AjDigitStrips.VERSION)')


@pytest.mark.parametrize('setting', SETTINGS, ids=['test', 'distorted', 'narrow'])
def test_each_box_is_the_ink_of_its_own_digit_in_output_order(setting, monkeypatch):
  """Without noise, each digit drawn alone (every other digit image blanked: the same draws)
  has all its ink (> INK) inside its box, and ink on each of the box's four edges; a digit
  with no box has no ink on the canvas. Boxes lie in the canvas, left to right, -1 only after
  the last digit that shows."""
  monkeypatch.setattr(strips, 'NOISE', 0.0)
  all_digits = strips.mnist_5k()[0]
  height, width = setting[3]
  checked = 0
  for k, (image, text, rows, boxes) in enumerate(draw(setting, 25)):
    assert boxes.shape == (len(text), 4) and boxes.dtype == np.int32
    shown = boxes[:, 0] >= 0
    assert shown[0] and not np.any(np.diff(shown.astype(int)) > 0), boxes   # -1s: a suffix
    y0, x0, y1, x1 = boxes[shown].T
    assert (0 <= y0).all() and (y0 < y1).all() and (y1 <= height).all(), boxes
    assert (0 <= x0).all() and (x0 < x1).all() and (x1 <= width).all(), boxes
    assert (np.diff(x0) > 0).all() and (np.diff(x1) > 0).all(), boxes     # left to right
    for i, r in enumerate(rows):
      if rows.count(r) > 1:
        continue                             # the same image twice: its ink is not its own
      alone = np.zeros_like(all_digits)
      alone[r] = all_digits[r]
      ink = draw(setting, k + 1, digits=alone)[k][0]        # uint8: round(255 * value)
      assert draw(setting, k + 1, digits=alone)[k][1] == text
      if not shown[i]:
        assert ink.max() == 0, (k, i)
        continue
      a, b, c, d = boxes[i]
      surely = ink >= 27                      # > 26.5 / 255 > INK = 0.1: ink
      assert not surely[:a].any() and not surely[c:].any(), (k, i, boxes[i])
      assert not surely[:, :b].any() and not surely[:, d:].any(), (k, i, boxes[i])
      edge = ink[a:c, b:d] >= 26              # > INK rounds to 26 or more: tight
      assert edge[0].any() and edge[-1].any() and edge[:, 0].any() and edge[:, -1].any()
      checked += 1
  assert checked > 40


def test_format_and_parse_boxes_round_trip():
  boxes = np.asarray([[3, 0, 29, 17], [-1, -1, -1, -1]], np.int32)
  assert strips.format_boxes(boxes) == '3 0 29 17;-1 -1 -1 -1'
  np.testing.assert_array_equal(strips.parse_boxes('3 0 29 17;-1 -1 -1 -1'), boxes)
  assert strips.parse_boxes('').shape == (0, 4)


@pytest.fixture(scope='module')
def strips_cfg(tmp_path_factory):
  cfg = digit_strips.get_config('smoke').data
  cfg.update(num_train=24, num_valid=4, num_test=10,
             data_dir=str(tmp_path_factory.mktemp('tfds')))
  return cfg


def test_batch_boxes_give_each_target_digit_its_box_and_minus_one_elsewhere(strips_cfg):
  task = data.load_task(strips_cfg)
  assert task.has_boxes and task.location.rstrip('/').endswith('1.1.0')
  # the builder stores draw_strip's boxes: the test split drawn again from its generator
  # (the records are shuffled when prepared: matched by their digit rows)
  digits, labels = strips.mnist_5k()
  pool = strips.digit_pool('test', len(digits))
  rng = np.random.default_rng([strips_cfg.seed, builders.SPLITS.index('test')])
  drawn = {}
  for _ in range(10):
    image, text, rows, boxes = strips.draw_strip(rng, digits, labels, pool, 32, 160)
    drawn[' '.join(map(str, rows))] = image, text, boxes
  features = task.features('test')
  assert sorted(features['digit_ids']) == sorted(drawn)
  for i, (ids, stored) in enumerate(zip(features['digit_ids'], features['boxes'])):
    image, text, boxes = drawn[ids]
    assert task.texts('test')[i][1] == text
    np.testing.assert_array_equal(np.round(task.image('test', i) * 255), image)
    np.testing.assert_array_equal(strips.parse_boxes(stored), boxes)
  batches = [(b, 'test') for b in task.eval_batches('test', 8)] + [
      (next(task.train_iterator(8)), 'train')]
  assert (batches[1][0]['weight'] == 0).any()                     # 10 strips: filler rows
  for batch, split in batches:
    gold = task.batch_boxes(batch, split)
    tgt = batch['tgt_out']
    assert gold.shape == (*tgt.shape, 4) and gold.dtype == np.int32
    for r in range(len(tgt)):
      if batch['weight'][r] == 0:
        np.testing.assert_array_equal(gold[r], -1)
        continue
      index = int(batch['index'][r])
      text = task.texts(split)[index][1]
      n = len(text)
      assert task.tgt_tok.decode(tgt[r, :n].tolist()) == text        # token t is digit t
      np.testing.assert_array_equal(
          gold[r, :n], strips.parse_boxes(task.features(split)['boxes'][index]))
      np.testing.assert_array_equal(gold[r, n:], -1)                 # EOS and padding
      image = task.image(split, index)
      for y0, x0, y1, x1 in gold[r, :n]:                              # on the stored image
        assert image[y0:y1, x0:x1].max() > 0.5


def test_tasks_without_boxes_give_none(strips_cfg, data_cfg):
  reverse = data.load_task(data_cfg('reverse'))
  assert not reverse.has_boxes
  assert reverse.batch_boxes(next(reverse.train_iterator(8)), 'train') is None
  words = strips_cfg.copy_and_resolve_references()
  words.tgt_tokenizer = 'word'                # a token per strip, not per digit: no boxes
  task = data.load_task(words)
  assert not task.has_boxes and task.batch_boxes(next(task.train_iterator(8)), 'train') is None
