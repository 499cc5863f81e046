"""Real translation data sets by TFDS name, read without TensorFlow (array_record sources).

Any TFDS translation builder works when its examples hold the language pair as
  {src_lang: text, tgt_lang: text}                   a `Translation` feature (e.g.
                                                     ted_hrlr_translate/pt_to_en, wmt14_translate)
  {'translation': {src_lang: text, tgt_lang: text}}  a nested translation feature
  (src, tgt)                                         a supervised pair
The pair's direction comes from the config (data.src_lang, data.tgt_lang), not the builder.

  pairs = load_pairs('wmt14_translate/de-en', 'de', 'en', data_dir='')
  pairs['validation'][0]   # ('Gutach: Noch ...', 'Gutach: Increased ...')
"""

from __future__ import annotations

from typing import Any, Sequence

import tensorflow_datasets as tfds

from attention_jax.data import builders

# Our split name -> the names builders use for it, in order of preference.
SPLIT_NAMES = {'train': ('train',), 'validation': ('validation', 'dev', 'valid'),
               'test': ('test',)}
_CHUNK = 4096


def _text(x: Any) -> str:
  if isinstance(x, bytes):
    return x.decode('utf-8')
  if hasattr(x, 'item'):  # a numpy scalar
    return _text(x.item())
  return str(x)


def example_pair(example: Any, src_lang: str, tgt_lang: str,
                 supervised_keys: Sequence[str] | None = None) -> tuple[str, str]:
  """(src, tgt) text of one example in any of the structures of the module doc."""
  if isinstance(example, (tuple, list)) and len(example) == 2:
    return _text(example[0]), _text(example[1])
  if isinstance(example, dict):
    if src_lang in example and tgt_lang in example:
      return _text(example[src_lang]), _text(example[tgt_lang])
    if isinstance(example.get('translation'), dict):
      return example_pair(example['translation'], src_lang, tgt_lang, supervised_keys)
    if supervised_keys and all(isinstance(k, str) and k in example for k in supervised_keys):
      return _text(example[supervised_keys[0]]), _text(example[supervised_keys[1]])
    raise KeyError(f'example has keys {sorted(example)}, none of which is the pair '
                   f'({src_lang!r}, {tgt_lang!r}): set data.src_lang / data.tgt_lang')
  raise TypeError(f'unsupported example structure {type(example).__name__}')


def read_all(source) -> list[Any]:
  """Every record of a data source, in index order (read in chunks)."""
  n = len(source)
  out = []
  try:  # batched reads are faster than one by one
    for start in range(0, n, _CHUNK):
      out.extend(source.__getitems__(list(range(start, min(n, start + _CHUNK)))))
    return out
  except (AttributeError, TypeError):  # no __getitems__ (or tfds.testing.mock_data's, broken)
    return [source[i] for i in range(n)]


def _split_name(builder, split: str) -> str:
  known = list(builder.info.splits) if builder.info.splits else []
  if not known:  # unknown before preparation (and under tfds.testing.mock_data)
    return SPLIT_NAMES[split][0]
  for name in SPLIT_NAMES[split]:
    if name in known:
      return name
  raise ValueError(f'{builder.name} has splits {known}; none is our {split!r} '
                   f'(looked for {SPLIT_NAMES[split]})')


def load_pairs(name: str, src_lang: str, tgt_lang: str, *,
               data_dir: str = '') -> dict[str, list[tuple[str, str]]]:
  """{'train' | 'validation' | 'test': [(src, tgt)]} of the TFDS data set `name`.

  Prepares it into data_dir ('' = ~/tensorflow_datasets) in array_record format if it is not
  there yet (that step needs the network and the builder's own dependencies).
  """
  try:
    builder = tfds.builder(name, data_dir=data_dir or None, file_format='array_record')
  except Exception as e:  # an unknown name, a bad config name, ...
    raise ValueError(f'cannot open TFDS data set {name!r} (data.tfds_name): {e}') from e
  try:
    builder = builders.prepared(
        lambda: tfds.builder(name, data_dir=data_dir or None, file_format='array_record'))
  except Exception as e:
    raise RuntimeError(
        f'TFDS data set {name!r} is not prepared in {builder.data_dir} and could not be '
        f'prepared here (no network?): {type(e).__name__}: {e}. Prepare it once with '
        f'array_record files on a machine with network access, then point data.data_dir '
        'at that directory.') from e
  supervised = builder.info.supervised_keys
  supervised = supervised if isinstance(supervised, (tuple, list)) else None
  out = {}
  for split in SPLIT_NAMES:
    source = builder.as_data_source(split=_split_name(builder, split))
    out[split] = [example_pair(ex, src_lang, tgt_lang, supervised) for ex in read_all(source)]
  return out
