"""Sort a sequence of symbols (gold alignment: where each output symbol came from).

  bash launch.sh train experiments/configs/sort.py --workdir=runs/sort_additive
"""

from experiments.configs import reverse


def get_config(arg: str | None = None):
  c = reverse.get_config(arg)
  c.data.name = 'sort'
  return c
