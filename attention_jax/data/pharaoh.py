"""Word alignments in the Pharaoh format: one line per sentence pair, links `i-j` (source word
i, target word j; sure) or `i?j` (possible), separated by spaces, 0-indexed as fast_align,
eflomal and Moses write them. Words are the whitespace-separated tokens of the two texts.

  links = parse('0-0 1-2 2?1')            # Alignment(sure={(0, 0), (1, 2)}, possible={..., (2, 1)})
  gold = read('gold.talp', sizes=[(3, 3), ...], one_indexed=False)   # checked against the text
  write('out.links', [links, ...])        # atomic: a file is whole or absent

A link outside its sentence, or a file that looks 1-indexed without `one_indexed`, is one
ValueError line naming the file and the line (awesome-align #20: a 1-indexed gold file read as
0-indexed silently scores every link one word off).
"""

from __future__ import annotations

import os
import re
from typing import Iterable, NamedTuple, Sequence

Link = tuple[int, int]   # (source word, target word), 0-indexed
_LINK = re.compile(r'^(\d+)([-?p])(\d+)$')


class Alignment(NamedTuple):
  """One sentence pair's links: `sure` ⊆ `possible` (a set with sure links only has them
  equal, as the manual alignments of the Bible task)."""
  sure: frozenset[Link]
  possible: frozenset[Link]

  @classmethod
  def of(cls, sure: Iterable[Link], possible: Iterable[Link] = ()) -> 'Alignment':
    s = frozenset((int(i), int(j)) for i, j in sure)
    return cls(s, s | frozenset((int(i), int(j)) for i, j in possible))


def parse(line: str, *, one_indexed: bool = False, where: str = 'links') -> Alignment:
  """'0-0 1-2 2?1' -> Alignment; `where` names the line in an error."""
  sure, possible = set(), set()
  shift = 1 if one_indexed else 0
  for item in line.split():
    m = _LINK.match(item)
    if not m:
      raise ValueError(f'{where}: {item!r} is not a link (i-j, or i?j for a possible one)')
    i, j = int(m.group(1)) - shift, int(m.group(3)) - shift
    if i < 0 or j < 0:
      raise ValueError(f'{where}: link {item!r} has a word 0 in a file read as 1-indexed '
                       '(drop the one-indexed flag: the file is 0-indexed)')
    (possible if m.group(2) != '-' else sure).add((i, j))
  return Alignment.of(sure, possible)


def format_links(links: Alignment | Iterable[Link], one_indexed: bool = False) -> str:
  """Links -> 'i-j ...' sorted by target then source word (possible-only links as i?j)."""
  shift = 1 if one_indexed else 0
  if isinstance(links, Alignment):
    items = [(i, j, '-') for i, j in links.sure] + [
        (i, j, '?') for i, j in links.possible - links.sure]
  else:
    items = [(i, j, '-') for i, j in links]
  return ' '.join(f'{i + shift}{sep}{j + shift}'
                  for i, j, sep in sorted(items, key=lambda x: (x[1], x[0])))


def check(alignments: Sequence[Alignment], sizes: Sequence[tuple[int, int]], *, path: str,
          one_indexed: bool = False) -> None:
  """One ValueError line for the first link outside its sentence (sizes: (source words, target
  words) per line), or for a file whose links never use word 0 on either side (1-indexed)."""
  if len(alignments) != len(sizes):
    raise ValueError(f'{path}: {len(alignments)} lines of links for {len(sizes)} sentence '
                     'pairs: the files must have the same number of lines')
  touches_zero = False
  for n, (a, (ns, nt)) in enumerate(zip(alignments, sizes), 1):
    for i, j in sorted(a.possible):
      touches_zero |= i == 0 or j == 0
      if i >= ns or j >= nt:
        hint = ('; is the file 1-indexed? (then say so: --one_indexed)'
                if not one_indexed and (i == ns or j == nt) else '')
        raise ValueError(f'{path} line {n}: link {i + one_indexed}-{j + one_indexed} is outside '
                         f'the sentence ({ns} source words, {nt} target words; links are '
                         f'{1 if one_indexed else 0}-indexed){hint}')
  linked = sum(bool(a.possible) for a in alignments)
  if not one_indexed and linked >= 3 and not touches_zero:
    raise ValueError(f'{path}: no link of its {linked} linked lines uses word 0: the file looks '
                     '1-indexed (say so: --one_indexed)')


def read(path: str, *, sizes: Sequence[tuple[int, int]] | None = None,
         one_indexed: bool = False) -> list[Alignment]:
  """A Pharaoh file -> one Alignment per line (0-indexed); with `sizes`, checked (`check`)."""
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  out = [parse(line, one_indexed=one_indexed, where=f'{path} line {n}')
         for n, line in enumerate(lines, 1)]
  if sizes is not None:
    check(out, sizes, path=path, one_indexed=one_indexed)
  return out


def write(path: str, alignments: Iterable[Alignment | Iterable[Link]],
          one_indexed: bool = False) -> None:
  """One line per sentence pair, written to path.tmp then renamed (whole or absent)."""
  text = ''.join(format_links(a, one_indexed) + '\n' for a in alignments)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(path + '.tmp', path)
