"""Comparing runs and groups of runs (a variant's seeds) evaluated on the same split.

  groups = resolve(['runs/length_study/additive', 'runs/length_study/dot'])  # seed groups
  c = compare(groups, split='test', metrics=['bleu', 'exact_match'])
  print(markdown(c))

A group is one finished run (workdir.Run.finished) or a directory of them (a sweep
variant's seed_<k> workdirs). For every group and metric: the mean over seeds, its standard
deviation and 95% t interval, overall and per source-length bucket. For every group against
the baseline (the best group on the first metric, unless named): the difference, its interval
over seeds (Welch) and over sentences (bootstrap), p over seeds (Welch's t-test) and over
sentences (paired approximate randomisation by default), both Holm-adjusted over the family
of comparisons on that metric, and one plain sentence. See attention_jax.analysis.stats for
the tests.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Sequence

import numpy as np

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import stats
from attention_jax.data import data_fields
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import records as records_lib

ALPHA = 0.05
# data fields that do not change which sentences a split holds
_NOT_THE_SPLIT = ('data_dir', 'batch_size', 'num_buckets', 'bucket_multiple', 'max_src_len',
                  'max_tgt_len')


@dataclasses.dataclass
class Evaluated:
  """A finished run as compare reads it: its results and its sentence records."""
  workdir: str
  results: dict            # workdir.Run.results()
  records: dict            # split -> (header, records), where the run wrote them

  def split(self, split: str) -> dict:
    return self.results['results'][split]

  @property
  def wall_s(self) -> float:
    """Seconds the sweep ran it, summed over its attempts (nan if not run by a sweep)."""
    lines = self._attempts_read
    return sum(a['seconds'] for a in lines) if lines else float('nan')

  @functools.cached_property
  def _attempts_read(self) -> list[dict]:
    """The sweep's attempts of this run, read once for all the properties."""
    return workdir_lib.Run(self.workdir).attempts()

  @property
  def attempts(self) -> int:
    """How many times the sweep started it (a killed run is retried)."""
    return len(self._attempts_read)

  @property
  def ran_on(self) -> str:
    """Where its last attempt ran (host, and the Ray node for a Ray sweep), '' if unknown."""
    last = (self._attempts_read or [{}])[-1]
    node = last.get('node_id')
    return ' '.join(x for x in (last.get('host', ''), f'node {node[:8]}' if node else '') if x)

  def data_config(self) -> dict:
    """The run's data section; fields it predates, and fields its task does not read (older
    runs saved them all), hold their default (data_fields.defaults())."""
    try:
      return {**data_fields.defaults(),
              **data_fields.as_read(workdir_lib.Run(self.workdir).config())}
    except (OSError, ValueError):
      return {}


@dataclasses.dataclass
class Group:
  name: str
  runs: list[Evaluated]


def is_run(path: str) -> bool:
  """A finished run (its final evaluation written)."""
  return workdir_lib.Run(path).finished


def load_run(workdir: str, splits: Sequence[str] = ('test',)) -> Evaluated:
  run = workdir_lib.Run(workdir)
  results = run.results()
  recs = {}
  for split in splits:
    path = run.sentences_path(split)
    if os.path.exists(path):
      recs[split] = records_lib.read(path)
  return Evaluated(workdir, results, recs)


def _runs_under(path: str) -> list[str]:
  return sorted((os.path.join(path, d) for d in os.listdir(path)
                 if is_run(os.path.join(path, d))), key=_natural)


def _natural(path: str):
  base = os.path.basename(path)
  digits = ''.join(ch for ch in base if ch.isdigit())
  return (base.rstrip('0123456789'), int(digits) if digits else -1, base)


