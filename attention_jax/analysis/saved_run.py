"""Evaluate a saved run: its best checkpoint (or a step) on one of its splits or on any pair of
text files, with the report by source length, the plots and heatmaps written into the run.

  attention_jax.evaluate_run('runs/dates_additive', split='test', beam=5)
  attention_jax.evaluate_run('runs/dates_additive', src='my.src', ref='my.ref', beam=5)
  attention_jax.evaluate_run(['runs/a', 'runs/b'], out='runs/ensemble_ab')   # an ensemble

(`bash launch.sh evaluate --workdir=...` is this with flags.)
"""

from __future__ import annotations

import os
from typing import Sequence

import ml_collections
import numpy as np

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.data import data_fields
from attention_jax.data import textfiles
from attention_jax.evaluation import evaluators as evaluators_lib
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import plots
from attention_jax.evaluation import records as records_lib
from attention_jax.evaluation import scoring
from attention_jax.implicit import alignment
from attention_jax.loaded import ensemble


def _read_pairs(src: str, ref: str) -> tuple[list[tuple[str, str]], list[list[str]] | None]:
  """Parallel text files -> ([(source, first reference)], every reference per line or None).

  A reference line may hold several acceptable references separated by tabs (e.g. every
  pronunciation of a word, for WER / PER); then all of them are returned."""
  sources, refs = textfiles.read_lines(src), textfiles.read_lines(ref)
  if len(sources) != len(refs):
    raise textfiles.CorpusError(f'{src} has {len(sources)} lines but {ref} has {len(refs)}')
  multi = [r.split('\t') for r in refs]
  pairs = [(s, m[0]) for s, m in zip(sources, multi)]
  return pairs, (multi if any('\t' in r for r in refs) else None)


def evaluate_run(workdir: str | Sequence[str], *, split: str | None = 'test',
                 src: str | None = None, ref: str | None = None, beam: int | None = None,
                 alpha: float | None = None, step: int | None = None,
                 length_edges: Sequence[int] | None = None, num_heatmaps: int = 6,
                 attribution: str | None = None, verbose: bool = True,
                 out: str | None = None, word_alignment_methods: str | None = None,
                 word_alignment_num: int | None = None, steps: int | None = None) -> dict:
  """Evaluates a run's checkpoint (best, or `step`) on one of its splits, or on any parallel
  text files `src` / `ref` (one sentence per line; see _read_pairs for several references),
  with beam size `beam` and length penalty `alpha` (default: the run's eval.beam_size and
  eval.alpha).

  Writes eval_<name>.json, a BLEU-by-length plot and heatmaps into the workdir (name: the
  split, or the source file's name) and returns the report: loss, token accuracy, exact
  match, BLEU and chrF (sacrebleu, with its signature), WER / PER where there are several
  references, the same by source length (edges: `length_edges`, else the run's
  eval.length_edges), alignment accuracy where the task has a gold alignment, and with
  `attribution` (methods, comma-separated, or 'all'; default: the run's eval.attribution,
  on a split) the figures of implicit attention against the gold alignments
  (alignment.attribute_split) under 'attribution'. On a task with word-level gold
  (greek_english), the word alignments of the explicit maps and of `word_alignment_methods`
  (default: the run's eval.word_alignment_methods) on the first `word_alignment_num` sentences
  (0: all; default: the run's) under 'word_alignment'; `steps`: integrated gradients' steps of
  both (default: the run's).

  Several runs (a list; ensemble.py) are evaluated as their ensemble, on the first run's data
  and settings, without attribution: their files go to the folder `out` (made if missing),
  never into a member's run; with out None the report is returned and printed only. One run
  writes into `out` when it is given, else into its workdir.
  """
  if (src is None) != (ref is None):
    raise ValueError('give both src and ref files (or neither, to evaluate a split)')
  several = not isinstance(workdir, (str, os.PathLike)) and len(workdir) > 1
  if several and (attribution or word_alignment_methods):
    raise ValueError('attribution of an ensemble is not supported: evaluate one run with it')
  translator = ensemble.load(workdir, step=step)
  if not several and not isinstance(workdir, (str, os.PathLike)):
    workdir = workdir[0]
  if out is not None:
    os.makedirs(out, exist_ok=True)
  run = workdir_lib.Run(out) if out is not None else None if several else workdir_lib.Run(workdir)
  label = (f'ensemble of {len(workdir)}: ' + ', '.join(map(os.fspath, workdir)) if several
           else workdir)
  cfg = ml_collections.ConfigDict(translator.run_config)
  beam = int(cfg.eval.get('beam_size', 5)) if beam is None else beam
  alpha = float(cfg.eval.get('alpha', 0.6)) if alpha is None else alpha
  toks = (translator.src_tok, translator.tgt_tok)
  if src is not None:
    pairs, refs = _read_pairs(src, ref)
    task = data_lib.Task.from_pairs(pairs, *toks, references=refs,
                                    max_src_len=int(cfg.data.max_src_len),
                                    max_tgt_len=int(cfg.data.max_tgt_len),
                                    num_buckets=int(cfg.data.num_buckets),
                                    bucket_multiple=int(data_fields.get(cfg.data,
                                                                        'bucket_multiple')))
    split, name = 'test', 'eval_' + os.path.basename(src).replace('.', '_')
  else:
    task = data_lib.load_task(cfg.data, seed=cfg.seed, tokenizers=toks)
    name = f'eval_{split}'
  name += '' if beam == 5 and alpha == 0.6 else f'_beam{beam}_a{alpha:g}'
  graphdef, params = translator.graphdef, translator.params
  scored = scoring.score_split(
      params, task, split, tf_fn=scoring.make_teacher_forced(graphdef),
      decode_fn=translator.decoder(beam, alpha, nbest=0), batch_size=cfg.data.batch_size,
      factor=cfg.train.max_decode_factor, bleu_tokenize=cfg.eval.bleu_tokenize,
      keep_outputs=num_heatmaps)
  report = scored.report
  if not np.isfinite(report['loss']):   # finite parameters (load checks), yet no usable model
    raise FloatingPointError(f'the loss of {workdir!r} step {translator.step} on '
                             f'{split if src is None else src} is {report["loss"]}: the model gives some reference token '
                             'probability 0 (or NaN); its metrics would mean nothing')
  if attribution is None and src is None and not several:
    attribution = cfg.eval.get('attribution', '')
  with cfg.unlocked():   # the evaluators' fields, as this call sets them
    cfg.eval.attribution = attribution or ''
    if word_alignment_methods is not None:
      cfg.eval.word_alignment_methods = word_alignment_methods
    if word_alignment_num is not None:
      cfg.eval.word_alignment_num = word_alignment_num
    if steps is not None:
      cfg.eval.attribution_steps = cfg.eval.word_alignment_steps = steps
    cfg.eval.heatmaps = num_heatmaps
    if length_edges is not None:
      cfg.eval.length_edges = length_edges
  report.update({'split': split if src is None else None, 'src': src, 'ref': ref,
                 'beam': beam, 'alpha': alpha, 'step': translator.step,
                 'workdir': ([os.path.abspath(w) for w in workdir] if several
                             else os.path.abspath(workdir))})
  evaluators_lib.run_all(evaluators_lib.build(cfg.eval), evaluators_lib.Context(
      'evaluate', split, report, scored.kept, scored.records, task, graphdef, params,
      translator.config, cfg, sentences=scored.sentences,
      path=(lambda kind: run.eval_path(name, kind)) if run is not None else None,
      prefix='test' if src is None else 'file', one_model=not several))
  if run is not None:
    _write(report, run, name, translator, split if src is None else os.path.basename(src),
           label)
  if verbose:
    print(format_report(report, label, name, run))
    if 'attribution' in report:
      print('\nimplicit attention: ' + alignment.format_report(report['attribution'], split))
  return report


