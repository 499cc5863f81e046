"""Every attention mode (and the sparsemax normaliser, coverage, encoder self-attention) on
`dates`, with the additive score and the Bahdanau decoder, at the full `dates` budget.

  bash launch.sh sweep experiments/configs/mode_sweep.py          # 12 variants, 2000 steps each
  bash launch.sh sweep experiments/configs/mode_sweep.py:smoke    # seconds per variant

Variants go to runs/mode_sweep[_smoke]/<variant>; the report (summary.md/.csv, bars.png,
bleu_by_length.png) is written at the end. Another score or decoder for all variants:
--config.model.score=general etc. after the sweep file (see launch.sh sweep).
"""

from attention_jax.models.attention import MODES, NORMALISERS
from experiments.configs import dates

# hard attention's variance reducers (training/objective.py), each on its own
HARD_ESTIMATORS = [
    ('hard_xu', {'train.hard_expected_p': 0.5}),   # Xu et al. 2015 §4.1: half on the soft context
    ('hard_loo4', {'train.reinforce_samples': 4}),   # Kool et al. 2019: 4 samples, leave-one-out
    ('hard_to_go', {'train.reward': 'to_go'}),       # each step's reward: the tokens it affects
    ('hard_curriculum', {'train.hard_expected_p': 0.5,   # all soft first, Xu's 0.5 from step 500
                         'train.hard_soft_steps': 500}),
]

# every registered mode and normaliser (a new one joins the sweep with no edit here), hard
# attention with each variance reducer, then coverage and encoder self-attention
VARIANTS = (
    [(mode, {} if mode == 'global' else {'model.attention_mode': mode}) for mode in MODES]
    + [(name, {'model.attention_mode': 'hard', **o}) for name, o in HARD_ESTIMATORS]
    + [(name, {'model.normaliser': name}) for name in NORMALISERS if name != 'softmax']
    + [('coverage', {'model.coverage': True, 'train.coverage_weight': 1.0}),
       ('self_attention', {'model.self_attention_layers': 1})])


def get_config(arg: str | None = None):
  return dates.get_config(arg)


def get_sweep(arg: str | None = None):
  return list(VARIANTS)
