"""Aligning a parallel text with a trained run: the words of each line pair linked by one of
the run's maps (implicit/word_maps.py), teacher-forced on the target line, optionally
symmetrised with a run trained the other way, and scored against gold links.

  t = aj.load('runs/ge')
  links = align_pairs(t, pairs, 'attention')          # [frozenset((src word, tgt word))] per pair
  links = align_pairs(t, pairs, 'gradient', how='threshold', threshold=0.3)
  both = symmetrised(links, align_pairs(t_rev, [(e, g) for g, e in pairs], 'attention'),
                     'grow-diag-final')
  word_alignment.score(gold, links)                   # precision, recall, aer

Lines a run cannot teacher-force (over 4x its training lengths: Task.eval_limits) get no
links; `skipped` counts them.
"""

from __future__ import annotations

from typing import Callable, Sequence

from attention_jax.data import data_fields
from attention_jax.data import tasks
from attention_jax.implicit import attribution
from attention_jax.implicit import word_alignment as wa
from attention_jax.implicit import word_maps


def pairs_task(t, pairs: Sequence[tuple[str, str]]) -> tasks.Task:
  """The (source, target) line pairs as a task with the run's tokenizers and length limits."""
  d = {**data_fields.defaults(), **t.run_config.get('data', {})}
  return tasks.Task.from_pairs(pairs, t.src_tok, t.tgt_tok, max_src_len=int(d['max_src_len']),
                               max_tgt_len=int(d['max_tgt_len']),
                               num_buckets=int(d['num_buckets']), name='aligned text')


def check_map(t, name: str) -> None:
  """One ValueError line when the run offers no map `name` (naming the maps it offers)."""
  valid = word_maps.map_names(t.graphdef, t.params, shift=True)
  if name in valid or name in attribution.METHODS:
    if name in attribution.METHODS:
      attribution.check(name, t.config.source)
    return
  raise ValueError(f'unknown map {name!r} for this run; valid: {", ".join(valid)} and the '
                   f'attribution methods {", ".join(attribution.names(t.config.source))}')


def align_pairs(t, pairs: Sequence[tuple[str, str]], name: str = 'attention', *,
                how: str = 'argmax', threshold: float = 0.5, batch_size: int = 32,
                options: attribution.Options = attribution.Options(), maps: list | None = None,
                progress: Callable[[int], None] | None = None) -> list[frozenset | None]:
  """Each pair's links by map `name` (word_maps' names), None for a pair the run skips. With
  `maps` (a list, the first len(maps) entries filled in place), those pairs' word maps
  [Tw, Sw] too (None for a pair skipped)."""
  check_map(t, name)
  task = pairs_task(t, pairs)
  out = word_maps.align_split(t.graphdef, t.params, task, 'test', [name], how=how,
                              threshold=threshold, batch_size=batch_size, options=options,
                              keep_maps=len(maps or ()), progress=progress)
  links: list[frozenset | None] = [None] * len(pairs)
  for k, l in zip(out['rows'], out['links'][name]):
    links[k] = l
  if maps:
    kept = iter(out['maps'][name])
    for k in range(len(maps)):
      maps[k] = next(kept) if links[k] is not None else None
  return links


def symmetrised(forward: Sequence[frozenset | None], reverse: Sequence[frozenset | None],
                how: str) -> list[frozenset | None]:
  """Forward links (source, target) and a reverse run's links (its source = our target) ->
  one set per pair (word_alignment.symmetrise); None where either direction skipped it."""
  return [None if f is None or r is None else
          wa.symmetrise(f, {(i, j) for j, i in r}, how) for f, r in zip(forward, reverse)]
