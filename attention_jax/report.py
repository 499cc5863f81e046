"""Reports over a sweep directory (runs/<sweep>/<variant>/results.json): a table of every
variant (markdown and CSV), mean and std over seeds, a bar chart, and the BLEU-by-length
curves of all variants in one figure with their markdown table. Tasks with several references
per source (G2P) are charted by word error rate (WER) instead of BLEU."""

from __future__ import annotations

import csv
import json
import os
import re

import numpy as np

from attention_jax import plots
from attention_jax.evaluate import by_length_markdown

COLUMNS = ('wer', 'per', 'bleu', 'chrf', 'exact_match', 'token_accuracy', 'alignment_accuracy')


def collect(sweep_dir: str) -> dict[str, dict]:
  """{variant: {'results': ..., 'wall_s': ..., 'steps_per_s': ...}} for finished variants."""
  out = {}
  for name in sorted(os.listdir(sweep_dir)):
    path = os.path.join(sweep_dir, name, 'results.json')
    if not os.path.exists(path):
      continue
    with open(path) as f:
      res = json.load(f)
    wall = 0.0
    wt = os.path.join(sweep_dir, name, 'wall_time.json')
    if os.path.exists(wt):
      with open(wt) as f:
        wall = sum(json.loads(line)['seconds'] for line in f if line.strip())
    out[name] = {'results': res['results'], 'wall_s': wall,
                 'steps_per_s': res.get('train_steps_per_s') or float('nan')}
  return out


def _train_max_len(workdir: str) -> int | None:
  """The longest training source of a symbol task (copy/reverse/sort), else None."""
  try:
    with open(os.path.join(workdir, 'config.json')) as f:
      data = json.load(f)['data']
  except (OSError, KeyError, ValueError):
    return None
  return data.get('max_len') if data.get('name') in ('copy', 'reverse', 'sort') else None


def _group(name: str) -> str:
  """Variants that differ only in their seed share a group: 'additive_bahdanau_s1' ->
  'additive_bahdanau'."""
  return re.sub(r'_s(eed)?\d+$', '', name)


def write(sweep_dir: str, split: str = 'test') -> dict[str, str]:
  """Writes summary.md, summary.csv, bars.png and bleu_by_length.png (wer_by_length.png for
  G2P) into sweep_dir."""
  runs = collect(sweep_dir)
  if not runs:
    raise FileNotFoundError(f'no finished variant (results.json) under {sweep_dir}')
  rows = []
  for name, r in runs.items():
    m = r['results'][split]
    rows.append({'variant': name, **{c: m.get(c, float('nan')) for c in COLUMNS},
                 'steps_per_s': r['steps_per_s'], 'wall_s': r['wall_s']})
  csv_path = os.path.join(sweep_dir, 'summary.csv')
  with open(csv_path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)

  groups: dict[str, list[dict]] = {}
  for row in rows:
    groups.setdefault(_group(row['variant']), []).append(row)
  cols = [c for c in COLUMNS if any(np.isfinite(r[c]) for r in rows)]
  md = ['| variant | seeds | ' + ' | '.join(cols) + ' | steps/s | wall (s) |',
        '|---|---|' + '---|' * (len(cols) + 2)]
  for g, rs in groups.items():
    def stat(c):
      v = np.array([r[c] for r in rs], float)
      if not np.isfinite(v).any():
        return '-'
      return f'{v.mean():.2f}' + (f' ± {v.std():.2f}' if len(v) > 1 else '')
    md.append(f'| {g} | {len(rs)} | ' + ' | '.join(stat(c) for c in cols) +
              f' | {stat("steps_per_s")} | {stat("wall_s")} |')
  metric = 'wer' if all(np.isfinite(r['wer']) for r in rows) else 'bleu'
  label = {'wer': 'WER (%)', 'bleu': 'BLEU'}[metric]
  curves = {n: r['results'][split].get('by_length', []) for n, r in runs.items()}
  curves = {n: c for n, c in curves.items() if c}
  md_text = (f'Test split, {len(runs)} variants ({os.path.basename(sweep_dir)}).\n\n'
             + '\n'.join(md) + '\n')
  if curves:
    md_text += '\n' + by_length_markdown(curves, metric) + '\n'
  md_path = os.path.join(sweep_dir, 'summary.md')
  with open(md_path, 'w') as f:
    f.write(md_text)
  paths = {'markdown': md_path, 'csv': csv_path}
  paths['bars'] = plots.plot_bars({g: [r[metric] for r in rs] for g, rs in groups.items()},
                                  os.path.join(sweep_dir, 'bars.png'), ylabel=f'{split} {label}')
  if curves:
    paths['by_length'] = plots.plot_by_length(
        curves, os.path.join(sweep_dir, f'{metric}_by_length.png'), metric=metric,
        title=f'{os.path.basename(sweep_dir)}: {split} {label} by source length',
        train_max_len=_train_max_len(os.path.join(sweep_dir, next(iter(curves)))))
  print(md_text)
  print('wrote ' + ', '.join(paths.values()))
  return paths
