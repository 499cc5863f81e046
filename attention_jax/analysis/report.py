"""The report of a sweep directory (runs/<sweep>/<variant>[/seed_<k>], finished runs): every
variant's mean, standard deviation and 95% interval over seeds, overall and per source-length
bucket, and every variant against the best one (or the sweep file's BASELINE) with intervals,
p-values over seeds and over sentences, Holm-adjusted (attention_jax.analysis.compare), and the
markdown of any comparison (`markdown`, also what `bash launch.sh compare` prints). Writes

  summary.md        the tables, one plain sentence per comparison, and how it was tested
  summary.csv       one row per variant: <metric>_mean/_std/_ci_lo/_ci_hi of every metric,
                    steps/s, wall
  by_length.csv     one row per (variant, metric, source-length bucket): mean, std, interval
  comparisons.csv   one row per (variant, metric) against the baseline
  runs.csv          one row per run (each seed): its metrics, wall time, attempts, where it ran
  bars.png          the primary metric's means with their intervals as error bars
  <metric>_by_length.png   the primary metric by source length, intervals as bands
  implicit_attention.md, implicit_attention.csv, implicit_tests.csv   where the runs measured
                    attributions against gold alignments (eval.attribution): the
                    implicit-attention study (attention_jax/analysis/implicit_study.py)
  word_alignment.md where the runs measured word alignments against word-level gold
                    (eval.word_alignment; greek_english): the alignment study's tables
                    (attention_jax/analysis/alignment_study.py), with the classical
                    aligners' rows when aligners.json (experiments/studies/aligners.py) is there

Tasks with several references per source (G2P) lead with word error rate (WER), others with
BLEU.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import alignment_study
from attention_jax.analysis import compare as compare_lib
from attention_jax.analysis import implicit_study
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import plots



def run_columns() -> tuple[str, ...]:
  """The per-run table's metric columns: lower-is-better ones (G2P's WER, PER) first."""
  return tuple(sorted(metrics_lib.METRICS, key=lambda n: not metrics_lib.lower_is_better(n)))


def _train_max_len(workdir: str) -> int | None:
  """The longest training source of a symbol task (copy/reverse/sort), else None."""
  try:
    data = workdir_lib.Run(workdir).config()['data']
  except (OSError, KeyError, ValueError):
    return None
  return data.get('max_len') if data.get('name') in ('copy', 'reverse', 'sort') else None


def _write_csv(path: str, rows: list[dict]) -> str:
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
  return path


ALIGNERS_FILE = 'aligners.json'   # the classical aligners' figures, beside a sweep's runs


def write(sweep_dir: str, split: str = 'test', baseline: str | None = None,
          metrics: tuple[str, ...] = (), verbose: bool = True,
          exclude: tuple[str, ...] = ()) -> dict[str, str]:
  """Writes the files of the module docstring into sweep_dir; returns their paths. Runs in
  `exclude` (directories) are left out."""
  groups = compare_lib.sweep_groups(sweep_dir, split, exclude)
  if not groups:
    raise FileNotFoundError(f'no finished run ({workdir_lib.RESULTS}) under {sweep_dir}'
                            + (f' but the {len(exclude)} left out (changed since they ran)'
                               if exclude else ''))
  c = compare_lib.compare(groups, split, metrics, baseline=baseline)
  name = os.path.basename(os.path.normpath(sweep_dir))
  paths = {'markdown': os.path.join(sweep_dir, 'summary.md')}
  text = markdown(c, title=(
      f'{name}, {split} split: {len(groups)} variants, '
      f'{sum(len(g.runs) for g in groups)} runs, {c["sentences"]:,} sentences.'))
  with open(paths['markdown'], 'w') as f:
    f.write(text)
  paths['csv'] = _write_csv(os.path.join(sweep_dir, 'summary.csv'), c['summary'])
  if c['by_length_all']:
    rows = [{k: v for k, v in r.items() if k != r['metric']} | {'mean': r[r['metric']]}
            for r in c['by_length_all']]
    paths['by_length_csv'] = _write_csv(os.path.join(sweep_dir, 'by_length.csv'), rows)
  if c['comparisons']:
    paths['comparisons'] = _write_csv(os.path.join(sweep_dir, 'comparisons.csv'),
                                      c['comparisons'])
  run_rows = [{'variant': g.name, 'run': os.path.relpath(r.workdir, sweep_dir),
               **{k: r.split(split).get(k, float('nan')) for k in run_columns()},
               'steps_per_s': r.results.get('train_steps_per_s'), 'wall_s': r.wall_s,
               'attempts': r.attempts, 'ran_on': r.ran_on}
              for g in groups for r in g.runs]
  paths['runs'] = _write_csv(os.path.join(sweep_dir, 'runs.csv'), run_rows)
  metric = c['metrics'][0]
  label = f'{split} {metrics_lib.label(metric)}'
  paths['bars'] = plots.plot_bars(
      {s['variant']: (s[f'{metric}_mean'], s[f'{metric}_ci_lo'], s[f'{metric}_ci_hi'])
       for s in c['summary']}, os.path.join(sweep_dir, 'bars.png'),
      ylabel=label, title=f'{name}: mean over seeds, 95% interval')
  curves = {n: rows for n, rows in c['by_length'].items() if rows}
  if curves:
    paths['by_length'] = plots.plot_by_length(
        curves, os.path.join(sweep_dir, f'{metric}_by_length.png'), metric=metric,
        title=f'{name}: {label} by source length (mean over seeds, 95% band)',
        train_max_len=_train_max_len(groups[0].runs[0].workdir))
  if implicit_study.has_attribution(groups, split):   # runs with eval.attribution
    study = implicit_study.study(groups, split)
    paths['implicit_markdown'] = os.path.join(sweep_dir, 'implicit_attention.md')
    with open(paths['implicit_markdown'], 'w') as f:
      f.write(implicit_study.markdown(study))
    paths['implicit_csv'] = _write_csv(os.path.join(sweep_dir, 'implicit_attention.csv'),
                                       study['table'])
    if study['tests']:
      paths['implicit_tests'] = _write_csv(os.path.join(sweep_dir, 'implicit_tests.csv'),
                                           study['tests'])
  if any('word_alignment' in r.split(split) for g in groups for r in g.runs):
    aligners_path = os.path.join(sweep_dir, ALIGNERS_FILE)   # experiments/studies/aligners.py
    aligners = None
    if os.path.exists(aligners_path):
      with open(aligners_path) as f:
        aligners = alignment_study.aligners_of(json.load(f)['rows'])
    study = alignment_study.summarise(
        [g for g in groups if all('word_alignment' in r.split(split) for r in g.runs)],
        aligners, split)
    paths['word_alignment'] = os.path.join(sweep_dir, 'word_alignment.md')
    workdir_lib.write_atomic(paths['word_alignment'], alignment_study.markdown(study) + '\n')
  if verbose:
    print(text)
    print('wrote ' + ', '.join(paths.values()))
  return paths


def _cell(mean: float, lo: float, hi: float, std: float = float('nan')) -> str:
  if not np.isfinite(mean):
    return '-'
  return (f'{mean:.2f}' + (f' ± {std:.2f}' if np.isfinite(std) else '')
          + (f' [{lo:.2f}, {hi:.2f}]' if np.isfinite(lo) else ''))


def _known(x: float, fmt: str) -> str:
  return format(x, fmt) if np.isfinite(x) else '-'


def markdown(c: dict, title: str = '') -> str:
  """The comparison as markdown: summary table, by-length table, comparisons, sentences, and
  how it was tested."""
  ms, split, p = c['metrics'], c['split'], compare_lib.format_p
  seeds = sorted({s['seeds'] for s in c['summary']})
  out = [title or f'{split.capitalize()} split: {len(c["summary"])} variants, '
         f'{"/".join(map(str, seeds))} seed(s) each, {c["sentences"]:,} sentences.', '',
         'Mean ± standard deviation over seeds [95% t interval]:', '',
         '| variant | seeds | ' + ' | '.join(metrics_lib.label(m) for m in c['reported'])
         + ' | steps/s | wall (s, all seeds) |',
         '|---|---|' + '---|' * (len(c['reported']) + 2)]
  for s in c['summary']:
    out.append(f'| {s["variant"]} | {s["seeds"]} | ' + ' | '.join(
        _cell(s[f'{m}_mean'], s[f'{m}_ci_lo'], s[f'{m}_ci_hi'], s[f'{m}_std'])
        for m in c['reported'])
        + f' | {_known(s["steps_per_s"], ".1f")} | {_known(s["wall_s"], ".0f")} |')
  curves = c['by_length']
  buckets = []
  for rows in curves.values():
    buckets += [r['bucket'] for r in rows if r['bucket'] not in buckets]
  if buckets:
    out += ['', f'{metrics_lib.label(ms[0])} by source length, mean over seeds '
                '[95% t interval]:', '',
            '| variant | ' + ' | '.join(buckets) + ' |', '|---|' + '---|' * len(buckets)]
    for name, rows in curves.items():
      got = {r['bucket']: r for r in rows}
      out.append(f'| {name} | ' + ' | '.join(
          _cell(got[b][ms[0]], got[b]['ci_lo'], got[b]['ci_hi']) if b in got else ''
          for b in buckets) + ' |')
  why = ('named as the baseline' if c['baseline_named']
         else f'the best mean {metrics_lib.label(ms[0])}')
  out += ['', f'Against **{c["baseline"]}** ({why}); difference = variant - baseline:', '',
          '| variant | metric | mean | baseline | difference | 95% CI, seeds | '
          '95% CI, sentences | p seeds (Holm) | p sentences (Holm) | significant |',
          '|---|---|---|---|---|---|---|---|---|---|']
  for r in c['comparisons']:
    out.append(
        f'| {r["variant"]} | {metrics_lib.label(r["metric"])} | {r["variant_mean"]:.2f} | '
        f'{r["baseline_mean"]:.2f} | {r["diff"]:+.2f} | '
        + ' | '.join('-' if not np.isfinite(r[f'ci_{k}_lo']) else
                     f'{r[f"ci_{k}_lo"]:+.2f} to {r[f"ci_{k}_hi"]:+.2f}'
                     for k in ('seeds', 'sentences'))
        + f' | {p(r["p_seeds"])} ({p(r["p_seeds_holm"])}) | '
          f'{p(r["p_sentences"])} ({p(r["p_sentences_holm"])}) | '
          f'{"yes" if r["significant"] else "no"} |')
  out += [''] + [f'- {r["sentence"]}' for r in c['comparisons']]
  out += ['', f'How this was tested: over seeds, Welch\'s t-test and t intervals (few seeds: '
          'a permutation test over 3+3 seeds cannot reach p < 0.1); over the '
          f'{c["sentences"]:,} {split} sentences, paired approximate randomisation '
          f'({c["trials"]:,} trials, scipy.stats.permutation_test; Riezler & Maxwell 2005 found '
          'it less prone to false positives than the paired bootstrap) on per-sentence statistics '
          '(a system with several seeds is the mean of its seeds\' statistics per sentence; '
          'ties count as extreme, so identical systems get p = 1), and a paired percentile '
          'bootstrap (scipy.stats.bootstrap, '
          '1,000 resamples) for the interval. p-values are Holm-adjusted within each metric\'s '
          f'family of {max(len(c["summary"]) - 1, 0)} comparisons; "significant" means every '
          f'available adjusted p is below {compare_lib.ALPHA} (over seeds and over sentences: a '
          'difference must hold beyond both seed-to-seed variation and the choice of test '
          'sentences).']
  return '\n'.join(out) + '\n'
