"""The attention explorer: an offline page (index.html, its data and Plotly beside it) of one
run, or of several runs or a sweep's root compared sentence by sentence (docs/explorer.md).

  bash launch.sh explore runs/dates_additive --out=explore/dates
  bash launch.sh explore runs/length_study --split=test --out=explore/length_study
  bash launch.sh explore runs/a runs/b --methods=gradient,integrated_gradients --beam=3

Open OUT/index.html in a browser, from disk. A run without records of the split, runs of
another task or split, or an unwritable --out: one line `error: ...`, exit 2, nothing written.
"""

import os

from absl import app, flags

from attention_jax.analysis import explorer
from experiments import cli

flags.DEFINE_string('split', 'test', 'Whose per-sentence records to show.')
flags.DEFINE_string('out', None, 'The output folder (default: explore_<name of the first run>).')
flags.DEFINE_list('methods', list(explorer.DEFAULT_METHODS),
                  'Attribution methods drawn beside the attention ("" for none).')
flags.DEFINE_integer('beam', None, 'Beam size of the n-best lists (default: the run\'s '
                     'eval.beam_size).', lower_bound=1)
flags.DEFINE_integer('limit', None, 'Maps of only the first N sentences by id (default: all).',
                     lower_bound=1)
FLAGS = flags.FLAGS


def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError('give a run, several runs or a sweep root: bash launch.sh explore '
                         'RUN [RUN ...] [--split=test] [--out=DIR]')
  out = FLAGS.out or f'explore_{os.path.basename(os.path.normpath(paths[0]))}'
  explorer.explore(paths, out, split=FLAGS.split, methods=[m for m in FLAGS.methods if m],
                   beam=FLAGS.beam, limit=FLAGS.limit)


if __name__ == '__main__':
  cli.run(main)
