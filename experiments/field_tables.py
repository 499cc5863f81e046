"""docs/fields.md: the `model`, `data` and `train` config fields, generated from the parts that
own them (each architecture's, encoder's, decoder's and task's Fields, the trainer's, the
optimiser's and the loss's: attention_jax/fields.py).

  python -m experiments.field_tables --out=docs/fields.md

The tables are experiments/configs/common.field_tables(): the owners registered in the
process, so a part of a researcher's own module (imported first, e.g. by its config file) is
listed with its fields.
"""

import sys

from absl import flags

from experiments import cli
from experiments.configs import common

_OUT = flags.DEFINE_string('out', '', 'write the tables to this file (default: standard output)')


def main(argv) -> None:
  if len(argv) > 1:
    raise ValueError(f'unexpected arguments {argv[1:]}; the only flag is --out=FILE')
  text = common.field_tables()
  if _OUT.value:
    with open(_OUT.value, 'w') as f:
      f.write(text)
  else:
    sys.stdout.write(text)


if __name__ == '__main__':
  cli.run(main)