def resolve(paths: Sequence[str], split: str = 'test') -> list[Group]:
  """Run or group directories -> groups (named by their directory; a seed_<k> run, or two
  directories named alike, with their parent's name too)."""
  groups = []
  for p in paths:
    p = os.path.normpath(p)
    if not os.path.isdir(p):
      raise FileNotFoundError(f'no such run or group directory: {p}')
    if is_run(p):
      runs = [p]
    else:
      runs = _runs_under(p)
      if not runs:
        raise ValueError(f'{p} is neither a finished run (no {workdir_lib.RESULTS}) nor a '
                         f'group of runs (no subdirectory holds {workdir_lib.RESULTS})')
    name = os.path.basename(p)
    if re.fullmatch(r'seed_\d+', name):   # one seed of a variant: say which variant
      name = os.path.join(os.path.basename(os.path.dirname(p)), name)
    groups.append(Group(name, [load_run(r, (split,)) for r in runs]))
  names = [g.name for g in groups]
  for g, p in zip(groups, paths):
    if names.count(g.name) > 1:
      g.name = os.path.join(os.path.basename(os.path.dirname(os.path.normpath(p))), g.name)
  if len({g.name for g in groups}) < len(groups):
    raise ValueError(f'the same run or group was given twice: {", ".join(paths)}')
  return groups


def sweep_groups(sweep_dir: str, split: str = 'test',
                 exclude: Sequence[str] = ()) -> list[Group]:
  """Every variant of a sweep directory that has at least one finished run, leaving out the
  run directories in `exclude` (runs whose variant changed since: sweep.run)."""
  skip = {os.path.normpath(p) for p in exclude}
  out = []
  for name in sorted(os.listdir(sweep_dir)):
    path = os.path.normpath(os.path.join(sweep_dir, name))
    if not os.path.isdir(path) or path in skip:
      continue
    if is_run(path):
      out.extend(resolve([path], split))
    elif runs := [r for r in _runs_under(path) if os.path.normpath(r) not in skip]:
      out.append(Group(name, [load_run(r, (split,)) for r in runs]))
  return out


def check_same_split(groups: Sequence[Group], split: str) -> int:
  """Refuses (ValueError naming the difference) runs evaluated on different sentences;
  returns the number of sentences. Runs with per-sentence records are compared by their
  split's fingerprint, others by their data config and sentence count."""
  runs = [r for g in groups for r in g.runs]
  for r in runs:
    if split not in r.results['results']:
      raise ValueError(f'{r.workdir} has no {split!r} results; splits: '
                       f'{", ".join(r.results["results"])}')
  first = runs[0]
  for r in runs[1:]:
    a, b = first.records.get(split), r.records.get(split)
    same = (a[0]['fingerprint'] == b[0]['fingerprint']) if a and b else (
        first.split(split)['sentences'] == r.split(split)['sentences'] and not _data_diffs(
            first, r))
    if not same:
      diffs = _data_diffs(first, r)
      raise ValueError(
          f'{first.workdir} and {r.workdir} were evaluated on different {split} splits '
          f'({first.split(split)["sentences"]} vs {r.split(split)["sentences"]} sentences'
          + (f'; fingerprints {a[0]["fingerprint"]} vs {b[0]["fingerprint"]}' if a and b else '')
          + (f'; data config: {"; ".join(diffs)}' if diffs else '') + '): they cannot be '
          'compared sentence by sentence')
  return int(first.split(split)['sentences'])


def _data_diffs(a: Evaluated, b: Evaluated) -> list[str]:
  da, db = a.data_config(), b.data_config()
  return [f'data.{k} {da.get(k)!r} vs {db.get(k)!r}' for k in sorted(set(da) | set(db))
          if k not in _NOT_THE_SPLIT and da.get(k) != db.get(k)]


def default_metrics(groups: Sequence[Group], split: str = 'test') -> list[str]:
  """The primary metric first (WER for tasks with several references, else BLEU), then one
  more (PER, or exact match)."""
  return list(records_lib.primary_metrics(groups[0].runs[0].split(split)))


def values(group: Group, split: str, metric: str) -> list[float]:
  return [float(r.split(split).get(metric, np.nan)) for r in group.runs]


