"""The report of a sweep directory, on demand (see attention_jax/analysis/report.py).

  python -m experiments.sweep_report runs/score_sweep
  python -m experiments.sweep_report runs/score_sweep --baseline=additive_bahdanau --metric=bleu,chrf
"""

from absl import app, flags

from attention_jax.analysis import report
from experiments import cli

flags.DEFINE_enum('split', 'test', ['validation', 'test', 'test_heldout_fonts'],
                  'Which split to report (test_heldout_fonts: image_dates).')
flags.DEFINE_string('baseline', None, 'The variant every other is compared with (default: '
                    'the best on the first metric).')
flags.DEFINE_list('metric', [], 'Metrics, the first one leading (default: bleu,exact_match; '
                  'wer,per for G2P).')
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) != 2:
    raise app.UsageError('usage: python -m experiments.sweep_report runs/<sweep>')
  report.write(argv[1], FLAGS.split, baseline=FLAGS.baseline, metrics=tuple(FLAGS.metric))


if __name__ == '__main__':
  cli.run(main)
