"""The data sets by name (data.name): each a loader(cfg.data) -> Loaded, the (source, target)
strings of its splits. The built-in ones: our offline TFDS builders (builders.py,
image_builders.py), CMUdict (cmudict.py), a user's text files (textfiles.py) and any TFDS
translation set by name (tfds_translation.py). A new data set is one register_task(name,
loader), in this package or in the researcher's own module (tests/throwaway_task.py).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from attention_jax.data import bible, builders, cmudict, image_builders, textfiles, tfds_translation
from attention_jax import fields
from attention_jax.data import data_fields

SPLITS = ('train', 'validation', 'test')


def _text(x: Any) -> str:
  return x.decode('utf-8') if isinstance(x, bytes) else str(x)


class Loaded(NamedTuple):
  """What a data set's loader gives: (source, target) strings per split, per-split extra
  string features (references, locales, ...), where the data came from, and for image tasks
  the source images per split (uint8 [N, H, W]; the strings then say what is drawn)."""
  texts: dict[str, list[tuple[str, str]]]
  extras: dict[str, dict[str, list[str]]]
  location: str
  images: dict[str, np.ndarray] | None = None


def _read_builder(builder) -> Loaded:
  """All examples of a prepared builder."""
  sources = builder.as_data_source()
  features = builder.info.features
  extra_keys = [k for k in features if k not in ('src', 'tgt', 'image')]
  texts, extras, images = {}, {}, {}
  # the three splits, then any a builder adds (image_dates: test_heldout_fonts)
  for split in (*SPLITS, *sorted(set(builder.info.splits) - set(SPLITS))):
    examples = tfds_translation.read_all(sources[split])
    texts[split] = [(_text(ex['src']), _text(ex['tgt'])) for ex in examples]
    extras[split] = {k: [_text(ex[k]) for ex in examples] for k in extra_keys}
    if 'image' in features:
      images[split] = np.stack([np.asarray(ex['image'], np.uint8) for ex in examples])
  return Loaded(texts, extras, str(builder.data_dir), images or None)


def _builder(prepare: Callable) -> Callable:
  """A loader of one of our offline TFDS builders (`prepare(cfg.data)` builds it once)."""
  return lambda d: _read_builder(prepare(d))


def _tfds(d) -> Loaded:
  pairs = tfds_translation.load_pairs(d.tfds_name, d.src_lang, d.tgt_lang, data_dir=d.data_dir)
  return Loaded(pairs, {}, f'{d.tfds_name} ({d.src_lang} -> {d.tgt_lang})')


# data.name -> loader(cfg.data) -> Loaded: the built-in data sets
# (the fields of its own each reads: data_fields.BUILT_IN)
LOADERS: dict[str, Callable[[Any], Loaded]] = {
    **{name: _builder(functools.partial(builders.prepare, name)) for name in builders.BUILDERS},
    'cmudict': _builder(cmudict.prepare),
    'greek_english': _builder(bible.prepare),
    **{name: _builder(functools.partial(image_builders.prepare_image_task, name))
       for name in image_builders.IMAGE_BUILDERS},
    'textfiles': lambda d: Loaded(textfiles.read_corpus(d.textfiles_dir), {}, d.textfiles_dir),
    'tfds': _tfds,
}
TASKS = LOADERS.keys()   # the registered names, as they are now (a view: register_task adds)


def register_task(name: str, loader: Callable[[Any], Loaded],
                  fields: type[fields.Fields] | None = None) -> Callable[[Any], Loaded]:
  """Makes `data.name=name` load with `loader(cfg.data) -> Loaded` (texts per split 'train',
  'validation', 'test'; extras; where it came from; images for image tasks). `fields`: the
  data fields of its own the loader reads besides data_fields.EveryTask, a frozen dataclass
  (fields.Fields with SECTION = 'data': defaults, checks, smoke sizes; the others must keep
  their defaults); None: not declared, any may be set. A name already taken is refused in one
  line naming the registered ones."""
  if not name or not name.replace('_', '').isalnum():
    raise ValueError(f'a task name is letters, digits and _, got {name!r}')
  if name in LOADERS:
    raise ValueError(f'task {name!r} is already registered; registered: {", ".join(LOADERS)}')
  data_fields.own(name, fields)
  LOADERS[name] = loader
  return loader


# data.name -> fetch(cfg.data): what a loader needs from outside, had before a run touches its
# workdir (a failure is one line and leaves nothing behind)
FETCH: dict[str, Callable[[Any], Any]] = {
    'greek_english': lambda d: bible.fetch_wheel(d.data_dir),
}


def fetch(d) -> None:
  """Fetches what task d.name needs from outside (once; nothing for most tasks)."""
  if d.name in FETCH:
    FETCH[d.name](d)


def load(d) -> Loaded:
  """The data set of cfg.data `d` by its name; an unknown name fails naming the valid ones."""
  if d.name not in LOADERS:
    raise ValueError(f'unknown data.name {d.name!r}; valid: {", ".join(LOADERS)}')
  return LOADERS[d.name](d)
