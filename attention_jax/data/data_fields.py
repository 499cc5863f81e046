"""The `data` config section's fields: each one's default (the one place: the experiment
configs start from DEFAULTS, and a saved config without a field means its default), and which
fields each task reads. Every task reads COMMON; a task's own fields are its TASK_FIELDS entry
(register_task(name, loader, fields=...) adds one; a task registered without fields reads any).
A field the task does not read set to another value than its default is refused in one line
(check), on every route: config file, flag, sweep variant (train.check_config) and load_task.
"""

from __future__ import annotations

from typing import Any, Mapping

DEFAULTS: dict[str, Any] = {
    'name': 'dates',          # a name of attention_jax.data.TASKS (data.register_task adds one)
    'data_dir': '',           # TFDS data dir; '' = ~/tensorflow_datasets
    'seed': 0,                # generation seed of the offline tasks
    'num_train': 20_000,      # examples per split for the offline tasks
    'num_valid': 1_000,
    'num_test': 1_000,
    'min_len': 1,             # symbol tasks (copy/reverse/sort): train/valid lengths
    'max_len': 50,
    'test_max_len': 100,      # symbol tasks: test lengths go up to here
    'num_symbols': 20,        # symbol tasks: alphabet size
    'max_digits': 4,          # addition: digits per operand
    'stress': False,          # cmudict: keep the stress digits of the vowels (AH0 EH1 OW2)
    'variants': True,         # cmudict: every pronunciation of a train word is a training pair
    'valid_fraction': 0.05,   # cmudict: share of the non-test words held out for validation
    'split': 'hashed',        # cmudict: hashed (SHA-256 of seed:word) | standard (the published
                              # test list)
    'textfiles_dir': '',      # textfiles: dir with train.src/train.tgt, valid.*, test.*
    'tfds_name': 'ted_hrlr_translate/pt_to_en',  # tfds: any translation builder
    'src_lang': 'pt',         # tfds: language keys of the pair
    'tgt_lang': 'en',
    'image_height': 32,       # image tasks: the canvas, in pixels
    'image_width': 256,
    'image_fonts': 'all',     # image_dates: image_builders.FONT_SETS' key of the in-font splits
    'image_augment_p': 1.0,   # image_dates: the share of training images drawn further by ...
    # ... these (image_builders.Augment; 0: off)
    **{f'image_{f}': 0.0 for f in ('stroke', 'blur', 'contrast', 'noise', 'affine', 'elastic',
                                   'baseline')},
    'digit_distortion': 0.0,  # digit_strips: training digits' distortion strength (0: none)
    'digit_distortion_p': 1.0,  # ... the probability that a training digit is distorted
    'tokenizer': 'char',      # char | word | sentencepiece
    'tgt_tokenizer': '',      # the target's, if another ('' = data.tokenizer); cmudict: word
    'vocab_size': 8000,       # sentencepiece vocabulary size (the source's, and the target's
                              # unless tgt_vocab_size is set)
    'tgt_vocab_size': 0,      # the target's sentencepiece vocabulary size (0: vocab_size)
    'max_src_len': 128,       # training examples longer than this (in tokens) are dropped
    'max_tgt_len': 128,
    'num_buckets': 4,         # padded length buckets (a handful of jit shapes)
    'bucket_multiple': 8,     # bucket lengths are multiples of this (8 suits GPUs and TPUs)
    'batch_size': 64,         # global batch (per-device batch x device count)
}

# read by every task: its name, tokenizers and batching
COMMON = ('name', 'data_dir', 'tokenizer', 'tgt_tokenizer', 'vocab_size', 'tgt_vocab_size',
          'max_src_len',
          'max_tgt_len', 'num_buckets', 'bucket_multiple', 'batch_size')
_GENERATED = ('seed', 'num_train', 'num_valid', 'num_test')   # the offline builders' sizes
_SYMBOLS = _GENERATED + ('min_len', 'max_len', 'test_max_len', 'num_symbols')
_IMAGES = _GENERATED + ('image_height', 'image_width')
# data.name -> the fields of its own it reads (besides COMMON); None: any (not declared)
TASK_FIELDS: dict[str, tuple[str, ...] | None] = {
    'dates': _GENERATED,
    'copy': _SYMBOLS, 'reverse': _SYMBOLS, 'sort': _SYMBOLS,
    'addition': _GENERATED + ('max_digits',),
    'cmudict': ('seed', 'num_train', 'num_test', 'stress', 'variants', 'valid_fraction',
                'split'),
    'image_dates': _IMAGES + ('image_fonts', 'image_augment_p') + tuple(
        k for k in DEFAULTS if k.startswith('image_') and k not in (
            'image_height', 'image_width', 'image_fonts', 'image_augment_p')),
    'digit_strips': _IMAGES + ('digit_distortion', 'digit_distortion_p'),
    'textfiles': ('textfiles_dir',),
    'greek_english': (),
    'tfds': ('tfds_name', 'src_lang', 'tgt_lang'),
}


def get(d: Mapping[str, Any], name: str) -> Any:
  """data field `name` of section `d`, or its default when `d` predates the field."""
  return d[name] if name in d else DEFAULTS[name]


def reads(task: str) -> frozenset[str] | None:
  """The data fields task `task` reads; None when it does not say (a task registered without
  its fields, or an unknown name: load fails on it)."""
  own = TASK_FIELDS.get(task)
  return None if own is None else frozenset(COMMON) | frozenset(own)


def check(d: Mapping[str, Any]) -> None:
  """One ValueError line when the data section `d` sets a field its task does not read to
  another value than its default."""
  task = d.get('name', DEFAULTS['name'])
  read = reads(task)
  if read is None:
    return
  unread = [k for k in DEFAULTS if k not in read and k in d and d[k] != DEFAULTS[k]]
  if unread:
    raise ValueError(
        f'data.name={task!r} does not read '
        + ', '.join(f'data.{k}={d[k]!r}' for k in unread)
        + ('; leave them at their defaults' if len(unread) > 1 else '; leave it at its default')
        + '. It reads: ' + ', '.join(k for k in DEFAULTS if k in read))


def as_read(config: Mapping[str, Any]) -> dict[str, Any]:
  """The data section of an experiment config (or a saved one's JSON) without the fields its
  task does not read (a run saved before each task owned its fields holds them all, e.g. the
  smoke variant's max_len=12 on dates): what a resume and a sweep's "changed" compare."""
  d = dict(config.get('data', {}))
  read = reads(d.get('name', DEFAULTS['name']))
  return d if read is None else {k: v for k, v in d.items() if k in read or k not in DEFAULTS}
