"""Offline TFDS builders for the synthetic tasks: dates, copy, reverse, sort, addition.

Each task is a `tfds.core.GeneratorBasedBuilder` written in array_record (read back without
TensorFlow through `as_data_source()`), with train / validation / test splits generated
deterministically from a seed. Every generation parameter is part of the builder config's
name, so different parameters land in different directories:

  <data_dir>/aj_reverse/n20000-1000-1000_len1-50-100_sym20_seed0/1.0.0/...

The splits never share a source string: test is drawn first, then validation, then train,
each rejecting any source already drawn (so the test set does not change with num_train).
Features: `src`, `tgt` (text); dates also store the `locale` and `style` of the source.

  builder = prepare('dates', cfg.data)   # generates once, then reuses the files
  ds = builder.as_data_source()          # {'train': ..., 'validation': ..., 'test': ...}
  ds['train'][0]                         # {'src': b'22. November 2026', 'tgt': b'2026-11-22', ...}

The date strings come from Babel's CLDR data: another Babel release may word a few formats
differently, so a data set regenerated elsewhere can differ (a prepared one is reused as is).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import functools
import inspect
import logging
import os
import string
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow_datasets as tfds
from babel import Locale
from babel import dates as babel_dates
from etils import epath

from attention_jax import hold

SPLITS = ('train', 'validation', 'test')
_GEN_ORDER = ('test', 'validation', 'train')


@dataclasses.dataclass(eq=False)
class TaskBuilderConfig(tfds.core.BuilderConfig):
  """Generation parameters. Build it with `make_config`, which derives `name` from them."""
  num_train: int = 1000
  num_valid: int = 100
  num_test: int = 100
  seed: int = 0
  min_len: int = 1         # copy / reverse / sort: train and validation lengths
  max_len: int = 50
  test_max_len: int = 100  # copy / reverse / sort: test lengths go up to here
  num_symbols: int = 20
  max_digits: int = 4      # addition: operands have 1..max_digits digits


def make_config(task: str, data_cfg: Any) -> TaskBuilderConfig:
  """The builder config of `task` from the `data` section of the experiment config."""
  d = data_cfg
  sizes = dict(num_train=int(d.num_train), num_valid=int(d.num_valid), num_test=int(d.num_test),
               seed=int(d.seed))
  for key, n in sizes.items():
    if n < 0 or (key != 'seed' and n == 0):
      raise ValueError(f'data.{key} must be positive, got {n}')
  name = f'n{sizes["num_train"]}-{sizes["num_valid"]}-{sizes["num_test"]}'
  extra = {}
  if task in SYMBOL_TASKS:
    extra = dict(min_len=int(d.min_len), max_len=int(d.max_len),
                 test_max_len=int(d.test_max_len), num_symbols=int(d.num_symbols))
    if not 1 <= extra['min_len'] <= extra['max_len'] <= extra['test_max_len']:
      raise ValueError('need 1 <= data.min_len <= data.max_len <= data.test_max_len, got '
                       f'{extra["min_len"]}, {extra["max_len"]}, {extra["test_max_len"]}')
    if not 2 <= extra['num_symbols'] <= len(SYMBOLS):
      raise ValueError(f'data.num_symbols must be in [2, {len(SYMBOLS)}], '
                       f'got {extra["num_symbols"]}')
    name += (f'_len{extra["min_len"]}-{extra["max_len"]}-{extra["test_max_len"]}'
             f'_sym{extra["num_symbols"]}')
  elif task == 'addition':
    extra = dict(max_digits=int(d.max_digits))
    if not 1 <= extra['max_digits'] <= 30:
      raise ValueError(f'data.max_digits must be in [1, 30], got {extra["max_digits"]}')
    name += f'_digits{extra["max_digits"]}'
  elif task != 'dates':
    raise ValueError(f'no offline builder for task {task!r}; valid: {", ".join(BUILDERS)}')
  name += f'_seed{sizes["seed"]}'
  return TaskBuilderConfig(name=name, **sizes, **extra)


def draw_unique(draw: Callable[[np.random.Generator, str], dict], counts: dict[str, int],
                rng: np.random.Generator) -> dict[str, list[dict]]:
  """Draws counts[split] examples per split (test first), no source string twice."""
  seen: dict[str, str] = {}
  out = {}
  for split in _GEN_ORDER:
    examples = []
    attempts = 0
    while len(examples) < counts[split]:
      attempts += 1
      if attempts > 50 * counts[split] + 1000:
        raise ValueError(f'could only draw {len(examples)} of {counts[split]} distinct '
                         f'{split} examples: the task space is too small for the requested '
                         'sizes (lower num_* or raise the lengths / number of symbols)')
      ex = draw(rng, split)
      prev = seen.get(ex['src'])
      if prev is not None:
        if prev != ex['tgt']:  # a source with two answers would be unlearnable
          raise AssertionError(f'ambiguous source {ex["src"]!r}: {prev!r} vs {ex["tgt"]!r}')
        continue
      seen[ex['src']] = ex['tgt']
      examples.append(ex)
    out[split] = examples
  return out


class _NoCustomConfigWarning(logging.Filter):
  """Our configs are built from the experiment config, never listed in BUILDER_CONFIGS."""

  def filter(self, record):
    return 'custom data configuration' not in record.getMessage()


@contextlib.contextmanager
def quiet_tfds():
  """No tqdm progress bars, no custom-config warning (restores the previous setting)."""
  from tensorflow_datasets.core.utils import tqdm_utils  # pylint: disable=g-import-not-at-top
  active = getattr(tqdm_utils, '_active', True)
  tfds.display_progress_bar(False)
  log_filter = _NoCustomConfigWarning()
  logging.getLogger('absl').addFilter(log_filter)
  try:
    yield
  finally:
    logging.getLogger('absl').removeFilter(log_filter)
    tfds.display_progress_bar(active)


def prepared(make: Callable[[], tfds.core.DatasetBuilder]) -> tfds.core.DatasetBuilder:
  """make() prepared: download_and_prepare() under an exclusive lock beside its data dir.

  Runs of a sweep start together and may all find the data set missing: unlocked, each
  generates it and all but the first fail renaming theirs into place. Locked, the first
  generates it; the others wait, then build again (a builder made before the data existed
  knows no splits) and find it prepared. (flock: local disks and NFS.)
  """
  parent = os.path.dirname(os.fspath(make().data_dir).rstrip('/'))
  os.makedirs(parent, exist_ok=True)
  with open(os.path.join(parent, '.prepare.lock'), 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes (or the process dies)
    builder = make()
    builder.download_and_prepare()
  return builder


class TaskBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Shared plumbing: features src/tgt, three splits generated together."""
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  DESCRIPTION = ''
  EXTRA_FEATURES: tuple[str, ...] = ()

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # TFDS's own lookup needs the `importlib_resources` package for builders in packages.
    return epath.Path(inspect.getfile(cls))

  def _info(self) -> tfds.core.DatasetInfo:
    features = {'src': tfds.features.Text(), 'tgt': tfds.features.Text(),
                **{k: tfds.features.Text() for k in self.EXTRA_FEATURES}}
    return tfds.core.DatasetInfo(
        builder=self, description=self.DESCRIPTION,
        features=tfds.features.FeaturesDict(features), supervised_keys=('src', 'tgt'))

  def _split_generators(self, dl_manager):
    del dl_manager
    c = self.builder_config
    counts = {'train': c.num_train, 'validation': c.num_valid, 'test': c.num_test}
    examples = draw_unique(self._draw, counts, np.random.default_rng(c.seed))
    return {split: self._generate_examples(examples[split]) for split in SPLITS}

  def _generate_examples(self, examples: list[dict]) -> Iterator[tuple[str, dict]]:
    hold.point('data_generate', task=self.name)   # tests only (hold.py)
    for i, ex in enumerate(examples):
      yield f'{i:08d}', ex

  def _draw(self, rng: np.random.Generator, split: str) -> dict:
    raise NotImplementedError


