"""Evaluate a trained run's checkpoint on one of its splits or on any parallel text files.

  python -m experiments.evaluate --workdir=runs/reverse_additive --split=test --beam=5 --alpha=0.6
  bash launch.sh evaluate --workdir=runs/dates_additive --src=my.src --ref=my.ref --beam=5 \
      --length_edges=0,10,20,30

Prints loss, perplexity, exact match, BLEU and chrF (with the sacrebleu signature), WER and PER
where a source has several references (cmudict, or --ref lines with tab-separated
alternatives), the same by source-length bucket (edges: --length_edges, else the run's
eval.length_edges) and, for tasks with a gold alignment (copy, reverse, sort), alignment
accuracy; with word-level gold (greek_english) the word alignments of the explicit maps and of
--word_alignment_methods (precision, recall, AER). Writes <workdir>/eval_<split or src file>.json, its by-length plot and heatmaps
(into --out instead, when given).

Several runs, comma-separated, are evaluated as their ensemble
(attention_jax/loaded/ensemble.py: the mean of their log-probabilities at each step, weights averaged; the first run's data and
settings, --step for every run, no attribution). An ensemble never writes into a member's run:
its files go to --out, and without --out it only prints its report.

  bash launch.sh evaluate --workdir=runs/rev/seed_1,runs/rev/seed_2 --out=runs/rev/ensemble_12
"""

from absl import app, flags

from attention_jax.analysis import saved_run
from experiments import cli

flags.DEFINE_list('workdir', None, 'A training run directory, or several, comma-separated: '
                  'evaluated as an ensemble.', required=True)
flags.DEFINE_string('out', None, 'Folder for the evaluation files (default: the run itself; '
                    'an ensemble without --out only prints its report).')
flags.DEFINE_list('split', ['test'], 'Which splits, comma-separated: train, validation, test '
                  'and a task\'s own (image_dates: test_heldout_fonts, the test dates drawn '
                  'in typefaces never trained on); ignored with --src/--ref.')
flags.DEFINE_string('src', None, 'Source text file, one sentence per line (with --ref).')
flags.DEFINE_string('ref', None, 'Reference file, line-aligned with --src; tab-separated '
                    'alternatives on a line count as several references.')
flags.DEFINE_integer('beam', None, 'Beam size (1 = greedy; default: the run\'s '
                     'eval.beam_size).', lower_bound=1)
flags.DEFINE_float('alpha', None, 'Length penalty exponent ((5+|Y|)/6)^alpha (default: the '
                   'run\'s eval.alpha).', lower_bound=0)
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_list('length_edges', None, 'Source-length bucket edges, e.g. 0,10,20 (default: '
                  'the run\'s eval.length_edges).')
flags.DEFINE_integer('heatmaps', 6, 'How many sentences to draw.', lower_bound=0)
flags.DEFINE_string('attribution', None, "Attribution methods measured against gold "
                    "alignments (copy/reverse/sort), comma-separated or 'all'; '' = none "
                    "(default: the run's eval.attribution).")
flags.DEFINE_string('word_alignment_methods', None, 'Attribution methods whose word alignments '
                    'are measured against word-level gold (greek_english) beside the explicit '
                    "maps, comma-separated or 'all' (default: the run's "
                    'eval.word_alignment_methods).')
flags.DEFINE_integer('word_alignment_num', None, 'Word alignments of the first N test sentences '
                     "(0: all; default: the run's eval.word_alignment_num).", lower_bound=0)
flags.DEFINE_integer('steps', None, "Integrated gradients' steps (default: the run's "
                     'eval.attribution_steps and eval.word_alignment_steps).', lower_bound=1)
CACHE = cli.define_compilation_cache_flag()
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if (FLAGS.src is None) != (FLAGS.ref is None):
    raise app.UsageError('--src and --ref go together')
  edges = None
  if FLAGS.length_edges:
    try:
      edges = [int(e) for e in FLAGS.length_edges]
    except ValueError:
      raise app.UsageError(f'--length_edges must be integers, got {FLAGS.length_edges}')
  cli.use_compilation_cache(CACHE)
  for split in (FLAGS.split if FLAGS.src is None else [None]):
    saved_run.evaluate_run(FLAGS.workdir, split=split, src=FLAGS.src, ref=FLAGS.ref,
                          attribution=FLAGS.attribution, beam=FLAGS.beam, alpha=FLAGS.alpha,
                          step=FLAGS.step, length_edges=edges, num_heatmaps=FLAGS.heatmaps,
                          out=FLAGS.out, word_alignment_methods=FLAGS.word_alignment_methods,
                          word_alignment_num=FLAGS.word_alignment_num,
                          steps=FLAGS.steps)


if __name__ == '__main__':
  cli.run(main)
