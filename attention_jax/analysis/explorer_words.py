"""The explorer's word alignments, for a run whose task has word-level gold (greek_english):
each sentence's reference teacher-forced through the model, its explicit attention turned into
a word map (word_alignment.to_words: a target word's rows averaged, a source word's columns
summed), each target word linked to its argmax source word, and the links scored against the
gold (AER, precision, recall).

  words = word_alignments(t, task, 'test', ids, keep=ids[:limit])   # None without word gold
  explorer_data.run_summary(run, 'test', task, words)       # each row with its 'aer'
  explorer_data.sentence_details(..., words=words)          # 'words': word map, gold, links

A model without explicit attention (score `none`: every weight zero, no link) is read by the
'gradient' map instead (word_maps' ranking of the gradient), and the page says so.
"""

from __future__ import annotations

from typing import Sequence

from attention_jax.analysis import explorer_data
from attention_jax.implicit import attribution
from attention_jax.implicit import word_alignment as wa
from attention_jax.implicit import word_maps

FALLBACK = 'gradient'   # the map read when the explicit attention links nothing


def _first_with_links(translator, task, split: str, num: int, keep: int) -> dict | None:
  """word_maps.align_split of the first map of (the explicit attention, FALLBACK) that links
  anything, with its name; None if neither does (or FALLBACK does not apply to the source)."""
  for name in (word_maps.EXPLICIT, FALLBACK):
    if name != word_maps.EXPLICIT:
      try:
        attribution.check(name, task.source)
      except ValueError:
        continue
    out = word_maps.align_split(translator.graphdef, translator.params, task, split, [name],
                                num=num, keep_maps=keep)
    if any(out['links'][name]):
      return {'name': name, 'rows': out['rows'], 'links': out['links'][name],
              'maps': out['maps'][name]}
  return None


def detail(s: dict, src: str, ref: str, name: str) -> dict:
  """One sentence's word alignment -> what its page draws: the words, the word map [Tw, Sw]
  (ints in 1/SCALE; FALLBACK's normalised per target word by its largest value), the extracted
  links and, with gold, the sure and possible-only gold links ([source word, target word]
  each) and its AER, precision and recall."""
  # pylint: disable=protected-access  (the page's compact form: explorer_data's)
  w = s['map'] if name == word_maps.EXPLICIT else explorer_data._normalised(s['map'])
  pairs = lambda links: [[i, j] for i, j in sorted(links, key=lambda l: (l[1], l[0]))]
  d = {'name': name, 'src': src.split(), 'tgt': ref.split(), 'map': explorer_data._ints(w),
       'links': pairs(s['links'])}
  if 'gold' in s:
    g = s['gold']
    d.update(sure=pairs(g.sure), possible=pairs(g.possible - g.sure),
             **{k: s[k] for k in ('aer', 'precision', 'recall')})
  return d


def word_alignments(translator, task, split: str, ids: Sequence[int],
                    keep: Sequence[int] = ()) -> dict | None:
  """Sentences `ids` of the split, teacher-forced on their references (word_maps.align_split,
  argmax links) -> {'map': the map's name, 'sentences': {id: {'links', and with gold 'gold'
  (an Alignment), 'aer', 'precision', 'recall' (percent, 1 decimal); for ids in `keep` 'map'
  (the word map [Tw, Sw]) and 'detail' (detail())}}}; None where the task has no word-level
  gold. Sentences beyond the evaluation's length limits (Task.eval_rows) are absent."""
  if not task.has_word_gold or not ids:
    return None
  keep, want, gold = set(keep), set(ids), task.word_gold(split)
  n_keep = max(keep, default=-1) + 1
  got = _first_with_links(translator, task, split, max(ids) + 1, n_keep)
  if got is None:
    return None
  maps = dict(zip([k for k in got['rows'] if k < n_keep], got['maps']))
  out = {}
  for k, links in zip(got['rows'], got['links']):
    if k not in want:
      continue
    s = out[k] = {'links': links}
    if gold[k] is not None:
      f = wa.figures(wa.counts(gold[k], links))
      s.update(gold=gold[k], **{m: round(f[m], 1) for m in ('aer', 'precision', 'recall')})
    if k in keep:
      s['map'] = maps[k]
      s['detail'] = detail(s, *task.texts(split)[k], got['name'])
  return {'map': got['name'], 'sentences': out}
