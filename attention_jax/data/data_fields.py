"""The `data` config section's fields. Every task reads the EveryTask fields; each task owns the
fields of its own as a frozen dataclass (fields.Fields, SECTION 'data': its module's, given to
data.register_task(name, loader, fields=...)), with their defaults, checks and smoke sizes, so
each field's default lives once (a saved config without a field means its default). A task
registered without fields reads any. A field the task does not read set to another value than
its default is refused in one line (check), on every route: config file, flag, sweep variant
(train.check_config) and load_task.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from attention_jax import fields


@dataclasses.dataclass(frozen=True)
class EveryTask(fields.Fields):
  """Read by every task: its name, tokenizers and batching."""
  SECTION = 'data'
  SMOKE = {'batch_size': 16, 'num_buckets': 1, 'vocab_size': lambda v: min(v, 200),
           'tgt_vocab_size': lambda v: min(v, 200)}
  name: str = fields.field('dates', 'a name of attention_jax.data.TASKS (data.register_task '
                           'adds one)', valid=lambda: _tasks())
  data_dir: str = fields.field('', "TFDS data dir; '' = ~/tensorflow_datasets")
  tokenizer: str = fields.field('char', 'char | word | sentencepiece')
  tgt_tokenizer: str = fields.field('', "the target's, if another ('' = data.tokenizer)")
  vocab_size: int = fields.positive(8000, "sentencepiece vocabulary size (the source's, and "
                                    "the target's unless tgt_vocab_size is set)")
  tgt_vocab_size: int = fields.count(0, "the target's sentencepiece vocabulary size (0: "
                                     'vocab_size)', '0: vocab_size')
  max_src_len: int = fields.positive(128, 'training examples longer than this (in tokens) '
                                     'are dropped')
  max_tgt_len: int = fields.positive(128, '... and targets longer than this')
  num_buckets: int = fields.positive(4, 'padded length buckets (a handful of jit shapes)')
  bucket_multiple: int = fields.positive(8, 'bucket lengths are multiples of this (8 suits '
                                         'GPUs and TPUs)')
  batch_size: int = fields.positive(64, 'global batch (per-device batch x device count)')


@dataclasses.dataclass(frozen=True)
class Generated(fields.Fields):
  """The sizes of a task drawn by an offline builder from a seed."""
  SECTION = 'data'
  SMOKE = {'num_train': 256, 'num_valid': 32, 'num_test': 32}
  seed: int = fields.field(0, 'generation seed')
  num_train: int = fields.field(20_000, 'examples per split')
  num_valid: int = fields.field(1_000)
  num_test: int = fields.field(1_000)


fields.own('every task', EveryTask)
# data.name -> the Fields of its own it reads (besides EveryTask); None: any (not declared)
TASK_FIELDS: dict[str, type[fields.Fields] | None] = {}


def own(task: str, cls: type[fields.Fields] | None) -> None:
  """Records the fields task `task` reads besides EveryTask (None: not declared)."""
  if cls is not None:
    fields.own(f'task {task}', cls)
  TASK_FIELDS[task] = cls


# ---- the fields of its own each built-in task reads (besides data_fields.EveryTask) ----------
@dataclasses.dataclass(frozen=True)
class Symbols(Generated):
  """copy, reverse, sort: random strings of symbols."""
  SMOKE = {**Generated.SMOKE, 'max_len': lambda v: min(v, 12), 'test_max_len': lambda v: min(v, 16)}
  min_len: int = fields.positive(1, 'train/valid lengths')
  max_len: int = fields.positive(50)
  test_max_len: int = fields.positive(100, 'test lengths go up to here')
  num_symbols: int = fields.positive(20, 'alphabet size')


@dataclasses.dataclass(frozen=True)
class Addition(Generated):
  max_digits: int = fields.positive(4, 'digits per operand')


@dataclasses.dataclass(frozen=True)
class Cmudict(fields.Fields):
  SECTION = 'data'
  SMOKE = {'num_train': 256, 'num_test': 32}
  seed: int = fields.field(0, 'the hashed split\'s seed')
  num_train: int = fields.field(20_000, 'train words kept (0: all)')
  num_test: int = fields.field(1_000, 'test words (the hashed split)')
  stress: bool = fields.field(False, 'keep the stress digits of the vowels (AH0 EH1 OW2)')
  variants: bool = fields.field(True, 'every pronunciation of a train word is a training pair')
  valid_fraction: float = fields.field(0.05, 'share of the non-test words held out')
  split: str = fields.one_of('hashed', ('hashed', 'standard'),
                             'hashed (SHA-256 of seed:word) | standard (the published test list)')


@dataclasses.dataclass(frozen=True)
class Canvas(Generated):
  image_height: int = fields.positive(32, 'the canvas, in pixels')
  image_width: int = fields.positive(256)


@dataclasses.dataclass(frozen=True)
class ImageDates(Canvas):
  image_fonts: str = fields.field('all', "image_builders.FONT_SETS' key of the typefaces of "
                                  'the in-font splits')
  image_augment_p: float = fields.field(1.0, 'the share of training images drawn further by '
                                        'the image_<effect> fields (image_builders.Augment)')
  image_stroke: float = fields.field(0.0, 'stroke weight (0: off)')
  image_blur: float = fields.field(0.0)
  image_contrast: float = fields.field(0.0)
  image_noise: float = fields.field(0.0)
  image_affine: float = fields.field(0.0)
  image_elastic: float = fields.field(0.0)
  image_baseline: float = fields.field(0.0)


@dataclasses.dataclass(frozen=True)
class DigitStrips(Canvas):
  digit_distortion: float = fields.field(0.0, "training digits' distortion strength (0: none)")
  digit_distortion_p: float = fields.field(1.0, 'the probability that a digit is distorted')


@dataclasses.dataclass(frozen=True)
class TextFiles(fields.Fields):
  SECTION = 'data'
  textfiles_dir: str = fields.field('', 'dir with train.src/train.tgt, valid.*, test.*')


@dataclasses.dataclass(frozen=True)
class Tfds(fields.Fields):
  SECTION = 'data'
  tfds_name: str = fields.field('ted_hrlr_translate/pt_to_en', 'any TFDS translation builder')
  src_lang: str = fields.field('pt', 'language keys of the pair')
  tgt_lang: str = fields.field('en')


@dataclasses.dataclass(frozen=True)
class GreekEnglish(fields.Fields):
  SECTION = 'data'
  SMOKE = {'verses': 640}
  verses: int = fields.count(0, "the wheel's first verses kept, in verse order, before the "
                             'split (0: all 7,936): a quick run', '0: all')


@dataclasses.dataclass(frozen=True)
class NoFields(fields.Fields):
  """A task that reads the EveryTask fields only."""
  SECTION = 'data'


# data.name -> the fields of its own (the built-in data sets' loaders: loaders.LOADERS)
BUILT_IN = {'dates': Generated, 'copy': Symbols, 'reverse': Symbols, 'sort': Symbols,
            'addition': Addition, 'cmudict': Cmudict, 'greek_english': GreekEnglish,
            'image_dates': ImageDates, 'digit_strips': DigitStrips, 'textfiles': TextFiles,
            'tfds': Tfds}
for _name, _cls in BUILT_IN.items():
  own(_name, _cls)


def _tasks() -> list[str]:
  return sorted(TASK_FIELDS)


def defaults() -> dict[str, Any]:
  """Every data field's default: the EveryTask fields, then every registered task's."""
  return {**EveryTask.defaults(), **fields.defaults('data')}


def get(d: Mapping[str, Any], name: str) -> Any:
  """data field `name` of section `d`, or its default when `d` predates the field."""
  return d[name] if name in d else defaults()[name]


def reads(task: str) -> frozenset[str] | None:
  """The data fields task `task` reads; None when it does not say (a task registered without
  its fields, or an unknown name: load fails on it)."""
  own_fields = TASK_FIELDS.get(task)
  return None if own_fields is None else frozenset(EveryTask.names()) | frozenset(
      own_fields.names())


def smoke_sizes(task: str) -> dict[str, Any]:
  """The smoke variant's sizes of the fields `task` reads (a value, or a function of the
  config's value); a task that does not declare its fields: every owner's."""
  own_fields = TASK_FIELDS.get(task)
  owners = ([EveryTask, own_fields] if own_fields is not None
            else list(fields.OWNERS.get('data', {}).values()))
  return {k: v for cls in owners for k, v in cls.SMOKE.items()}


def check(d: Mapping[str, Any]) -> None:
  """One ValueError line for a bad value of a field the task reads (its Fields' checks), or a
  field the task does not read set to another value than its default."""
  EveryTask.of(d)
  task = d.get('name', EveryTask.name)
  own_fields = TASK_FIELDS.get(task)
  if own_fields is None:
    return
  read, known = reads(task), defaults()
  unread = [k for k in known if k not in read and k in d and d[k] != known[k]]
  if unread:
    raise ValueError(
        f'data.name={task!r} does not read '
        + ', '.join(f'data.{k}={d[k]!r}' for k in unread)
        + ('; leave them at their defaults' if len(unread) > 1 else '; leave it at its default')
        + '. It reads: ' + ', '.join(k for k in known if k in read))
  own_fields.of(d)


def as_read(config: Mapping[str, Any]) -> dict[str, Any]:
  """The data section of an experiment config (or a saved one's JSON) without the fields its
  task does not read (a run saved before each task owned its fields holds them all, e.g. the
  smoke variant's max_len=12 on dates): what a resume and a sweep's "changed" compare."""
  d = dict(config.get('data', {}))
  read = reads(d.get('name', EveryTask.name))
  known = defaults()
  return d if read is None else {k: v for k, v in d.items() if k in read or k not in known}
