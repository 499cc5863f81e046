"""Evaluate a trained run's checkpoint on a split, with greedy or beam decoding.

  python -m experiments.evaluate --workdir=runs/reverse_additive --split=test --beam=5 --alpha=0.6

Prints loss, perplexity, exact match, BLEU and chrF (with the sacrebleu signature), the same
by source-length bucket (edges: eval.length_edges of the run's config) and, for tasks with a
gold alignment (copy, reverse, sort), alignment accuracy. Writes <workdir>/eval_<split>.json,
<workdir>/eval_<split>_bleu_by_length.png and heatmaps under <workdir>/eval_<split>_heatmaps/.
"""

from absl import app, flags, logging

from attention_jax import evaluate

flags.DEFINE_string('workdir', None, 'A training run directory.', required=True)
flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Which split.')
flags.DEFINE_integer('beam', 5, 'Beam size (1 = greedy).', lower_bound=1)
flags.DEFINE_float('alpha', 0.6, 'Length penalty exponent ((5+|Y|)/6)^alpha.', lower_bound=0)
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_integer('heatmaps', 6, 'How many test sentences to draw.', lower_bound=0)
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  evaluate.evaluate_workdir(FLAGS.workdir, split=FLAGS.split, beam=FLAGS.beam,
                            alpha=FLAGS.alpha, step=FLAGS.step, num_heatmaps=FLAGS.heatmaps)


if __name__ == '__main__':
  app.run(main)