def _mean_stats(group: Group, split: str, metric: str) -> np.ndarray | None:
  """Per-sentence statistics averaged over the group's seeds, or None without records."""
  if not all(split in r.records for r in group.runs):
    return None
  return np.mean([records_lib.stats(r.records[split][1], metric) for r in group.runs], 0)


def _interval_row(v: Sequence[float]) -> dict:
  i = stats.t_interval(v)
  return {'mean': i.mean, 'std': i.std, 'ci_lo': i.lo, 'ci_hi': i.hi, 'n': i.n}


def by_length(group: Group, split: str, metric: str) -> list[dict]:
  """Per source-length bucket: the metric's mean over seeds with its t interval."""
  buckets: dict[str, dict] = {}
  for r in group.runs:
    for row in r.split(split).get('by_length', []):
      if metric in row:
        b = buckets.setdefault(row['bucket'], {'bucket': row['bucket'], 'lo': row['lo'],
                                               'hi': row['hi'], 'sentences': row['sentences'],
                                               'values': []})
        b['values'].append(row[metric])
  out = []
  for b in sorted(buckets.values(), key=lambda b: b['lo']):
    iv = _interval_row(b.pop('values'))
    out.append({**b, metric: iv['mean'], 'std': iv['std'], 'ci_lo': iv['ci_lo'],
                'ci_hi': iv['ci_hi'], 'seeds': iv['n']})
  return out


def compare(groups: Sequence[Group], split: str = 'test', metrics: Sequence[str] = (),
            baseline: str | None = None, trials: int = 10_000) -> dict:
  """The statistics of the module docstring, as a dict of rows (see markdown())."""
  if not groups:
    raise ValueError('nothing to compare: no finished runs')
  sentences = check_same_split(groups, split)
  metrics = list(metrics) or default_metrics(groups, split)
  for m in metrics:
    if m not in records_lib.keys():
      raise ValueError(f'unknown metric {m!r}; valid: {", ".join(records_lib.keys())}')
    missing = [g.name for g in groups if not np.isfinite(values(g, split, m)).all()]
    if missing:
      raise ValueError(f'metric {m!r} is not in the {split} results of {", ".join(missing)}')
  lower = {m: metrics_lib.lower_is_better(m) for m in metrics}
  # every metric of the runs' results that all of them have, in metrics.METRICS' order
  reported = metrics + [m for m in metrics_lib.METRICS if m not in metrics and all(
      np.isfinite(values(g, split, m)).all() for g in groups)]
  summary = [{'variant': g.name, 'seeds': len(g.runs),
              **{f'{m}_{k}': v for m in reported
                 for k, v in _interval_row(values(g, split, m)).items() if k != 'n'},
              'steps_per_s': float(np.nanmean([r.results.get('train_steps_per_s') or np.nan
                                               for r in g.runs])),
              'wall_s': _sum_known([r.wall_s for r in g.runs])}
             for g in groups]
  primary = metrics[0]
  by_name = {g.name: g for g in groups}
  named = baseline is not None
  if baseline is None:
    means = {g.name: np.mean(values(g, split, primary)) for g in groups}
    baseline = (min if lower[primary] else max)(means, key=means.get)
  elif baseline not in by_name:
    raise ValueError(f'baseline {baseline!r} is not among the compared: {", ".join(by_name)}')
  base = by_name[baseline]
  tokenize = next((r.records[split][0].get('bleu_tokenize', '13a') for g in groups
                   for r in g.runs if split in r.records), '13a')
  rows = []
  for m in metrics:
    family = []
    for g in groups:
      if g is base:
        continue
      seed = stats.welch(values(g, split, m), values(base, split, m))
      sa, sb = _mean_stats(g, split, m), _mean_stats(base, split, m)
      if sa is not None and sb is not None:
        p_sent = stats.sentence_test(sa, sb, m, bleu_tokenize=tokenize, trials=trials)
        s_lo, s_hi = stats.sentence_interval(sa, sb, m, bleu_tokenize=tokenize)
      else:
        p_sent = s_lo = s_hi = float('nan')
      family.append({'variant': g.name, 'baseline': base.name, 'metric': m,
                     'variant_mean': float(np.mean(values(g, split, m))),
                     'baseline_mean': float(np.mean(values(base, split, m))),
                     'diff': seed.diff, 'ci_seeds_lo': seed.lo, 'ci_seeds_hi': seed.hi,
                     'ci_sentences_lo': s_lo, 'ci_sentences_hi': s_hi,
                     'p_seeds': seed.p, 'p_sentences': p_sent,
                     'seeds': f'{len(g.runs)}+{len(base.runs)}'})
    for key in ('p_seeds', 'p_sentences'):
      for row, adj in zip(family, stats.holm([r[key] for r in family])):
        row[f'{key}_holm'] = adj
    for row in family:
      ps = [row[k] for k in ('p_seeds_holm', 'p_sentences_holm') if np.isfinite(row[k])]
      row['significant'] = bool(ps) and all(p < ALPHA for p in ps)
      row['sentence'] = _sentence(row, split, lower[m], sentences)
    rows.extend(family)
  return {'split': split, 'sentences': sentences, 'metrics': metrics, 'reported': reported,
          'baseline': base.name,
          'baseline_named': named, 'trials': trials, 'summary': summary,
          'comparisons': rows,
          'by_length': {g.name: by_length(g, split, primary) for g in groups},
          'by_length_all': [{'variant': g.name, 'metric': m, **row}
                            for g in groups for m in reported
                            for row in by_length(g, split, m)]}


