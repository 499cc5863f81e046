"""A user's own parallel corpus as plain UTF-8 text files, one sentence per line.

  <dir>/train.src  <dir>/train.tgt     line i of .src translates to line i of .tgt
  <dir>/valid.src  <dir>/valid.tgt
  <dir>/test.src   <dir>/test.tgt

Lines end in '\\n' (a trailing '\\r' is dropped, as is a UTF-8 byte-order mark). A missing or
empty file, a blank line, bytes that are not UTF-8 or files of one split with different line
counts raise `CorpusError`, naming the file and the line.
"""

from __future__ import annotations

import os

FILE_PREFIX = {'train': 'train', 'validation': 'valid', 'test': 'test'}


class CorpusError(ValueError):
  """A malformed corpus file; the message names the file and the line."""


def read_lines(path: str) -> list[str]:
  """The lines of a UTF-8 text file, without line ends; raises CorpusError on bad content."""
  if not os.path.isfile(path):
    raise CorpusError(f'{path}: file not found')
  with open(path, 'rb') as f:
    data = f.read()
  if not data.strip():
    raise CorpusError(f'{path}: empty file')
  raw_lines = data.split(b'\n')
  if raw_lines[-1] == b'':  # the usual final newline
    raw_lines.pop()
  lines = []
  for lineno, raw in enumerate(raw_lines, start=1):
    if raw.endswith(b'\r'):
      raw = raw[:-1]
    try:
      line = raw.decode('utf-8')
    except UnicodeDecodeError as e:
      raise CorpusError(f'{path}:{lineno}: not valid UTF-8 (byte {e.start} of the line: '
                        f'{raw[e.start:e.start + 4]!r})') from None
    if lineno == 1:
      line = line.removeprefix('\ufeff')
    if not line.strip():
      raise CorpusError(f'{path}:{lineno}: blank line (every line must hold a sentence)')
    lines.append(line)
  return lines


def read_split(directory: str, split: str) -> list[tuple[str, str]]:
  """[(src, tgt)] of one split ('train' | 'validation' | 'test')."""
  prefix = os.path.join(directory, FILE_PREFIX[split])
  src_path, tgt_path = prefix + '.src', prefix + '.tgt'
  src, tgt = read_lines(src_path), read_lines(tgt_path)
  if len(src) != len(tgt):
    short, long_ = (src_path, tgt_path) if len(src) < len(tgt) else (tgt_path, src_path)
    raise CorpusError(
        f'{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: '
        f'{long_}:{min(len(src), len(tgt)) + 1} has no partner line in {short}')
  return list(zip(src, tgt))


def read_corpus(directory: str) -> dict[str, list[tuple[str, str]]]:
  """{'train' | 'validation' | 'test': [(src, tgt)]} from `directory` (see module doc)."""
  if not directory:
    raise CorpusError('data.textfiles_dir is empty: set it to the directory with '
                      'train.src/train.tgt, valid.src/valid.tgt, test.src/test.tgt')
  if not os.path.isdir(directory):
    raise CorpusError(f'{directory}: not a directory (data.textfiles_dir)')
  return {split: read_split(directory, split) for split in FILE_PREFIX}
