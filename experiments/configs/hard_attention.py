"""Soft against hard attention on images (Xu et al. 2015, "Show, Attend and Tell"), and what
each of hard attention's training techniques gains (training/objective.py).

  bash launch.sh sweep experiments/configs/hard_attention.py:digits --seeds=2 --parallel=2
  bash launch.sh sweep experiments/configs/hard_attention.py:dates --seeds=2 --parallel=2
  bash launch.sh sweep experiments/configs/hard_attention.py:dates --seeds=2 --only=soft,hard_soft_start

`:digits` is experiments/configs/digit_strips.py as it is (5,000 steps of 64). `:dates` is
image_dates at version 1.0.0's budget: its six DejaVu faces drawn plainly, 60,000 training
images, a CNN of 12-24-48 channels, no coverage, 5,000 steps of 64 (image_fonts.py's
`dejavu_plain`). Variants (runs/hard_attention_<task>/<variant>/seed_<k>):

  soft             the config: soft attention
  hard             one position sampled per output, REINFORCE with a moving-average baseline
                   and an entropy bonus
  hard_xu          half of the examples on the expected (soft) context (Xu et al. §4.1)
  hard_soft_start  every example on the soft context for the first 1,500 steps, then Xu's half
  hard_soft_start_to_go  the same, each step's sample rewarded by the log-likelihood of the
                   tokens left (`train.reward=to_go`) instead of the sentence's
  hard_soft_1000_to_go   the same with the soft context for the first 1,000 steps

The hard modes decode with the argmax position (one cell of the grid per output). What each
measured: docs/images.md.
"""

from experiments.configs import digit_strips, image_fonts

HARD = {'model.attention_mode': 'hard'}
XU = {**HARD, 'train.hard_expected_p': 0.5}
VARIANTS = [('soft', {}),
            ('hard', dict(HARD)),
            ('hard_xu', dict(XU)),
            ('hard_soft_start', {**XU, 'train.hard_soft_steps': 1500}),
            ('hard_soft_start_to_go', {**XU, 'train.hard_soft_steps': 1500,
                                       'train.reward': 'to_go'}),
            ('hard_soft_1000_to_go', {**XU, 'train.hard_soft_steps': 1000,
                                      'train.reward': 'to_go'})]
TASKS = ('digits', 'dates')
BASELINE = 'soft'   # the sweep report compares every variant with it


def get_config(arg: str | None = None):
  """'digits' (the default) or 'dates', optionally with 'smoke' (e.g. 'dates,smoke')."""
  words = [w for w in (arg or '').split(',') if w]
  task = next((w for w in words if w in TASKS), 'digits')
  rest = ','.join(w for w in words if w != task) or None
  if task == 'digits':
    return digit_strips.get_config(rest)
  c = image_fonts.get_config(rest)
  c.update_from_flattened_dict(dict(image_fonts.VARIANTS)['dejavu_plain'])
  return c


def get_sweep(arg: str | None = None):
  del arg
  return list(VARIANTS)
