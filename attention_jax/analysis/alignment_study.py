"""The word-alignment study's table: each variant's test BLEU and chrF, and per map its test
precision, recall and AER against the manual alignments (the word_alignment evaluator's
figures in each run's results), means over seeds with 95% t intervals; classical aligners'
rows (analysis/aligners.py's JSON) beside them; the best unsupervised neural map against
the best aligner, and every other variant against Bahdanau's `additive` (Welch over seeds):
its attention's AER, its best map's AER, its BLEU and chrF.

  s = summarise(compare.sweep_groups('runs/greek_english'), aligners=json.load(...))
  print(markdown(s))
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import stats

FIGURES = ('aer', 'precision', 'recall')
GUIDED_PREFIX = 'guided'       # variants trained with the gold (supervised): not unsupervised
BASELINE = 'additive'          # every other variant is compared with it
COMPARED = ('attention', 'best map', 'bleu', 'chrf')


def _interval(values: Sequence[float]) -> dict:
  i = stats.t_interval(values)
  return {'mean': i.mean, 'lo': i.lo, 'hi': i.hi, 'n': i.n, 'values': list(map(float, values))}


def summarise(groups, aligners: dict | None = None, split: str = 'test') -> dict:
  """Sweep groups (compare.Group: a variant's seeds) -> {'variants': [{variant, seeds, bleu,
  chrf, maps: {map: {aer, precision, recall: interval, sentences}}}], 'aligners': {...},
  'best_aligner' (lowest AER on all the sentences), 'best': [per number of sentences a map
  was measured on (most first): the best unsupervised map, its figures and, where the aligner
  was scored on the same sentences, the aligner's and the gap (Welch over seeds and runs)],
  'against_additive': [{variant, figure, diff, lo, hi, p, maps}], figure one of COMPARED]}."""
  variants = []
  for g in groups:
    res = [r.split(split) for r in g.runs]
    aligned = [word_alignments(r, split) for r in g.runs]
    maps = sorted(set.intersection(*(set(a) for a in aligned)))
    variants.append({
        'variant': g.name, 'seeds': len(res),
        'bleu': _interval([r['bleu'] for r in res]), 'chrf': _interval([r['chrf'] for r in res]),
        'maps': {m: {**{f: _interval([a[m][f] for a in aligned]) for f in FIGURES},
                     'sentences': min(a[m]['sentences'] for a in aligned)} for m in maps}})
  out = {'split': split, 'variants': variants, 'aligners': aligners or {}, 'best': []}
  full = max((f['sentences'] for v in variants for f in v['maps'].values()), default=0)
  if aligners:
    name = min(aligners, key=lambda a: np.mean(_values(aligners[a], 'aer')))
    out['best_aligner'] = {'aligner': name, **{f: _interval(_values(aligners[name], f))
                                               for f in FIGURES}}
  unsup = [(v, m) for v in variants if not v['variant'].startswith(GUIDED_PREFIX)
           for m in v['maps']]
  for n in sorted({v['maps'][m]['sentences'] for v, m in unsup}, reverse=True):
    # the best unsupervised map among those measured on n sentences, and its gap to the best
    # aligner's figures on the same sentences (experiments/studies/aligners.py --subsets)
    v, m = min(((v, m) for v, m in unsup if v['maps'][m]['sentences'] == n),
               key=lambda vm: vm[0]['maps'][vm[1]]['aer']['mean'])
    best = {'variant': v['variant'], 'map': m, **v['maps'][m]}
    ref = _on(aligners[out['best_aligner']['aligner']], n, full) if aligners else None
    if ref is not None:
      best['aligner'] = {f: _interval(_values(ref, f)) for f in FIGURES}
      best['gap'] = {}
      for f in FIGURES:
        t = stats.welch(best[f]['values'], best['aligner'][f]['values'])
        best['gap'][f] = {'diff': t.diff, 'lo': t.lo, 'hi': t.hi, 'p': t.p}
    out['best'].append(best)
  base = next((v for v in variants if v['variant'] == BASELINE), None)
  for v in variants:
    if base is None or v is base:
      continue
    for figure in COMPARED:
      pair = _compared(v, base, figure)
      if pair is None:      # `none` has no attention row
        continue
      (a, map_a), (b, map_b) = pair
      t = stats.welch(a, b)
      out.setdefault('against_additive', []).append(
          {'variant': v['variant'], 'figure': figure, 'diff': t.diff, 'lo': t.lo, 'hi': t.hi,
           'p': t.p, 'maps': (map_a, map_b)})
  return out


def _compared(v: dict, base: dict, figure: str):
  """((v's seed values, its map), (base's, its map)) for one COMPARED figure, or None where v
  lacks the map: 'attention' compares the attention's AER, 'best map' each variant's map of
  lowest mean AER (on the most sentences), 'bleu' and 'chrf' the translation."""
  if figure in ('bleu', 'chrf'):
    return (v[figure]['values'], ''), (base[figure]['values'], '')
  def best(x):
    if figure == 'attention':
      return 'attention' if 'attention' in x['maps'] else None
    return min(x['maps'], key=lambda m: (-x['maps'][m]['sentences'],
                                         x['maps'][m]['aer']['mean']), default=None)
  ma, mb = best(v), best(base)
  if ma is None or mb is None or (figure == 'best map' and ma == mb == 'attention'):
    return None       # no such map, or the best maps repeat the attention row
  return (v['maps'][ma]['aer']['values'], ma), (base['maps'][mb]['aer']['values'], mb)


def word_alignments(run, split: str = 'test') -> dict:
  """A run's word-alignment figures per map: its final evaluation's, and the maps a later
  `evaluate --word_alignment_methods=...` of the split added (at any beam: the attribution
  methods, too slow to run at the end of every training); each with 'sentences', how many
  sentences with gold it was measured on (a map found twice: the figures on more sentences)."""
  def maps(report: dict) -> dict:
    n = report.get('word_alignment_sentences', 0)
    return {m: {**f, 'sentences': n} for m, f in report.get('word_alignment', {}).items()}
  out = {}
  for report in [run.split(split)] + workdir_lib.Run(run.workdir).evaluations(split):
    for m, f in maps(report).items():
      if m not in out or f['sentences'] > out[m]['sentences']:
        out[m] = f
  return out


def aligners_of(rows: Sequence[dict], best_only: bool = True) -> dict:
  """experiments/studies/aligners.py's JSON rows (aligner, setting, direction, precision, recall,
  aer, per_run, sentences, subsets) -> {'<aligner> <setting> <direction>': {figures, 'seeds':
  per-run figures, 'sentences', 'subsets': {N: the same on the test verses among the first N}};
  best_only: each aligner's row of lowest AER alone."""
  out = {}
  for r in rows:
    runs = lambda e: [{f: x[f] for f in FIGURES} for x in e.get('per_run') or []]
    out[f'{r["aligner"]} {r["setting"]} {r["direction"]}'] = {
        **{f: r[f] for f in FIGURES}, 'aligner': r['aligner'], 'seeds': runs(r),
        **({'sentences': r['sentences']} if 'sentences' in r else {}),
        'subsets': {n: {**{f: sub[f] for f in FIGURES}, 'sentences': sub['sentences'],
                        'seeds': runs(sub)} for n, sub in r.get('subsets', {}).items()}}
  if best_only:
    best = {}
    for name, e in out.items():
      if e['aligner'] not in best or e['aer'] < out[best[e['aligner']]]['aer']:
        best[e['aligner']] = name
    out = {name: out[name] for name in best.values()}
  return out


def _on(entry: dict, n: int, full: int) -> dict | None:
  """An aligner's entry on the n sentences a map was measured on: itself where it was scored
  on n (an entry without a count: on all, `full`), else its subset of n sentences, else None."""
  if entry.get('sentences', full) == n:
    return entry
  return next((sub for sub in entry.get('subsets', {}).values() if sub['sentences'] == n), None)


def _values(entry: dict, figure: str) -> list[float]:
  """An aligner's figure: its seeds' values (entry['seeds']: [{aer, ...}]) or the one run's."""
  runs = entry.get('seeds') or [entry]
  return [float(r[figure]) for r in runs]


def _cell(i: dict) -> str:
  if i['n'] < 2 or not np.isfinite(i['lo']):
    return f'{i["mean"]:.2f}'
  return f'{i["mean"]:.2f} [{i["lo"]:.2f}, {i["hi"]:.2f}]'


def markdown(s: dict) -> str:
  """The study's tables: translation, then alignment per variant and map, then the aligners,
  then the comparisons."""
  lines = ['| variant | seeds | test BLEU | test chrF |', '|---|---|---|---|']
  for v in s['variants']:
    lines.append(f'| {v["variant"]} | {v["seeds"]} | {_cell(v["bleu"])} | {_cell(v["chrf"])} |')
  lines += ['', '| variant | map | seeds | AER | precision | recall | sentences |',
            '|---|---|---|---|---|---|---|']
  for v in s['variants']:
    for m, f in sorted(v['maps'].items(), key=lambda x: x[1]['aer']['mean']):
      lines.append(f'| {v["variant"]} | {m} | {v["seeds"]} | {_cell(f["aer"])} | '
                   f'{_cell(f["precision"])} | {_cell(f["recall"])} | {f["sentences"]} |')
  for name, entry in sorted(s['aligners'].items(),
                            key=lambda x: np.mean(_values(x[1], 'aer'))):
    n = len(entry.get('seeds') or [entry])
    cells = [_cell(_interval(_values(entry, f))) for f in FIGURES]
    lines.append(f'| aligner: {name} | - | {n} | ' + ' | '.join(cells)
                 + f' | {entry.get("sentences", "-")} |')
  measured = {f['sentences'] for v in s['variants'] for f in v['maps'].values()}
  for name, entry in sorted(s['aligners'].items(),
                            key=lambda x: np.mean(_values(x[1], 'aer'))):
    for sub in entry.get('subsets', {}).values():
      if sub['sentences'] not in measured:   # no map measured on those sentences
        continue
      cells = [_cell(_interval(_values(sub, f))) for f in FIGURES]
      lines.append(f'| aligner: {name} | - | {len(sub["seeds"]) or 1} | ' + ' | '.join(cells)
                   + f' | {sub["sentences"]} |')
  if s['best']:
    lines.append('')
  for b in s['best']:
    line = (f'Best unsupervised neural map on {b["sentences"]} sentences: {b["variant"]} / '
            f'{b["map"]}, AER {_cell(b["aer"])}')
    if 'gap' in b:
      g = b['gap']['aer']
      line += (f'; {s["best_aligner"]["aligner"]} on the same sentences: AER '
               f'{_cell(b["aligner"]["aer"])}; difference {g["diff"]:+.2f} [{g["lo"]:.2f}, '
               f'{g["hi"]:.2f}] (Welch over seeds and aligner runs, p {g["p"]:.3g})')
    lines.append(line + '.')
  if s.get('against_additive'):
    lines += ['', f'| variant | figure (AER: its map, {BASELINE}\'s) | difference from {BASELINE} '
              '| 95% CI (Welch over seeds) | p |', '|---|---|---|---|---|']
    for r in s['against_additive']:
      what = r['figure'] if r['figure'] in ('bleu', 'chrf') else \
          f'AER ({r["maps"][0]}, {r["maps"][1]})'
      lines.append(f'| {r["variant"]} | {what} | {r["diff"]:+.2f} | '
                   f'[{r["lo"]:.2f}, {r["hi"]:.2f}] | {r["p"]:.3g} |')
  return '\n'.join(lines)
