"""`greek_english`: Koine Greek to English, verse by verse, with manual word alignments.

The texts and alignments come from the wheel of the `bible-alignments` 0.4.2 package (Clear
Bible; fetched alone with `pip download --no-deps`, its SHA-256 checked, never installed: it
declares django and jupyterlab, which nothing here needs). Its data sit at the zip's top level:

  data/sources/SBLGNT.tsv                          the SBL Greek New Testament (CC BY 4.0,
                                                   Society of Biblical Literature and Logos),
                                                   one row per word, id nBBCCCVVVWWW
  data/eng/targets/BSB/nt_BSB.tsv                  the Berean Standard Bible New Testament
                                                   (public domain), one row per token, with the
                                                   Greek verse it translates (source_verse),
                                                   exclude=y on punctuation, skip_space_after
  data/eng/alignments/BSB/SBLGNT-BSB-manual.json   manual alignments (CC BY 4.0, Biblica):
                                                   records of Greek word ids to English ids

Examples, one per Greek verse that has English (7,936 in the wheel):
  src    the verse's Greek words joined by spaces (the SBLGNT has no punctuation)
  tgt    its English, detokenised (a space after each token but where skip_space_after=y)
  links  the gold as Pharaoh links 'i-j' over whitespace words (Greek word i, English word j,
         0-indexed): every pair of a record's Greek and English words, an English word being
         the tokens between two spaces (so 'Christ,' holds 'Christ' and ','); a record's
         links to another verse's words are left out
  gold   '1' when some record aligns a word of the verse, else '0' (no gold: left out of the
         alignment figures, and of guided alignment)
  verse  the Greek verse id BBCCCVVV (book 40 = Matthew ... 66 = Revelation)

Split (stable, independent of any generator): the first byte of SHA-256('<verse id>') mod 16
is 0 for test, 1 for validation, else train (506 test and 486 validation verses of the
wheel's 7,936; 6,944 train). `data.verses` > 0 keeps only the first verses, in verse order,
before the split (a smoke run's data: 640 verses hold 33 test and 42 validation verses).

  builder = prepare(cfg.data)                 # fetches the wheel once, builds the splits once
  builder.as_data_source()['test'][0]        # {'src': b'...', 'tgt': b'...', 'links': b'0-0 ...'}
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Any, Iterator

import tensorflow_datasets as tfds

from attention_jax.data import builders, data_fields, pharaoh

REQUIREMENT = 'bible-alignments==0.4.2'
WHEEL = 'bible_alignments-0.4.2-py3-none-any.whl'
SHA256 = '84f6b15e706657777824aac811567cb5cb2b38ad2b94497209f5f3c3f67b0984'
SOURCE = 'data/sources/SBLGNT.tsv'
TARGET = 'data/eng/targets/BSB/nt_BSB.tsv'
ALIGNMENTS = 'data/eng/alignments/BSB/SBLGNT-BSB-manual.json'
SPLIT_MODULUS = 16   # SHA-256 of the verse id, first byte mod 16: 0 test, 1 validation
CREDITS = ('SBL Greek New Testament (CC BY 4.0, Society of Biblical Literature and Logos Bible '
           'Software); Berean Standard Bible (public domain); manual alignments (CC BY 4.0, '
           'Biblica), from the bible-alignments 0.4.2 wheel (MIT, Clear Bible)')


class DataUnavailable(ValueError):
  """The wheel could not be had: one line saying why and what to do."""


def sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      h.update(block)
  return h.hexdigest()


def download_dir(data_dir: str) -> str:
  """Where the wheel is kept: <data_dir or ~/tensorflow_datasets>/downloads/."""
  root = data_dir or os.path.join(os.path.expanduser('~'), 'tensorflow_datasets')
  return os.path.join(root, 'downloads')


def fetch_wheel(data_dir: str = '', *, timeout: int = 30) -> str:
  """The wheel's path, fetched once with `pip download --no-deps` and its SHA-256 checked.
  Nothing is left behind when that fails (no network, a changed file): DataUnavailable, one
  line, which names where to put the wheel by hand."""
  path = os.path.join(download_dir(data_dir), WHEEL)
  if os.path.exists(path):
    got = sha256(path)
    if got != SHA256:
      raise DataUnavailable(f'{path}: SHA-256 {got[:16]}... is not the expected {SHA256[:16]}... '
                            f'of {REQUIREMENT}: delete it and run again to fetch it anew')
    return path
  tmp = tempfile.mkdtemp(prefix='bible_wheel_')
  try:
    cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check',
           '--retries', '1', '--timeout', str(timeout), '--only-binary', ':all:', '-d', tmp,
           REQUIREMENT]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    got = os.path.join(tmp, WHEEL)
    if proc.returncode or not os.path.exists(got):
      lines = [l.strip() for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
      why = next((l for l in reversed(lines) if l.startswith('ERROR')), lines[-1] if lines else '')
      raise DataUnavailable(
          f'greek_english: could not fetch {REQUIREMENT} with pip ({why[:160]}); without a '
          f'network, put {WHEEL} (sha256 {SHA256}) at {path}')
    digest = sha256(got)
    if digest != SHA256:
      raise DataUnavailable(f'greek_english: the fetched {WHEEL} has SHA-256 {digest[:16]}..., '
                            f'not the expected {SHA256[:16]}...: refusing to use it')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.move(got, path + '.tmp')
    os.replace(path + '.tmp', path)
    return path
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _tsv(z: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
  with z.open(name) as f:
    return list(csv.DictReader(io.TextIOWrapper(f, encoding='utf-8'), delimiter='\t',
                               quoting=csv.QUOTE_NONE))


def split_of(verse: str) -> str:
  """The split of a verse id by the module doc's rule."""
  b = hashlib.sha256(verse.encode()).digest()[0] % SPLIT_MODULUS
  return 'test' if b == 0 else 'validation' if b == 1 else 'train'