def format_p(p: float) -> str:
  """A p-value as tables and sentences print it."""
  return 'n/a' if not np.isfinite(p) else ('< 0.0001' if p < 1e-4 else f'{p:.2g}')


def _sentence(row: dict, split: str, lower_better: bool, sentences: int) -> str:
  """One plain sentence: which is better, by how much, on what, how sure. Its figures come
  in the order of its words (the first-named side's mean first; the difference and its
  interval are first minus second)."""
  m, v, b, d = metrics_lib.label(row['metric']), row['variant'], row['baseline'], row['diff']
  better = (d < 0) == lower_better
  # a sentence that names the baseline first turns the variant-minus-baseline figures round
  sign = 1 if better or not row['significant'] else -1
  first, second = (v, b) if sign > 0 else (b, v)
  means = (row['variant_mean'], row['baseline_mean'])[::sign]

  def interval(lo, hi):
    lo, hi = sorted((sign * row[lo], sign * row[hi]))
    return f'{lo:+.2f} to {hi:+.2f}'
  ci = (f'95% CI {interval("ci_seeds_lo", "ci_seeds_hi")} over seeds'
        if np.isfinite(row['ci_seeds_lo']) else
        f'95% CI {interval("ci_sentences_lo", "ci_sentences_hi")} over sentences'
        if np.isfinite(row['ci_sentences_lo']) else 'no interval')
  how = (f'Holm-adjusted p = {format_p(row["p_seeds_holm"])} over {row["seeds"]} seeds, '
         f'{format_p(row["p_sentences_holm"])} over {sentences:,} sentences'
         + ('; with one seed on a side, seed-to-seed variation is untested'
            if not np.isfinite(row['p_seeds']) else ''))
  figures = f'{means[0]:.2f} vs {means[1]:.2f} ({sign * d:+.2f}; {ci}'
  if d == 0:
    return f'{v} and {b} score the same {split} {m} ({row["variant_mean"]:.2f}; {how}).'
  if row['significant']:
    return (f'{first} is better than {second} on {split} {m}: {figures}); significant '
            f'({how}).')
  return f'{v} and {b} do not differ significantly on {split} {m}: {figures}; {how}).'


def _sum_known(xs) -> float:
  """The sum of the known (finite) values; nan if none is known (runs not run by a sweep
  have no wall time)."""
  known = [x for x in xs if np.isfinite(x)]
  return float(sum(known)) if known else float('nan')
