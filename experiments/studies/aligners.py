"""Classical word aligners (attention_jax/analysis/aligners.py: eflomal, IBM 1, IBM 2) on the
greek_english task: what unsupervised aligners reach on the test verses whose manual
alignments also score a model's attention (implicit/word_alignment.py, the same scoring).

  python -m experiments.studies.aligners --data_dir=/tmp/tfds --out=aligners.json \
      --table=aligners.md --links_dir=aligner_links

Each aligner is trained on all 7,936 verse pairs (train, validation and test: unsupervised
aligners are trained on the text they align) and scored on the test verses with gold: corpus
precision, recall and AER (percent), and AER by bands of Greek words. A setting (aligner,
options) is trained once per direction; its five rows (forward, reverse, intersection,
grow-diag-final, union) share that training, and `s` is its time (both directions). eflomal
takes no seed, so each of its settings runs --repeats times: the figures are the mean over
runs, AER ± the standard deviation. --links_dir gets the test verses' Greek (test.grc),
English (test.eng), gold (test.gold; an empty line: no gold) and the links of the best eflomal
row (lowest mean AER; its first run), one Pharaoh line per verse.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from importlib import metadata

from absl import app, flags

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.analysis import aligners as aligners_lib
from attention_jax.data import pharaoh
from attention_jax.implicit import word_alignment
from experiments import cli
from experiments.configs import greek_english

SPLITS = ('train', 'validation', 'test')
PACKAGES = {'eflomal': 'eflomal', 'ibm1': 'nltk', 'ibm2': 'nltk'}   # whose version is reported

flags.DEFINE_string('data_dir', '', 'TFDS data_dir of the greek_english task (default: TFDS\'s).')
flags.DEFINE_list('aligners', list(aligners_lib.ALIGNERS), 'Aligners run; valid: '
                  f'{", ".join(aligners_lib.ALIGNERS)}.')
flags.DEFINE_string('out', None, 'JSON file of every row.', required=True)
flags.DEFINE_string('table', None, 'Also write the markdown table to this file.')
flags.DEFINE_string('links_dir', None, 'Also write the test verses and the best eflomal '
                    "row's links there (Pharaoh).")
flags.DEFINE_list('eflomal_prefixes', ['0:0', '4:0', '6:0', '0:4', '4:4', '6:4'],
                  "eflomal's stemming: Greek:English prefix lengths (0: whole words).")
flags.DEFINE_list('raw', ['eflomal:0:0', 'ibm1'],
                  'Settings also run with normalise=False (aligner, eflomal:G:E).')
flags.DEFINE_list('subsets', [], 'Also score each row on the test verses among the first N of '
                  'the test split (e.g. 64: those a study aligned with its slow attribution maps, '
                  'eval.word_alignment_num), for each N given.')
flags.DEFINE_integer('iterations', 5, 'EM iterations of IBM 1 and 2.', lower_bound=1)
flags.DEFINE_integer('repeats', 3, 'Runs of each eflomal setting (it takes no seed).',
                     lower_bound=1)
FLAGS = flags.FLAGS


def prefixes(spec: str) -> tuple[int, int]:
  """'G:E' -> (Greek, English) prefix lengths."""
  parts = spec.split(':')
  if len(parts) != 2 or not all(p.isdigit() for p in parts):
    raise app.UsageError(f'--eflomal_prefixes: {spec!r} is not G:E (two lengths, e.g. 4:0)')
  return int(parts[0]), int(parts[1])


def settings(names: list[str]) -> list[tuple[str, str, dict]]:
  """[(aligner, setting label, options)] in the order run."""
  out, keys = [], []
  for name in names:
    aligners_lib.options_of(name)   # an unknown aligner: its error, before any work
    if name == 'eflomal':
      grid = [(f'eflomal:{g}:{e}', f'prefix {g}/{e}',
               {'source_prefix_len': g, 'target_prefix_len': e})
              for g, e in map(prefixes, FLAGS.eflomal_prefixes)]
    else:
      grid = [(name, f'iterations {FLAGS.iterations}', {'iterations': FLAGS.iterations})]
    for key, label, options in grid:
      keys.append(key)
      out.append((name, label, {**options, 'normalise': True}))
      if key in FLAGS.raw:
        out.append((name, label + ', raw', {**options, 'normalise': False}))
  # a --raw setting of an aligner not run is no error
  unknown = [k for k in FLAGS.raw if k not in keys and (
      k.split(':')[0] in names or k.split(':')[0] not in aligners_lib.ALIGNERS)]
  if unknown:
    raise app.UsageError(f'--raw names {", ".join(unknown)}, not run; settings run: '
                         f'{", ".join(keys)}')
  return out


def scored(golds, links, lengths) -> dict:
  """Precision, recall, AER and AER by Greek length bands of links against golds."""
  return {**word_alignment.score(golds, links),
          'by_length': word_alignment.score_by_length(golds, links, lengths)}


def summary(runs: list[dict]) -> dict:
  """Means over runs (AER's standard deviation too), by length band as well."""
  mean = lambda key, rows: statistics.fmean(r[key] for r in rows)
  bands = [{**band, **{k: mean(k, [r['by_length'][b] for r in runs])
                       for k in ('precision', 'recall', 'aer')}}
           for b, band in enumerate(runs[0]['by_length'])]
  return {**{k: mean(k, runs) for k in ('precision', 'recall', 'aer')},
          'aer_sd': statistics.stdev(r['aer'] for r in runs) if len(runs) > 1 else 0.0,
          'by_length': bands}


def markdown(rows: list[dict], header: str) -> str:
  bands = [f'{b["lo"]}-{b["hi"]}' if b['hi'] else f'{b["lo"]}+' for b in rows[0]['by_length']]
  lines = [header, '',
           '| aligner | setting | direction | precision | recall | AER | '
           + ' | '.join(f'AER {b} ({n["sentences"]})'
                        for b, n in zip(bands, rows[0]['by_length'])) + ' | s |',
           '|---' * (7 + len(bands)) + '|']
  for r in rows:
    aer = f'{r["aer"]:.1f}' + (f' ± {r["aer_sd"]:.1f}' if r['runs'] > 1 else '')
    lines.append(f'| {r["aligner"]} | {r["setting"]} | {r["direction"]} | '
                 f'{r["precision"]:.1f} | {r["recall"]:.1f} | {aer} | '
                 + ' | '.join(f'{b["aer"]:.1f}' for b in r['by_length'])
                 + f' | {r["seconds"]:.0f} |')
  return '\n'.join(lines) + '\n'


def setting_rows(name: str, label: str, options: dict, src, tgt, first: int, keep, golds,
                 lengths) -> list[dict]:
  """One setting trained on all the pairs (src, tgt) -> a row per direction, scored on the
  test pairs (from `first` on) at `keep` against golds; with the first run's test links."""
  runs = FLAGS.repeats if name == 'eflomal' else 1   # nltk's EM is deterministic
  results = {d: [] for d in aligners_lib.DIRECTIONS}
  subsets = {n: [j for j, k in enumerate(keep) if k < n] for n in map(int, FLAGS.subsets)}
  parts = {(n, d): [] for n in subsets for d in aligners_lib.DIRECTIONS}
  links, seconds = {}, []
  for _ in range(runs):
    start = time.perf_counter()
    each = aligners_lib.align_each(name, src, tgt, **options)
    seconds.append(time.perf_counter() - start)
    for d, all_links in each.items():
      test = all_links[first:]
      links.setdefault(d, test)
      results[d].append(scored(golds, [test[k] for k in keep], lengths))
      for n, js in subsets.items():
        parts[n, d].append(scored([golds[j] for j in js], [test[keep[j]] for j in js],
                                  [lengths[j] for j in js]))
  return [{'aligner': name, 'setting': label, 'options': options, 'direction': d,
           'runs': runs, 'seconds': statistics.fmean(seconds), **summary(results[d]),
           'per_run': results[d], 'sentences': len(keep),
           'subsets': {str(n): {**summary(parts[n, d]), 'sentences': len(js),
                                'per_run': parts[n, d]} for n, js in subsets.items()},
           'links': links[d]} for d in aligners_lib.DIRECTIONS]


def write_links(folder: str, texts, golds, best: dict) -> None:
  os.makedirs(folder, exist_ok=True)
  for ext, k in (('grc', 0), ('eng', 1)):
    workdir_lib.write_atomic(os.path.join(folder, f'test.{ext}'),
                             ''.join(pair[k] + '\n' for pair in texts))
  pharaoh.write(os.path.join(folder, 'test.gold'), [g or () for g in golds])
  name = f'{best["aligner"]}.{best["setting"].replace(" ", "_").replace("/", "-")}'
  pharaoh.write(os.path.join(folder, f'{name}.{best["direction"]}.links'), best['links'])


def main(argv):
  del argv
  for path in (FLAGS.out, FLAGS.table):
    if path:
      cli.check_output(path)
  plan = settings(FLAGS.aligners)
  cfg = greek_english.get_config()
  cfg.data.data_dir = FLAGS.data_dir
  task = data_lib.load_task(cfg.data)
  src = [s for split in SPLITS for s, _ in task.texts(split)]
  tgt = [t for split in SPLITS for _, t in task.texts(split)]
  test_texts, test_golds = task.texts('test'), task.word_gold('test')
  first = len(src) - len(test_texts)   # the test verses come last
  keep = [k for k, g in enumerate(test_golds) if g is not None]
  golds = [test_golds[k] for k in keep]
  lengths = [len(test_texts[k][0].split()) for k in keep]

  rows = []
  for name, label, options in plan:
    rows += setting_rows(name, label, options, src, tgt, first, keep, golds, lengths)
    print(f'{name} {label}: {rows[-1]["seconds"]:.0f} s per run, best AER '
          f'{min(r["aer"] for r in rows[-5:]):.1f}', file=sys.stderr, flush=True)

  versions = {PACKAGES[n]: metadata.version(PACKAGES[n]) for n in FLAGS.aligners}
  header = (f'Trained on {len(src):,} verse pairs ({sum(len(s.split()) for s in src):,} Greek '
            f'words); scored on the {len(keep)} test verses with gold ({sum(lengths):,} Greek '
            f'words, {sum(len(g.sure) for g in golds):,} sure links). '
            + ', '.join(f'{p} {v}' for p, v in versions.items())
            + (f'; eflomal: model 3, mean of {FLAGS.repeats} runs, AER ± sd'
               if 'eflomal' in FLAGS.aligners else '')
            + f'; s: one training of both directions, {os.cpu_count()} CPUs '
            f'(OMP_NUM_THREADS={os.environ.get("OMP_NUM_THREADS", "unset")}). AER by Greek '
            'words (verses).')
  text = markdown(rows, header)
  print(text)
  report = {'header': header, 'versions': versions,
            'rows': [{k: v for k, v in r.items() if k != 'links'} for r in rows]}
  workdir_lib.write_atomic(FLAGS.out, json.dumps(report, indent=1) + '\n')
  if FLAGS.table:
    workdir_lib.write_atomic(FLAGS.table, text)
  eflomal_rows = [r for r in rows if r['aligner'] == 'eflomal']
  if FLAGS.links_dir and not eflomal_rows:
    print('--links_dir: eflomal was not run, no links written', file=sys.stderr)
  elif FLAGS.links_dir:
    best = min(eflomal_rows, key=lambda r: r['aer'])
    write_links(FLAGS.links_dir, test_texts, test_golds, best)
    print(f'wrote the test verses and the links of eflomal {best["setting"]} '
          f'{best["direction"]} to {FLAGS.links_dir}')


if __name__ == '__main__':
  cli.run(main)
