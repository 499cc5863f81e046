"""Every score function x both decoders on `dates`.

  bash launch.sh sweep experiments/configs/score_sweep.py          # 18 variants, 600 steps each
  bash launch.sh sweep experiments/configs/score_sweep.py:smoke    # seconds per variant

Variants go to runs/score_sweep[_smoke]/<score>_<decoder>; the report (summary.md/.csv,
bars.png, bleu_by_length.png) is written at the end. Add seeds with --config.seed via a
copy of this file, or list them in get_sweep (variants named <name>_s<seed> are grouped).
"""

from attention_jax import scores
from experiments.configs import dates


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
