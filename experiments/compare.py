"""Compare any finished runs, or groups of runs (a sweep variant's seeds), evaluated on the
same split: means and 95% intervals over seeds, differences against a baseline with p-values
over seeds and over sentences (Holm-adjusted), one plain sentence per comparison.

  bash launch.sh compare runs/length_study/additive runs/length_study/dot
  bash launch.sh compare runs/a runs/b runs/c --split=validation --metric=chrf,exact_match
  bash launch.sh compare runs/cmudict_attention/* --baseline=global_additive --out=cmp.md

A finished run's directory is one run; a directory whose subdirectories are finished runs
is a group (its runs are seeds). Runs evaluated on different sentences are refused, naming
the difference. The per-sentence records of each split (written by training) are
what the sentence-level test resamples; runs without them get the seed-level statistics only.
"""

from absl import app, flags

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import compare as compare_lib
from attention_jax.analysis import report
from attention_jax.evaluation import records as records_lib
from experiments import cli

flags.DEFINE_enum('split', 'test', ['validation', 'test', 'test_heldout_fonts'],
                  'Which split to compare (test_heldout_fonts: image_dates).')
flags.DEFINE_list('metric', [], 'Metrics, the first one leading (default: bleu,exact_match; '
                  f'wer,per for G2P). Valid: {", ".join(records_lib.keys())}.')
flags.DEFINE_string('baseline', None, 'The run or group every other is compared with '
                    '(default: the best on the first metric).')
flags.DEFINE_integer('trials', 10_000, 'Approximate-randomisation trials.', lower_bound=100)
flags.DEFINE_string('out', None, 'Also write the markdown report to this file.')
FLAGS = flags.FLAGS


def main(argv):
  paths = argv[1:]
  if len(paths) < 2 and not (len(paths) == 1 and not compare_lib.is_run(paths[0])):
    raise app.UsageError('give at least two runs or groups (or one group of several runs): '
                         'bash launch.sh compare RUN_OR_GROUP ...')
  if FLAGS.out:   # before any work: not after printing the whole report
    cli.check_output(FLAGS.out)
  groups = compare_lib.resolve(paths, FLAGS.split)
  if len(groups) == 1:   # one group: compare its runs with each other
    groups = compare_lib.resolve([r.workdir for r in groups[0].runs], FLAGS.split)
  c = compare_lib.compare(groups, FLAGS.split, FLAGS.metric, baseline=FLAGS.baseline,
                          trials=FLAGS.trials)
  text = report.markdown(c)
  print(text)
  if FLAGS.out:
    workdir_lib.write_atomic(FLAGS.out, text)
    print(f'wrote {FLAGS.out}')


if __name__ == '__main__':
  cli.run(main)
