"""The report of an implicit-attention sweep (runs whose results hold eval.attribution's
figures, attention_jax/implicit/alignment.py): per variant, band (all source lengths; within and
beyond the training lengths) and map (the explicit weights, each attribution method, a
Transformer's layers and heads, and a random ranking), every figure's mean over seeds with
its 95% t interval; and the study's four questions as paired tests over seeds (two maps of
the same run), Holm-adjusted within each question:

  implicit   score `none` (no explicit attention): each method's alignment accuracy - random's
  aligner    explicit weights - each method, alignment accuracy (within, beyond)
  faithful   each map's AOPC - random positions' AOPC; explicit - each method's AOPC
  beyond     each map's alignment accuracy beyond - within the training lengths

  s = study(compare.sweep_groups('runs/implicit_attention'))
  print(markdown(s))    # report.write writes it as implicit_attention.md (+ two CSVs)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attention_jax.analysis import stats
from attention_jax.implicit.alignment import EXPLICIT, RANDOM

FIGURES = ('alignment_accuracy', 'gold_mass', 'aopc', 'kendall_tau', 'jsd')
BANDS = ('all', 'within', 'beyond')
ALPHA = 0.05


def _bands(run, split: str) -> dict[str, dict]:
  """A run's attribution report -> {band: {map: figures}} with 'random' as a map."""
  report = run.split(split).get('attribution') or {}
  out = {}
  for b in report.get('bands', []):
    maps = dict(b['methods'])
    maps[RANDOM] = {**b['random'], **({} if b['aopc_random'] is None      # images: no AOPC
                                      else {'aopc': b['aopc_random']})}
    out[b['band']] = maps
  return out


def has_attribution(groups, split: str = 'test') -> bool:
  return any(_bands(r, split) for g in groups for r in g.runs)


def _values(group, split: str, band: str, name: str, figure: str) -> list[float]:
  """One figure of one map over the group's seeds (nan where a run lacks it)."""
  return [float(_bands(r, split).get(band, {}).get(name, {}).get(figure, np.nan))
          for r in group.runs]


def _maps(group, split: str) -> list[str]:
  """The maps the group's runs report: explicit first, methods, layers/heads, random last."""
  names = []
  for r in group.runs:
    for maps in _bands(r, split).values():
      names += [m for m in maps if m not in names]
  explicit = [m for m in names if m == EXPLICIT]
  layers = sorted(m for m in names if m.startswith(EXPLICIT + '_'))
  methods = [m for m in names if m not in (*explicit, *layers, RANDOM)]
  return explicit + methods + layers + [RANDOM]


def study(groups: Sequence, split: str = 'test') -> dict:
  """-> {'table': rows (variant, band, map, figure, n, mean, std, ci_lo, ci_hi),
  'tests': rows (question, variant, band, a, b, figure, diff, ci_lo, ci_hi, p, p_holm,
  significant)}."""
  table, tests = [], []
  for g in groups:
    maps = _maps(g, split)
    for band in BANDS:
      for name in maps:
        for figure in FIGURES:
          v = [x for x in _values(g, split, band, name, figure) if np.isfinite(x)]
          if v:
            iv = stats.t_interval(v)
            table.append({'variant': g.name, 'band': band, 'map': name, 'figure': figure,
                          'n': iv.n, 'mean': iv.mean, 'std': iv.std, 'ci_lo': iv.lo,
                          'ci_hi': iv.hi})
    methods = [m for m in maps if m not in (RANDOM,) and not m.startswith(EXPLICIT)]

    def test(question, band, a, b, figure, band_b=None):
      x = _values(g, split, band, a, figure)
      y = _values(g, split, band_b or band, b, figure)
      if not (np.isfinite(x).all() and np.isfinite(y).all()) or not x:
        return
      t = stats.paired(x, y)
      tests.append({'question': question, 'variant': g.name, 'band': band, 'a': a, 'b': b,
                    'figure': figure, 'diff': t.diff, 'ci_lo': t.lo, 'ci_hi': t.hi, 'p': t.p})

    explicit = EXPLICIT in maps
    banded = any(_bands(r, split).keys() - {'all'} for r in g.runs)   # within / beyond
    for band in BANDS:   # the families the tables show: each test is one cell
      for m in methods:
        if explicit and (band != 'all' or not banded):
          test('aligner', band, EXPLICIT, m, 'alignment_accuracy')
        elif not explicit:
          test('implicit', band, m, RANDOM, 'alignment_accuracy')
    for m in methods:
      if explicit:
        test('faithful', 'all', EXPLICIT, m, 'aopc')
    for m in ([EXPLICIT] if explicit else []) + methods:
      test('faithful', 'all', m, RANDOM, 'aopc')
    for m in ([EXPLICIT] if explicit else []) + methods:
      test('beyond', 'beyond', m, m, 'alignment_accuracy', band_b='within')
  for question in sorted({t['question'] for t in tests}):
    family = [t for t in tests if t['question'] == question]
    for t, p in zip(family, stats.holm([t['p'] for t in family])):
      t['p_holm'] = p
      t['significant'] = bool(p < ALPHA)
      t['ci_excludes_0'] = bool(t['ci_lo'] > 0 or t['ci_hi'] < 0)   # unadjusted
  return {'split': split, 'table': table, 'tests': tests,
          'seeds': {g.name: len(g.runs) for g in groups}}


def _cell(table: dict, variant: str, band: str, name: str, figure: str, fmt: str) -> str:
  r = table.get((variant, band, name, figure))
  if r is None:
    return '-'
  if not np.isfinite(r['ci_lo']):
    return format(r['mean'], fmt)
  return f'{r["mean"]:{fmt}} [{r["ci_lo"]:{fmt}}, {r["ci_hi"]:{fmt}}]'


