"""Run every variant of a sweep file, then write its report.

  python -m experiments.sweep --sweep=experiments/configs/score_sweep.py:smoke
  bash launch.sh sweep experiments/configs/length_study.py
  bash launch.sh sweep experiments/configs/length_study.py --only='transformer_*'
  bash launch.sh sweep experiments/configs/score_sweep.py --seeds=3    # 3 seeds per variant

Re-running skips finished variants and resumes interrupted ones. See attention_jax/sweep.py.
"""

from absl import flags

from attention_jax import report, sweep
from experiments import cli

flags.DEFINE_string('sweep', None, 'Sweep file (path[:arg]).', required=True)
flags.DEFINE_string('root', 'runs', 'Variants go to <root>/<sweep>/<variant>.')
flags.DEFINE_list('only', [], 'Run only the variants matching these shell patterns '
                  '(comma-separated, e.g. transformer_*); the report covers every finished one.')
flags.DEFINE_integer('parallel', 1, 'Variants at once on a CPU-only machine (with GPUs: one '
                     'per device).', lower_bound=1)
flags.DEFINE_integer('seeds', None, 'Run every variant under seeds 1..N (config.seed), each '
                     'into <variant>/seed_<k>; default: the sweep file\'s SEEDS, else one run '
                     'at the config\'s seed.', lower_bound=1)
FLAGS = flags.FLAGS


def main(argv):
  sweep_dir, status = sweep.run(FLAGS.sweep, FLAGS.root, FLAGS.parallel, extra_flags=argv[1:],
                                only=FLAGS.only, seeds=FLAGS.seeds)
  report.write(sweep_dir, baseline=sweep.baseline(FLAGS.sweep))
  if any(s == 'failed' for s in status.values()):
    raise SystemExit(1)


if __name__ == '__main__':
  cli.run(main)
