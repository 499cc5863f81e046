"""Run every variant of a sweep file, then write its report.

  python -m experiments.sweep --sweep=experiments/configs/score_sweep.py:smoke
  bash launch.sh sweep experiments/configs/length_study.py
  bash launch.sh sweep experiments/configs/length_study.py --only='transformer_*'
  bash launch.sh sweep experiments/configs/score_sweep.py --seeds=3    # 3 seeds per variant
  bash launch.sh sweep experiments/configs/score_sweep.py --seeds=3 --population  # as one program
  bash launch.sh sweep experiments/configs/score_sweep.py --executor=ray --ray_address=auto

Re-running skips finished variants and resumes interrupted ones; a finished variant whose
config changed since is named and left out of the report (--rerun_changed runs it again).
See attention_jax/sweeps/sweep_file.py.
"""

import functools
import os
import sys

from absl import app, flags

from attention_jax.analysis import report
from attention_jax.sweeps import local_executor, ray_executor, sweep_file
from experiments import cli

flags.DEFINE_string('sweep', None, 'Sweep file (path[:arg]).', required=True)
flags.DEFINE_string('root', 'runs', 'Variants go to <root>/<sweep>/<variant>.')
flags.DEFINE_list('only', [], 'Run only the variants matching these shell patterns '
                  '(comma-separated, e.g. transformer_*); the report covers every finished one.')
flags.DEFINE_integer('parallel', 1, 'Variants at once on a CPU-only machine (with GPUs: one '
                     'per device, or --runs_per_device).', lower_bound=1)
flags.DEFINE_integer('runs_per_device', 1, 'Runs at once on each GPU (local executor): small '
                     'models use a sliver of one; each run then preallocates 0.9 / K of its '
                     'memory (XLA_PYTHON_CLIENT_MEM_FRACTION), and one that needs more fails '
                     'in one line. (Ray: a fractional --trial_gpus.)', lower_bound=1)
flags.DEFINE_integer('seeds', None, 'Run every variant under seeds 1..N (config.seed), each '
                     'into <variant>/seed_<k>; default: the sweep file\'s SEEDS, else one run '
                     'at the config\'s seed.', lower_bound=1)
flags.DEFINE_bool('population', False, 'Train each variant\'s seeds as one process, a '
                  'population (--config.train.population: one vmapped program; '
                  'attention_jax/training/population_run.py), into the same '
                  '<variant>/seed_<k> runs, with the same report. Needs --seeds (or the sweep '
                  'file\'s SEEDS); with --executor=ray each population is one Ray task.')
flags.DEFINE_enum('executor', 'local', ('local', 'ray'), 'local: subprocesses of this '
                  'machine; ray: one Ray task per run on a Ray cluster '
                  '(attention_jax/sweeps/ray_executor.py).')
flags.DEFINE_string('ray_address', None, 'Ray cluster to join (auto, HOST:PORT); default: '
                    'start a local one for the sweep.')
flags.DEFINE_float('trial_cpus', None, 'CPUs one run asks the Ray cluster for (default 1).')
flags.DEFINE_float('trial_gpus', None, 'GPUs one run asks for (default 0).')
flags.DEFINE_float('trial_tpus', None, 'TPU chips one run asks for (default 0).')
flags.DEFINE_integer('max_retries', None, 'Times a killed run is started again, resuming '
                     'from its checkpoint (default 3); failing runs are never retried.')
flags.DEFINE_integer('ray_cpus', None, 'CPUs of the local Ray cluster (default: all).')
flags.DEFINE_bool('rerun_changed', False, 'A finished run whose saved config differs from its '
                  "variant's now (the sweep file or the flags changed) is set aside under "
                  '<sweep dir>/.replaced/<time>/ (never deleted) and run again; without this '
                  'flag it is named, not skipped and not reported, and the sweep exits 1.')
FLAGS = flags.FLAGS
RAY_FLAGS = {'ray_address': 'address', 'trial_cpus': 'trial_cpus', 'trial_gpus': 'trial_gpus',
             'trial_tpus': 'trial_tpus', 'max_retries': 'max_retries', 'ray_cpus': 'num_cpus'}


def main(argv):
  options = {arg: FLAGS[f].value for f, arg in RAY_FLAGS.items() if FLAGS[f].value is not None}
  if FLAGS.executor == 'ray' and FLAGS.runs_per_device > 1:
    raise app.UsageError('--runs_per_device is the local executor\'s; with --executor=ray ask '
                         'for a share of a GPU per run: --trial_gpus=0.25 (4 per GPU)')
  if FLAGS.executor == 'local' and options:
    raise app.UsageError(f'{", ".join("--" + f for f in RAY_FLAGS if FLAGS[f].value is not None)}'
                         ' only apply to --executor=ray')
  execute = (functools.partial(ray_executor.run, quiet=not FLAGS['verbosity'].present,
                                 **options) if FLAGS.executor == 'ray'
             else local_executor.local(FLAGS.parallel, FLAGS.runs_per_device))
  try:
    sweep_dir, status = sweep_file.run(FLAGS.sweep, execute, FLAGS.root, extra_flags=argv[1:],
                                  only=FLAGS.only, seeds=FLAGS.seeds,
                                  rerun_changed=FLAGS.rerun_changed,
                                  population=FLAGS.population)
  except KeyboardInterrupt:
    print('error: sweep stopped by Ctrl-C; run the same command again to resume it',
          file=sys.stderr, flush=True)
    raise SystemExit(130) from None
  changed = tuple(os.path.join(sweep_dir, label) for label, s in status.items()
                  if s == 'changed')
  report.write(sweep_dir, baseline=sweep_file.baseline(FLAGS.sweep), exclude=changed)
  if any(s in ('failed', 'changed') for s in status.values()):
    raise SystemExit(1)


if __name__ == '__main__':
  cli.run(main)
