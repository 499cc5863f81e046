"""Classical word aligners, trained unsupervised on the very lines they align, as baselines for
the links a model's attention gives (implicit/word_alignment.py scores both the same way).

  links = align('eflomal', src_lines, tgt_lines, direction='grow-diag-final')
  each = align_each('ibm1', src_lines, tgt_lines)   # {direction: links} from one training
                                                    # per direction
  links[k]                   # frozenset of (i, j): source word i, target word j of line k

Words are the whitespace-separated tokens of each line, 0-indexed, as in the Pharaoh gold
(data/pharaoh.py); a line without words gets no links.

Aligners (ALIGNERS):
  eflomal  Östling & Tiedemann 2016 ("Efficient word alignment with Markov chain Monte
           Carlo"): IBM 1, then an HMM, then the HMM with fertilities, sampled by collapsed
           Gibbs sampling (the `eflomal` 2.0.0 package, an optional extra: `pip install
           eflomal==2.0.0`). Options: source_prefix_len, target_prefix_len (a word cut to its
           first n characters before it is counted, a crude stemmer; 0 keeps the word whole),
           n_samplers (independent samplers whose marginals are averaged, default 3). It takes
           no seed (it seeds itself from the system): two runs differ slightly (AER sd 0.1-0.5
           on greek_english). It runs on OpenMP threads (OMP_NUM_THREADS caps them).
  ibm1     Brown et al. 1993's IBM Model 1 (lexical translation probabilities, EM), by nltk
           (the same optional extra: `pip install nltk`).
  ibm2     IBM Model 2 (IBM 1 plus a distortion table over positions and sentence lengths),
           by nltk; nltk first trains IBM 1 for 2 x iterations to start it. Option for both:
           iterations (default 5).

Time on the greek_english task (7,936 verse pairs, 138k Greek words, both directions, one
core shared with other work): eflomal 36-57 s; nltk's models are pure Python: IBM 1 at 5
iterations 70 s, IBM 2 at 5 iterations 5.6 minutes (feasible on all the verses).

Options of every aligner:
  direction  'forward': each target word linked to at most one source word (the target
             modelled given the source: eflomal's -f links, nltk's AlignedSent(target, source));
             'reverse': each source word linked to at most one target word (the model trained
             the other way; its links are turned back to (source, target)); 'intersection',
             'grow-diag-final' (Koehn et al. 2003), 'union': both directions symmetrised
             (word_alignment.symmetrise). Default 'grow-diag-final'.
  normalise  True (default): words are compared lower-cased and stripped of leading and
             trailing punctuation ('Christ,' and 'christ' are one word; a word of
             punctuation alone is kept lower-cased). Positions never change, so links stay
             over the same whitespace words. False: the words as written (eflomal still
             lower-cases them itself).
"""

from __future__ import annotations

import importlib
import inspect
import os
import tempfile
from typing import Callable, Sequence

from attention_jax.data import pharaoh
from attention_jax.data.pharaoh import Link
from attention_jax.implicit import word_alignment
from attention_jax.implicit.word_alignment import normalise_word

DIRECTIONS = ('forward', 'reverse') + word_alignment.SYMMETRISATIONS
COMMON_OPTIONS = ('direction', 'normalise')
REQUIREMENTS = {'eflomal': 'eflomal==2.0.0', 'nltk': 'nltk>=3.9'}   # the extra "aligners"

Links = list[frozenset[Link]]   # one set per line pair


class AlignerUnavailable(ValueError):
  """An aligner whose package is not installed: one line saying what to install."""


def words(lines: Sequence[str], normalise: bool) -> list[list[str]]:
  """Each line's whitespace words, normalised for identity when asked."""
  return [[normalise_word(w) for w in line.split()] if normalise else line.split()
          for line in lines]


def package(module: str):
  """The optional module `module` (of a package in REQUIREMENTS), or one line saying what to
  install."""
  top = module.split('.')[0]
  try:
    return importlib.import_module(module)
  except ImportError:
    raise AlignerUnavailable(f'{top} is not installed: pip install {REQUIREMENTS[top]!r} '
                             '(the optional extra "aligners")') from None


def _check_count(name: str, value, lowest: int) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
    raise ValueError(f'{name} must be an integer >= {lowest}, not {value!r}')