# ---- dates -------------------------------------------------------------------------------

LOCALES = ('en', 'de', 'fr', 'es')
CLDR_STYLES = ('full', 'long', 'medium', 'short')
FIRST_DATE, LAST_DATE = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)
TWO_DIGIT_YEARS = (1950, 2049)  # 'yy' is read as 19yy for yy >= 50, else 20yy
# es 'short' is d/M/yy, which clashes with en 'short' M/d/yy ("5/3/26"): left out.
_EXCLUDED = {('es', 'short')}


def _ordinal(day: int) -> str:
  if 11 <= day % 100 <= 13:
    return f'{day}th'
  return f'{day}{ {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")}'


@functools.lru_cache(maxsize=None)
def _en_month(m: int, width: str = 'wide') -> str:
  return Locale.parse('en').months['format'][width][m]


# Hand-written English variants: (name, uses a two-digit year, format function).
HANDWRITTEN = (
    ('ordinal_of', False, lambda d: f'{_ordinal(d.day)} of {_en_month(d.month)} {d.year}'),
    ('month_ordinal', False, lambda d: f'{_en_month(d.month)} {_ordinal(d.day)}, {d.year}'),
    ('d_mon_y', False, lambda d: f'{d.day} {_en_month(d.month, "abbreviated")} {d.year}'),
    ('dd-MON-yyyy', False,
     lambda d: f'{d.day:02d}-{_en_month(d.month, "abbreviated").upper()}-{d.year}'),
    ('yyyy/mm/dd', False, lambda d: f'{d.year}/{d.month:02d}/{d.day:02d}'),
    ('mm/dd/yy', True, lambda d: f'{d.month:02d}/{d.day:02d}/{d.year % 100:02d}'),
)


