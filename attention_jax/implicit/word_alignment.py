"""Word alignments from any map over subwords: the subword-to-word rule, link extraction,
symmetrisation, and precision / recall / AER against gold links (Och & Ney 2003).

Words are the whitespace-separated tokens of a text (as fast_align and eflomal read it); a
token belongs to the word holding its first non-space character (a token of spaces alone, BOS
and EOS belong to none).

  tw = tokenizers.token_words(tok, text)           # int [T']: each token's word, -1 for none
  W = to_words(M, tgt_words=tw_t, src_words=tw_s)  # M [T', S'] -> W [Tw, Sw]: a target word's
                                                   # rows averaged, a source word's columns summed
  links = argmax_links(W)                          # {(source word, target word)}
  s = score(golds, [links, ...])                   # precision, recall, aer (percent)

The rule: a target word is output as several subwords, each with its own distribution over the
source, so the word's distribution is their mean (it still sums to 1); a source word split
into subwords receives the mass of all of them, so its columns are summed (Zenkel et al. 2019,
Garg et al. 2019 use the same conversion).
"""

from __future__ import annotations

import collections
import unicodedata
from typing import Callable, Iterable, Sequence

import numpy as np

from attention_jax.data.pharaoh import Alignment, Link

EXTRACTIONS = ('argmax', 'threshold')
SYMMETRISATIONS = ('intersection', 'union', 'grow-diag-final')


def to_words(m: np.ndarray, tgt_words: np.ndarray, src_words: np.ndarray,
             num_tgt: int | None = None, num_src: int | None = None) -> np.ndarray:
  """A subword map m [T', S'] (rows: target tokens, columns: source tokens; extra rows or
  columns beyond len(tgt_words) / len(src_words), e.g. EOS, are ignored) -> [Tw, Sw]: each
  target word's rows averaged, each source word's columns summed. Tokens of word -1 drop out;
  a word without tokens gets a zero row (or column)."""
  m = np.asarray(m, np.float64)[:len(tgt_words), :len(src_words)]
  tw, sw = np.asarray(tgt_words), np.asarray(src_words)
  num_tgt = int(tw.max(initial=-1)) + 1 if num_tgt is None else num_tgt
  num_src = int(sw.max(initial=-1)) + 1 if num_src is None else num_src
  rows = np.zeros((num_tgt, len(sw)))
  count = np.zeros(num_tgt)
  keep = tw >= 0
  np.add.at(rows, tw[keep], m[keep])
  np.add.at(count, tw[keep], 1)
  rows /= np.maximum(count, 1)[:, None]
  out = np.zeros((num_tgt, num_src))
  keep = sw >= 0
  np.add.at(out.T, sw[keep], rows.T[keep])
  return out


def argmax_links(w: np.ndarray) -> frozenset[Link]:
  """w [Tw, Sw] -> each target word linked to its highest source word; a row that is all zero
  (no attention, no tokens) links nothing."""
  w = np.asarray(w)
  if w.size == 0:
    return frozenset()
  best = np.argmax(w, -1)
  return frozenset((int(best[j]), j) for j in range(len(w)) if np.any(w[j] > 0))


def threshold_links(w: np.ndarray, threshold: float) -> frozenset[Link]:
  """w [Tw, Sw] (>= 0) -> the links whose share of their target word's row is >= threshold
  (rows normalised to sum 1; Garg et al. 2019, Chen et al. 2020 use such a rule)."""
  w = np.asarray(w, np.float64)
  total = w.sum(-1, keepdims=True)
  share = np.where(total > 0, w / np.where(total > 0, total, 1), 0.0)
  j, i = np.nonzero(share >= threshold)
  return frozenset(zip(i.tolist(), j.tolist()))


def extract(w: np.ndarray, how: str = 'argmax', threshold: float = 0.5) -> frozenset[Link]:
  """Links of a word map by EXTRACTIONS' rule `how`."""
  if how == 'argmax':
    return argmax_links(w)
  if how == 'threshold':
    return threshold_links(w, threshold)
  raise ValueError(f'unknown extraction {how!r}; valid: {", ".join(EXTRACTIONS)}')


def symmetrise(forward: Iterable[Link], reverse: Iterable[Link],
               how: str = 'grow-diag-final') -> frozenset[Link]:
  """Links of both directions, each as (source word, target word) -> one set: their
  intersection, union, or grow-diag-final (Koehn et al. 2003, as Moses and fast_align's atools
  do it: start from the intersection, add neighbouring union links (diagonals included) of a
  word not yet aligned, then any union link of a word not yet aligned)."""
  f, r = frozenset(forward), frozenset(reverse)
  if how == 'intersection':
    return f & r
  if how == 'union':
    return f | r
  if how != 'grow-diag-final':
    raise ValueError(f'unknown symmetrisation {how!r}; valid: {", ".join(SYMMETRISATIONS)}')
  union = f | r
  out = set(f & r)
  neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]

  def aligned():
    return {i for i, _ in out}, {j for _, j in out}

  grew = True
  while grew:
    grew = False
    for i, j in sorted(out):
      for di, dj in neighbours:
        link = (i + di, j + dj)
        src_done, tgt_done = aligned()
        if link in union and link not in out and (
            link[0] not in src_done or link[1] not in tgt_done):
          out.add(link)
          grew = True
  for links in (f, r):   # final-and would ask for both; final asks for either
    for link in sorted(links):
      src_done, tgt_done = aligned()
      if link[0] not in src_done or link[1] not in tgt_done:
        out.add(link)
  return frozenset(out)


