"""Every score function x both decoders on `dates`.

  bash launch.sh sweep experiments/configs/score_sweep.py --parallel=2   # 18 variants x 3 seeds
  bash launch.sh sweep experiments/configs/score_sweep.py:smoke --seeds=1  # seconds per variant

Runs go to runs/score_sweep[_smoke]/<score>_<decoder>/seed_<k> (600 steps each); the report
(summary.md/.csv, comparisons.csv, bars.png, bleu_by_length.png: means over seeds with 95%
intervals, every variant against the best) is written at the end.
"""

from attention_jax.models import scores
from experiments.configs import dates


SEEDS = 3   # every variant under seeds 1, 2, 3 (--seeds=N overrides)


def get_config(arg: str | None = None):
  c = dates.get_config(arg)
  if arg != 'smoke':
    c.train.steps = 600       # dates: 99.7% validation exact match by step 400 (additive)
    c.train.eval_every = 300
    c.train.checkpoint_every = 300
  return c


def get_sweep(arg: str | None = None):
  return [(f'{score}_{decoder}', {'model.score': score, 'model.decoder': decoder})
          for score in sorted(scores.SCORES) for decoder in ('bahdanau', 'luong')]