def read_wheel(path: str) -> tuple[list[dict[str, str]], dict[str, int]]:
  """The wheel -> (one example per verse with English, in verse order: src, tgt, links, gold,
  verse; counts of what was left out)."""
  with zipfile.ZipFile(path) as z:
    greek, english = _tsv(z, SOURCE), _tsv(z, TARGET)
    with z.open(ALIGNMENTS) as f:
      records = json.load(f)['records']
  words = collections.OrderedDict()    # verse -> Greek words in order
  where_src = {}                       # Greek id -> (verse, word index)
  for row in greek:
    verse = row['id'][1:9]
    where_src[row['id']] = (verse, len(words.setdefault(verse, [])))
    words[verse].append(row['text'])
  tokens = collections.defaultdict(list)   # verse -> its English token rows
  for row in english:
    tokens[row['source_verse']].append(row)
  texts, where_tgt = {}, {}            # English id -> (verse, whitespace word index)
  for verse, rows in tokens.items():
    rows.sort(key=lambda r: r['id'])
    text, word = [], 0
    for r in rows:
      where_tgt[r['id']] = (verse, word)
      text.append(r['text'])
      if r['skip_space_after'] != 'y':
        text.append(' ')
        word += 1
    texts[verse] = ''.join(text).strip()
  links = collections.defaultdict(set)
  left_out = collections.Counter()
  for rec in records:
    for s in rec['source']:
      if s not in where_src:
        left_out['links to unknown ids'] += len(rec['target'])
        continue
      verse, i = where_src[s]
      for t in rec['target']:
        tv = where_tgt.get(t)
        if tv is None or tv[0] != verse:
          left_out['links to another verse'] += 1
          continue
        links[verse].add((i, tv[1]))
  examples = []
  for verse, ws in words.items():
    if not texts.get(verse):
      left_out['verses without English'] += 1
      continue
    examples.append({'src': ' '.join(ws), 'tgt': texts[verse],
                     'links': pharaoh.format_links(sorted(links[verse])),
                     'gold': '1' if links[verse] else '0', 'verse': verse})
  left_out['English verses without Greek'] = len(set(tokens) - set(words))
  return examples, dict(left_out)


@dataclasses.dataclass(eq=False)
class BibleConfig(tfds.core.BuilderConfig):
  """The wheel the splits are read from (its checksum names the config), and the verses kept
  (0: all)."""
  wheel: str = ''
  verses: int = 0


class AjGreekEnglish(builders.TaskBuilder, skip_registration=True):
  """SBLGNT Greek -> BSB English verses with manual word alignments (module doc)."""
  name = 'aj_greek_english'
  DESCRIPTION = 'Koine Greek (SBLGNT) to English (BSB) verses with manual word alignments.'
  EXTRA_FEATURES = ('links', 'gold', 'verse')

  def _split_generators(self, dl_manager):
    del dl_manager
    examples, _ = read_wheel(self.builder_config.wheel)
    if self.builder_config.verses:
      examples = examples[:self.builder_config.verses]
    by_split = {split: [] for split in builders.SPLITS}
    for ex in examples:
      by_split[split_of(ex['verse'])].append(ex)
    return {split: self._generate_examples(exs) for split, exs in by_split.items()}

  def _generate_examples(self, examples: list[dict]) -> Iterator[tuple[str, dict]]:
    for ex in examples:
      yield ex['verse'], ex


def prepare(data_cfg: Any, *, wheel: str | None = None,
            expected_sha256: str = SHA256) -> tfds.core.DatasetBuilder:
  """Builds the splits into data_cfg.data_dir once, from `wheel` (default: fetched, checked)."""
  if wheel is None:
    wheel = fetch_wheel(data_cfg.data_dir)
  digest = sha256(wheel)
  if digest != expected_sha256:
    raise DataUnavailable(f'{wheel}: SHA-256 {digest[:16]}... is not the expected '
                          f'{expected_sha256[:16]}...')
  verses = int(data_fields.get(data_cfg, 'verses'))   # 0 in a config that predates it
  config = BibleConfig(name=f'wheel{digest[:12]}_split{SPLIT_MODULUS}'
                       + (f'_verses{verses}' if verses else ''), wheel=wheel, verses=verses)
  with builders.quiet_tfds():
    return builders.prepared(lambda: AjGreekEnglish(
        config=config, data_dir=data_cfg.data_dir or None, file_format='array_record'))