def counts(gold: Alignment, links: Iterable[Link]) -> dict[str, int]:
  """One sentence's summable counts: |A|, |S|, |A∩S|, |A∩P|."""
  a = frozenset(links)
  return {'links': len(a), 'sure': len(gold.sure), 'a_sure': len(a & gold.sure),
          'a_possible': len(a & gold.possible)}


def figures(total: dict[str, int]) -> dict[str, float]:
  """Summed counts -> precision = |A∩P|/|A|, recall = |A∩S|/|S| and
  AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) (Och & Ney 2003), in percent."""
  a, s = total['links'], total['sure']
  return {'precision': 100.0 * total['a_possible'] / a if a else 0.0,
          'recall': 100.0 * total['a_sure'] / s if s else 0.0,
          'aer': 100.0 * (1.0 - (total['a_sure'] + total['a_possible']) / (a + s))
                 if a + s else 0.0,
          'links': a, 'sure': s}


def score(golds: Sequence[Alignment], predicted: Sequence[Iterable[Link]]) -> dict[str, float]:
  """Corpus precision, recall and AER (percent) of predicted links against gold, pooled over
  the sentences (the standard: counts summed, then the ratios)."""
  if len(golds) != len(predicted):
    raise ValueError(f'{len(predicted)} predicted alignments for {len(golds)} gold ones')
  keys = ('links', 'sure', 'a_sure', 'a_possible')
  total = dict.fromkeys(keys, 0)
  for g, p in zip(golds, predicted):
    for k, v in counts(g, p).items():
      total[k] += v
  return figures(total)


LENGTH_BANDS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 10**9))


def score_by_length(golds: Sequence[Alignment], predicted: Sequence[Iterable[Link]],
                    src_lengths: Sequence[int],
                    bands: Sequence[tuple[int, int]] = LENGTH_BANDS) -> list[dict]:
  """score() within bands of source words (lo..hi inclusive): [{'lo', 'hi', 'sentences',
  precision, recall, aer}], empty bands left out."""
  out = []
  for lo, hi in bands:
    rows = [k for k, n in enumerate(src_lengths) if lo <= n <= hi]
    if rows:
      out.append({'lo': lo, 'hi': hi if hi < 10**9 else None, 'sentences': len(rows),
                  **score([golds[k] for k in rows], [predicted[k] for k in rows])})
  return out


def sentence_aer(gold: Alignment, links: Iterable[Link]) -> float:
  """One sentence's AER in percent (the explorer's filter)."""
  return figures(counts(gold, links))['aer']


def normalise_word(word: str) -> str:
  """Lower-cased, leading and trailing punctuation (Unicode category P*) stripped; a word of
  punctuation alone stays whole (lower-cased), so no word becomes empty."""
  w = word.lower()
  start, end = 0, len(w)
  while start < end and unicodedata.category(w[start]).startswith('P'):
    start += 1
  while end > start and unicodedata.category(w[end - 1]).startswith('P'):
    end -= 1
  return w[start:end] or w


def by_word(golds: Sequence[Alignment], predicted: Sequence[Iterable[Link]],
            targets: Sequence[str], key: Callable[[str], str] = normalise_word) -> list[dict]:
  """Which target words the links miss or get wrong: per word form (key of each whitespace word
  of the target sentences), its sure gold links, the links predicted on its words, the hits,
  recall and precision (percent) and its share of all the missed sure links; most missed
  first."""
  gold_n, link_n, hit_n, hit_p = (collections.Counter() for _ in range(4))
  for g, p, sentence in zip(golds, predicted, targets, strict=True):
    form = [key(w) for w in sentence.split()]
    p = frozenset(p)
    for _, j in g.sure:
      gold_n[form[j]] += 1
    for i, j in p:
      link_n[form[j]] += 1
      hit_p[form[j]] += (i, j) in g.possible
    for i, j in p & g.sure:
      hit_n[form[j]] += 1
  missed = sum(gold_n.values()) - sum(hit_n.values())
  rows = [{'word': w, 'sure': gold_n[w], 'links': link_n[w], 'hits': hit_n[w],
           'recall': 100.0 * hit_n[w] / gold_n[w] if gold_n[w] else float('nan'),
           'precision': 100.0 * hit_p[w] / link_n[w] if link_n[w] else float('nan'),
           'missed_share': 100.0 * (gold_n[w] - hit_n[w]) / missed if missed else 0.0}
          for w in gold_n | link_n]
  return sorted(rows, key=lambda r: (-(r['sure'] - r['hits']), r['word']))