def _write(report: dict, run: workdir_lib.Run, name: str, translator, what: str,
           label: str) -> None:
  """The by-length plot and the report, into `run`'s folder (the evaluators wrote theirs)."""
  metric = records_lib.primary_metrics(report)[0]
  single = len(translator.model_configs) == 1
  variant = translator.config.variant if single else 'ensemble'
  title = os.path.basename(os.path.abspath(label)) if single else label
  report[f'{metric}_by_length_plot'] = plots.plot_by_length(
      {variant: report['by_length']}, run.eval_path(name, 'plot', metric), metric=metric,
      title=f'{title}: {metric.upper()} by source length ({what})')
  run.write_eval(name, report)


def format_report(report: dict, workdir: str, name: str,
                  run: workdir_lib.Run | None = None) -> str:
  """The metrics table, the by-length table and the files written (into `run`, default the
  workdir's; None with an ensemble: nothing written), as printed by evaluate."""
  dec = 'greedy' if report['beam'] == 1 else f'beam {report["beam"]}, alpha {report["alpha"]}'
  what = report['split'] or f'{report["src"]} -> {report["ref"]}'
  keys = scoring.report_keys(report)
  first, bands = ['exact_match', 'bleu', 'chrf'], report['by_length']
  cols = ['sentences'] + first + [k for k in metrics_lib.METRICS if k not in first and bands
                                  and all(k in r for r in bands)]
  lines = [f'{workdir} step {report["step"]}, {what} ({report["sentences"]} sentences, {dec})',
           f'sacrebleu signature: {report["bleu_signature"]}',
           '| ' + ' | '.join(keys) + ' |', '|' + '---|' * len(keys),
           '| ' + ' | '.join(f'{report[k]:.4g}' for k in keys) + ' |', '',
           '| source length | ' + ' | '.join(cols) + ' |', '|---|' + '---|' * len(cols)]
  for r in report['by_length']:
    lines.append(f'| {r["bucket"]} | ' + ' | '.join(
        f'{r[c]:.4g}' if isinstance(r[c], float) else str(r[c]) for c in cols) + ' |')
  plot = next((v for k, v in report.items() if k.endswith('_by_length_plot')), None)
  run = workdir_lib.Run(workdir) if run is None and plot is not None else run
  if run is None:
    lines.append('\nan ensemble: nothing written (give out=FOLDER, or --out, to keep the files)')
    return '\n'.join(lines)
  lines.append(f'\nwrote {run.eval_path(name)}, {plot}, '
               f'{len(report.get("heatmaps", []))} heatmaps in {run.eval_path(name, "heatmaps")}/')
  return '\n'.join(lines)