@functools.lru_cache(maxsize=None)
def date_formats() -> tuple[tuple[str, str, bool, Callable[[datetime.date], str]], ...]:
  """[(locale, style, two_digit_year, format)]: CLDR styles via Babel, then hand-written.

  The CLDR patterns (Unicode CLDR, through Babel's `format_date`) give e.g. for 2026-11-22:
  en 'Sunday, November 22, 2026', de '22.11.26', fr '22 nov. 2026', es '22 de noviembre de
  2026'; the hand-written ones '22nd of November 2026', '11/22/26', '22-NOV-2026', ...
  """
  out = []
  for loc in LOCALES:
    locale = Locale.parse(loc)
    for style in CLDR_STYLES:
      if (loc, style) in _EXCLUDED:
        continue
      pattern = locale.date_formats[style].pattern
      two_digit = 'yy' in pattern and 'yyy' not in pattern
      out.append((loc, style, two_digit,
                  lambda d, s=style, l=locale: babel_dates.format_date(d, s, locale=l)))
  out += [('en', name, two, fn) for name, two, fn in HANDWRITTEN]
  return tuple(out)


class AjDates(TaskBuilder, skip_registration=True):
  """Human-readable dates in many formats and locales -> ISO 8601 (YYYY-MM-DD)."""
  name = 'aj_dates'
  DESCRIPTION = ('Dates 1900-2099 written in CLDR full/long/medium/short formats (Babel) in '
                 f'{", ".join(LOCALES)} and hand-written English variants -> ISO 8601.')
  EXTRA_FEATURES = ('locale', 'style')

  def _draw(self, rng, split):
    day = FIRST_DATE + datetime.timedelta(
        days=int(rng.integers((LAST_DATE - FIRST_DATE).days + 1)))
    formats = date_formats()
    if not TWO_DIGIT_YEARS[0] <= day.year <= TWO_DIGIT_YEARS[1]:
      formats = [f for f in formats if not f[2]]
    loc, style, _, fn = formats[int(rng.integers(len(formats)))]
    return {'src': fn(day), 'tgt': day.isoformat(), 'locale': loc, 'style': style}


# ---- symbol tasks: copy, reverse, sort ---------------------------------------------------

SYMBOLS = string.ascii_lowercase + string.ascii_uppercase


class _SymbolBuilder(TaskBuilder, skip_registration=True):
  """A string over num_symbols letters (one character per symbol), its length uniform in
  [min_len, max_len] ([min_len, test_max_len] for test)."""

  def _draw(self, rng, split):
    c = self.builder_config
    hi = c.test_max_len if split == 'test' else c.max_len
    n = int(rng.integers(c.min_len, hi + 1))
    src = ''.join(SYMBOLS[i] for i in rng.integers(c.num_symbols, size=n))
    return {'src': src, 'tgt': self.target(src)}

  @staticmethod
  def target(src: str) -> str:
    raise NotImplementedError