def eflomal_links(src: list[list[str]], tgt: list[list[str]], want: Sequence[str], *,
                  source_prefix_len: int = 0, target_prefix_len: int = 0,
                  n_samplers: int = 3) -> dict[str, Links]:
  """{'forward' and/or 'reverse' (as `want` asks): links} from one eflomal run (model 3)."""
  for name, value, lowest in (('source_prefix_len', source_prefix_len, 0),
                              ('target_prefix_len', target_prefix_len, 0),
                              ('n_samplers', n_samplers, 1)):
    _check_count(name, value, lowest)
  aligner = package('eflomal').Aligner(model=3, n_samplers=n_samplers,
                                       source_prefix_len=source_prefix_len,
                                       target_prefix_len=target_prefix_len)
  sizes = [(len(s), len(t)) for s, t in zip(src, tgt)]
  with tempfile.TemporaryDirectory() as tmp:
    paths = {d: os.path.join(tmp, d) for d in want}
    aligner.align([' '.join(s) for s in src], [' '.join(t) for t in tgt],
                  links_filename_fwd=paths.get('forward'),
                  links_filename_rev=paths.get('reverse'))
    # both files hold (source, target) links: eflomal turns the reverse model's back
    return {d: [a.sure for a in pharaoh.read(p, sizes=sizes)] for d, p in paths.items()}


def _nltk_links(model: str, src: list[list[str]], tgt: list[list[str]], want: Sequence[str],
                iterations: int) -> dict[str, Links]:
  """One nltk IBM model per direction wanted; AlignedSent(words, mots) links each of `words`
  to at most one of `mots` as (word index, mot index or None for NULL)."""
  _check_count('iterations', iterations, 1)
  translate = package('nltk.translate')
  out = {}
  for d in want:
    pairs = [translate.AlignedSent(t, s) if d == 'forward' else translate.AlignedSent(s, t)
             for s, t in zip(src, tgt)]
    getattr(translate, model)(pairs, iterations)   # trains, then sets each pair's .alignment
    out[d] = [frozenset((i, w) if d == 'forward' else (w, i)
                        for w, i in p.alignment if i is not None) for p in pairs]
  return out


def ibm1_links(src: list[list[str]], tgt: list[list[str]], want: Sequence[str], *,
               iterations: int = 5) -> dict[str, Links]:
  """IBM Model 1 (nltk), one training per direction wanted."""
  return _nltk_links('IBMModel1', src, tgt, want, iterations)


def ibm2_links(src: list[list[str]], tgt: list[list[str]], want: Sequence[str], *,
               iterations: int = 5) -> dict[str, Links]:
  """IBM Model 2 (nltk; started from 2 x iterations of IBM 1), one training per direction."""
  return _nltk_links('IBMModel2', src, tgt, want, iterations)


# name -> fn(source words, target words, directions wanted ('forward' / 'reverse'),
#            **its own options) -> {direction: links}
ALIGNERS: dict[str, Callable[..., dict[str, Links]]] = {
    'eflomal': eflomal_links, 'ibm1': ibm1_links, 'ibm2': ibm2_links}


def options_of(name: str) -> tuple[str, ...]:
  """The options aligner `name` takes: COMMON_OPTIONS and its own."""
  if name not in ALIGNERS:
    raise ValueError(f'unknown aligner {name!r}; valid aligners: {", ".join(ALIGNERS)}')
  params = inspect.signature(ALIGNERS[name]).parameters.values()
  return COMMON_OPTIONS + tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def align_each(name: str, src_lines: Sequence[str], tgt_lines: Sequence[str],
               directions: Sequence[str] = DIRECTIONS, *, normalise: bool = True,
               **options) -> dict[str, Links]:
  """{direction: links} for each of `directions`, the symmetrised ones from the same forward
  and reverse links (each direction trained once)."""
  valid = options_of(name)
  for key in options:
    if key not in valid[len(COMMON_OPTIONS):]:
      raise ValueError(f'unknown option {key!r} of aligner {name!r}; valid options: '
                       f'{", ".join(valid)}')
  for d in directions:
    if d not in DIRECTIONS:
      raise ValueError(f'unknown direction {d!r}; valid directions: {", ".join(DIRECTIONS)}')
  if len(src_lines) != len(tgt_lines):
    raise ValueError(f'{len(src_lines)} source lines but {len(tgt_lines)} target lines')
  want = [d for d in ('forward', 'reverse')
          if d in directions or set(directions) & set(word_alignment.SYMMETRISATIONS)]
  raw = ALIGNERS[name](words(src_lines, normalise), words(tgt_lines, normalise), want,
                       **options)
  return {d: raw[d] if d in raw else
          [word_alignment.symmetrise(f, r, d) for f, r in zip(raw['forward'], raw['reverse'])]
          for d in directions}


def align(name: str, src_lines: Sequence[str], tgt_lines: Sequence[str], *,
          direction: str = 'grow-diag-final', normalise: bool = True, **options) -> Links:
  """Aligner `name` trained on the line pairs given -> each pair's links {(source word i,
  target word j)} in `direction` (DIRECTIONS)."""
  return align_each(name, src_lines, tgt_lines, (direction,), normalise=normalise,
                    **options)[direction]
