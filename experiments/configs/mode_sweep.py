"""Every attention mode (and the sparsemax normaliser, coverage, encoder self-attention) on
`dates`, with the additive score and the Bahdanau decoder, at the full `dates` budget.

  bash launch.sh sweep experiments/configs/mode_sweep.py          # 8 variants, 2000 steps each
  bash launch.sh sweep experiments/configs/mode_sweep.py:smoke    # seconds per variant

Variants go to runs/mode_sweep[_smoke]/<variant>; the report (summary.md/.csv, bars.png,
bleu_by_length.png) is written at the end. Another score or decoder for all variants:
--config.model.score=general etc. after the sweep file (see launch.sh sweep).
"""

from attention_jax.models.attention import MODES, NORMALISERS
from experiments.configs import dates

# every registered mode and normaliser (a new one joins the sweep with no edit here), then
# coverage and encoder self-attention
VARIANTS = (
    [(mode, {} if mode == 'global' else {'model.attention_mode': mode}) for mode in MODES]
    + [(name, {'model.normaliser': name}) for name in NORMALISERS if name != 'softmax']
    + [('coverage', {'model.coverage': True, 'train.coverage_weight': 1.0}),
       ('self_attention', {'model.self_attention_layers': 1})])


def get_config(arg: str | None = None):
  return dates.get_config(arg)


def get_sweep(arg: str | None = None):
  return list(VARIANTS)
