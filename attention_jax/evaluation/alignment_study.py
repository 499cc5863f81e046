"""The word-alignment study's table: each variant's test BLEU and chrF, and per map its test
precision, recall and AER against the manual alignments (the word_alignment evaluator's
figures in each run's results), means over seeds with 95% t intervals; classical aligners'
rows (evaluation/aligners.py's JSON) beside them; the best unsupervised neural map against
the best aligner, and guided alignment against the unsupervised model (Welch over seeds).

  s = summarise(compare.sweep_groups('runs/greek_english'), aligners=json.load(...))
  print(markdown(s))
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from attention_jax import workdir as workdir_lib
from attention_jax.evaluation import stats

FIGURES = ('aer', 'precision', 'recall')
GUIDED_PREFIX = 'guided'       # variants trained with the gold (supervised): not unsupervised


def _interval(values: Sequence[float]) -> dict:
  i = stats.t_interval(values)
  return {'mean': i.mean, 'lo': i.lo, 'hi': i.hi, 'n': i.n, 'values': list(map(float, values))}


def summarise(groups, aligners: dict | None = None, split: str = 'test') -> dict:
  """Sweep groups (compare.Group: a variant's seeds) -> {'variants': [{variant, seeds, bleu,
  chrf, maps: {map: {aer, precision, recall: interval, sentences}}}], 'aligners': {...},
  'best_neural' (among the maps measured on all the split's sentences with gold),
  'best_aligner', 'gap', 'guided': [comparisons]}."""
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
  out = {'split': split, 'variants': variants, 'aligners': aligners or {}}
  full = max((f['sentences'] for v in variants for f in v['maps'].values()), default=0)
  unsup = [(v, m) for v in variants if not v['variant'].startswith(GUIDED_PREFIX)
           for m in v['maps'] if v['maps'][m]['sentences'] == full]   # the aligners' sentences
  if unsup:
    v, m = min(unsup, key=lambda vm: vm[0]['maps'][vm[1]]['aer']['mean'])
    out['best_neural'] = {'variant': v['variant'], 'map': m, **v['maps'][m]}
  if aligners:
    name = min(aligners, key=lambda a: np.mean(_values(aligners[a], 'aer')))
    out['best_aligner'] = {'aligner': name, **{f: _interval(_values(aligners[name], f))
                                               for f in FIGURES}}
  if 'best_neural' in out and 'best_aligner' in out:
    for f in FIGURES:
      t = stats.welch(out['best_neural'][f]['values'], out['best_aligner'][f]['values'])
      out.setdefault('gap', {})[f] = {'diff': t.diff, 'lo': t.lo, 'hi': t.hi, 'p': t.p}
  by_name = {v['variant']: v for v in variants}
  base = by_name.get('additive')
  for v in variants:
    if not v['variant'].startswith(GUIDED_PREFIX) or base is None:
      continue
    for what in ('aer', 'bleu', 'chrf'):
      if what == 'aer':
        a = v['maps'].get('attention', {}).get('aer', {}).get('values', [])
        b = base['maps'].get('attention', {}).get('aer', {}).get('values', [])
      else:
        a, b = v[what]['values'], base[what]['values']
      t = stats.welch(a, b)
      out.setdefault('guided', []).append({'variant': v['variant'], 'baseline': 'additive',
                                           'figure': what, 'diff': t.diff, 'lo': t.lo,
                                           'hi': t.hi, 'p': t.p})
  return out


def word_alignments(run, split: str = 'test') -> dict:
  """A run's word-alignment figures per map: its final evaluation's (results.json), and the maps
  a later `evaluate --word_alignment_methods=...` added (eval_<split>.json: the attribution
  methods, too slow to run at the end of every training); each with 'sentences', how many
  sentences with gold it was measured on."""
  def maps(report: dict) -> dict:
    n = report.get('word_alignment_sentences', 0)
    return {m: {**f, 'sentences': n} for m, f in report.get('word_alignment', {}).items()}
  later = {}
  path = workdir_lib.Run(run.workdir).eval_path(f'eval_{split}')
  if os.path.isfile(path):
    with open(path, encoding='utf-8') as f:
      later = maps(json.load(f))
  return {**later, **maps(run.split(split))}


def aligners_of(rows: Sequence[dict], best_only: bool = True) -> dict:
  """experiments/bench/aligners.py's JSON rows (aligner, setting, direction, precision, recall,
  aer, per_run) -> {'<aligner> <setting> <direction>': {figures, 'seeds': per-run figures}};
  best_only: each aligner's row of lowest AER alone."""
  out = {}
  for r in rows:
    out[f'{r["aligner"]} {r["setting"]} {r["direction"]}'] = {
        **{f: r[f] for f in FIGURES}, 'aligner': r['aligner'],
        'seeds': [{f: x[f] for f in FIGURES} for x in r.get('per_run') or []]}
  if best_only:
    best = {}
    for name, e in out.items():
      if e['aligner'] not in best or e['aer'] < out[best[e['aligner']]]['aer']:
        best[e['aligner']] = name
    out = {name: out[name] for name in best.values()}
  return out


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
  if 'gap' in s:
    b, a, g = s['best_neural'], s['best_aligner'], s['gap']['aer']
    lines += ['', f'Best unsupervised neural map: {b["variant"]} / {b["map"]}, AER '
              f'{_cell(b["aer"])}; best aligner: {a["aligner"]}, AER {_cell(a["aer"])}; '
              f'difference {g["diff"]:+.2f} [{g["lo"]:.2f}, {g["hi"]:.2f}] (Welch over seeds, '
              f'p {g["p"]:.3g}).']
  if s.get('guided'):
    lines += ['', '| guided variant | figure | difference from additive | 95% CI (seeds) | p |',
              '|---|---|---|---|---|']
    for r in s['guided']:
      lines.append(f'| {r["variant"]} | {r["figure"]} | {r["diff"]:+.2f} | '
                   f'[{r["lo"]:.2f}, {r["hi"]:.2f}] | {r["p"]:.3g} |')
  return '\n'.join(lines)
