"""Train and evaluate one experiment.

  python -m experiments.main --config=experiments/configs/dates.py --workdir=runs/dates_additive
  python -m experiments.main --config=experiments/configs/reverse.py:smoke \
      --config.model.score=general --config.model.decoder=luong --workdir=runs/rev

  python -m experiments.main --config=experiments/configs/reverse.py:smoke --config.seed=1 \
      --config.train.population=3 --workdir=runs/rev   # seeds 1-3 as one program: runs/rev/seed_k

Re-running the same command with the same workdir resumes from its latest checkpoint.
SIGTERM / SIGINT: the run saves a checkpoint at the current step and exits with status
143 / 130 (128 + the signal number); see attention_jax/training/preemption.py.
"""

import sys

from absl import app, flags
from ml_collections import config_flags

from attention_jax import devices
from attention_jax.training import population_run, preemption, train
from experiments import cli

config_flags.DEFINE_config_file('config', None, 'Experiment config file (path[:arg]), e.g. '
                                'experiments/configs/dates.py.', lock_config=True)
flags.DEFINE_string('workdir', None, 'Where checkpoints, logs and results go.', required=True)
flags.DEFINE_bool('overwrite', False,
                  'With --config.train.resume=False: delete a non-empty workdir first.')
flags.DEFINE_string('coordinator', None, 'Multi-host: HOST:PORT of process 0.')
flags.DEFINE_integer('num_processes', None, 'Multi-host: number of processes.')
flags.DEFINE_integer('process_id', None, 'Multi-host: this process (0 .. num_processes-1).')
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if FLAGS.config is None:
    raise app.UsageError('--config=FILE is required, e.g. --config=experiments/configs/dates.py')
  devices.init_distributed(FLAGS.coordinator, FLAGS.num_processes, FLAGS.process_id)
  try:
    if FLAGS.config.train.get('population', 1) > 1:   # seeds as one program, <workdir>/seed_k
      population_run.train_population(FLAGS.config, FLAGS.workdir, overwrite=FLAGS.overwrite)
    else:
      train.train_and_evaluate(FLAGS.config, FLAGS.workdir, overwrite=FLAGS.overwrite)
  except preemption.Interrupted as e:
    print(e, file=sys.stderr, flush=True)
    sys.exit(e.exit_status)


if __name__ == '__main__':
  cli.run(main)
