"""Copy a sequence of symbols (gold alignment: the diagonal).

  bash launch.sh train experiments/configs/copy.py --workdir=runs/copy_additive
"""

from experiments.configs import reverse


def get_config(arg: str | None = None):
  c = reverse.get_config(arg)
  c.data.name = 'copy'
  return c