def _test_cell(t: dict | None) -> str:
  if t is None:
    return '-'
  text = f'{t["diff"]:+.1f} (p {t["p_holm"]:.2g})' if np.isfinite(t['p_holm']) else \
      f'{t["diff"]:+.1f}'
  text += '†' if t['ci_excludes_0'] else ''
  return f'**{text}**' if t['significant'] else text


def markdown(s: dict) -> str:
  """The tables of the study: alignment accuracy per band, faithfulness, layers and heads,
  and each question's tests (bold: significant after Holm's adjustment)."""
  table = {(r['variant'], r['band'], r['map'], r['figure']): r for r in s['table']}
  variants = list(s['seeds'])
  by_variant = {v: [] for v in variants}
  for r in s['table']:
    if r['map'] not in by_variant[r['variant']]:
      by_variant[r['variant']].append(r['map'])
  main = [m for m in dict.fromkeys(m for ms in by_variant.values() for m in ms)
          if not m.startswith(EXPLICIT + '_')]
  main = [m for m in main if m != RANDOM] + [RANDOM]
  seeds = sorted(set(s['seeds'].values()))
  seeds_text = (f'{seeds[0]} seed{"" if seeds[0] == 1 else "s"} each' if len(seeds) == 1 else
                'seeds: ' + ', '.join(f'{v} {n}' for v, n in s['seeds'].items()))
  out = [f'# Implicit attention: {len(variants)} variants, {seeds_text}, {s["split"]} split', '',
         'Means over seeds with 95% t intervals. Maps: `attention` = the explicit weights (a '
         "Transformer's last layer, mean over heads), each attribution method, `random` = a "
         'random ranking (chance). Alignment accuracy: % of target steps whose argmax is the '
         'gold source position (teacher-forced on the reference; on images the pointing game: '
         "the argmax within half a grid cell of the output digit's box). AOPC: the mean drop of "
         'log p(y_t) when the top 1..k positions by the map are deleted (zero embedding).']
  def shown(band, figure):   # a table only where some run has the figure
    return any((v, band, m, figure) in table for v in variants for m in main)
  for band in (b for b in BANDS if shown(b, 'alignment_accuracy')):
    out += ['', f'## Alignment accuracy (%), {band} source lengths', '',
            '| variant | ' + ' | '.join(main) + ' |', '|---|' + '---|' * len(main)]
    out += [f'| {v} | ' + ' | '.join(_cell(table, v, band, m, 'alignment_accuracy', '.1f')
                                     for m in main) + ' |' for v in variants]
  if shown('all', 'aopc'):
    out += ['', '## Faithfulness: AOPC (nats), all source lengths', '',
            '| variant | ' + ' | '.join(main) + ' |', '|---|' + '---|' * len(main)]
    out += [f'| {v} | ' + ' | '.join(_cell(table, v, 'all', m, 'aopc', '.2f') for m in main)
            + ' |' for v in variants]
  layered = {v: [m for m in ms if m.startswith(EXPLICIT + '_')] for v, ms in by_variant.items()}
  for v, maps in layered.items():
    if maps:
      out += ['', f'## {v}: attention per layer and head (alignment accuracy %)', '',
              '| map | all | within | beyond |', '|---|---|---|---|']
      out += [f'| {m} | ' + ' | '.join(_cell(table, v, b, m, 'alignment_accuracy', '.1f')
                                      for b in BANDS) + ' |' for m in [EXPLICIT, *maps]]
  questions = {
      'implicit': 'Does a model without attention align implicitly? Each method\'s alignment '
                  'accuracy minus a random ranking\'s',
      'aligner': 'Explicit weights or gradients: the better aligner? Explicit minus each '
                 'method, alignment accuracy (points)',
      'faithful': 'Which is more faithful? AOPC of each map minus random positions\', and '
                  'explicit minus each method (nats)',
      'beyond': 'Beyond the training lengths: alignment accuracy beyond minus within (points)'}
  tests = s['tests']
  for q, title in questions.items():
    rows = [t for t in tests if t['question'] == q]
    if not rows:
      continue
    only_all = all(t['band'] == 'all' for t in rows)   # image runs: one band
    pairs = list(dict.fromkeys((t['a'], t['b'], t['band']) for t in rows
                               if t['band'] != 'all' or only_all
                               or q in ('implicit', 'faithful')))
    pairs = [p for p in pairs if q != 'faithful' or p[2] == 'all']
    head = [f'{a} − {b}' + ('' if q in ('beyond', 'faithful') else f' ({band})')
            if q != 'beyond' else a for a, b, band in pairs]
    cells = {(t['variant'], t['a'], t['b'], t['band']): t for t in rows}
    shown = [v for v in variants if any((v, *p) in cells for p in pairs)]
    out += ['', f'## {title}', '', '| variant | ' + ' | '.join(head) + ' |',
            '|---|' + '---|' * len(head)]
    out += [f'| {v} | ' + ' | '.join(_test_cell(cells.get((v, *p))) for p in pairs) + ' |'
            for v in shown]
  out += ['', 'Tests: paired t-tests over seeds (the two maps come from the same run), '
          f'Holm-adjusted within each question (each table one family); **bold**: p < {ALPHA} '
          "after adjustment; †: the difference's 95% interval over seeds excludes 0, "
          'unadjusted (with 3 seeds a t-test has 2 degrees of freedom, so Holm over a family of '
          'dozens of cells keeps only the largest, most consistent differences). A difference '
          'that is the same for every seed gets p = 0. Differences are means of the per-seed '
          'differences.']
  return '\n'.join(out) + '\n'