class AjCopy(_SymbolBuilder, skip_registration=True):
  """Copy the symbol string."""
  name = 'aj_copy'
  DESCRIPTION = 'Copy a string of symbols (gold alignment: target j <- source j).'
  target = staticmethod(lambda src: src)


class AjReverse(_SymbolBuilder, skip_registration=True):
  """Reverse the symbol string."""
  name = 'aj_reverse'
  DESCRIPTION = 'Reverse a string of symbols (gold alignment: target j <- source n-1-j).'
  target = staticmethod(lambda src: src[::-1])


class AjSort(_SymbolBuilder, skip_registration=True):
  """Sort the symbols (by code point; stable for the gold alignment)."""
  name = 'aj_sort'
  DESCRIPTION = 'Sort a string of symbols (gold alignment: the stable sorting permutation).'
  target = staticmethod(lambda src: ''.join(sorted(src)))


# ---- addition ----------------------------------------------------------------------------


class AjAddition(TaskBuilder, skip_registration=True):
  """'123+4567' -> '4690', as in the Flax seq2seq example (examples/seq2seq).

  Unlike Flax (operands uniform in [1, 10^3]), each operand first draws its number of digits
  uniformly in [1, max_digits], so short and long sums are equally common.
  """
  name = 'aj_addition'
  DESCRIPTION = 'Integer addition written in decimal: "123+4567" -> "4690".'

  def _draw(self, rng, split):
    def operand():
      digits = int(rng.integers(1, self.builder_config.max_digits + 1))
      lo = 0 if digits == 1 else 10 ** (digits - 1)
      return lo + int(rng.integers(10 ** digits - lo))
    a, b = operand(), operand()
    return {'src': f'{a}+{b}', 'tgt': str(a + b)}


BUILDERS = {'dates': AjDates, 'copy': AjCopy, 'reverse': AjReverse, 'sort': AjSort,
            'addition': AjAddition}
SYMBOL_TASKS = ('copy', 'reverse', 'sort')


def prepare(task: str, data_cfg: Any) -> tfds.core.DatasetBuilder:
  """Generates the task's splits into data_cfg.data_dir ('' = ~/tensorflow_datasets) once.

  Offline and TensorFlow-free (array_record); later calls reuse the prepared files.
  """
  if task not in BUILDERS:
    raise ValueError(f'no offline builder for task {task!r}; valid: {", ".join(BUILDERS)}')
  with quiet_tfds():
    return prepared(lambda: BUILDERS[task](config=make_config(task, data_cfg),
                                           data_dir=data_cfg.data_dir or None,
                                           file_format='array_record'))


# ---- gold alignments ---------------------------------------------------------------------


def _copy_alignment(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
  return np.where(np.arange(len(tgt)) < len(src), np.arange(len(tgt)), -1)


def _reverse_alignment(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
  j = len(src) - 1 - np.arange(len(tgt))
  return np.where(j >= 0, j, -1)


def _sort_alignment(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
  """Target token j <- the k-th occurrence in the source of that token, where k counts its
  earlier occurrences in the target (the stable sorting permutation); -1 if absent."""
  positions: dict[int, list[int]] = {}
  for s, tok in enumerate(src.tolist()):
    positions.setdefault(tok, []).append(s)
  used: dict[int, int] = {}
  out = np.full(len(tgt), -1, np.int64)
  for j, tok in enumerate(tgt.tolist()):
    k = used.get(tok, 0)
    if k < len(positions.get(tok, ())):
      out[j] = positions[tok][k]
    used[tok] = k + 1
  return out


ALIGNMENTS = {'copy': _copy_alignment, 'reverse': _reverse_alignment, 'sort': _sort_alignment}


def gold_alignment(task: str, src_ids, tgt_ids) -> np.ndarray | None:
  """src_ids [S'], tgt_ids [T'] (no BOS/EOS, char tokens) -> int32 [T' + 1] or None.

  For each `tgt_out` position (the T' target tokens, then EOS) the gold source position:
  a source token index, S' (the source EOS) for the final EOS, -1 where there is none.
  None for tasks without a gold alignment (dates, addition, text).
  """
  fn = ALIGNMENTS.get(task)
  if fn is None:
    return None
  src, tgt = np.asarray(src_ids), np.asarray(tgt_ids)
  return np.append(fn(src, tgt), len(src)).astype(np.int32)
