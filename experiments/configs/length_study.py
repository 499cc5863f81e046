"""The length experiment of the attention papers (Cho et al. 2014; Bahdanau et al. 2015,
Fig. 2): without attention quality falls as sentences grow; with attention it holds. And
the Transformer beside them (Vaswani et al. 2017), whose extrapolation beyond the training
lengths depends on its positions.

  bash launch.sh length-study        # = python -m experiments.sweep --sweep=experiments/configs/length_study.py

Trains `none`, `additive`, `general` and `dot` on `reverse` (training lengths 1-50, test
lengths 1-100) with equal budgets, and `additive` with coverage (Tu et al. 2016: the
coverage term in the score and the coverage loss discourage attending a position again);
then four Transformers (3+3 layers, d_model 128, 4 heads) with the same budget: sinusoidal
or learned positions, scaled_dot or additive cross-attention; every variant under seeds 1-3
(SEEDS). Writes
runs/length_study/bleu_by_length.png and runs/length_study/summary.md (BLEU by
source-length bucket per variant: means over seeds with 95% intervals, and every variant
against the best). The RNN variants alone, two at a time:

  bash launch.sh sweep experiments/configs/length_study.py --parallel=2 \
      --only=none,additive,general,dot,additive_coverage
"""

from experiments.configs import reverse

VARIANTS = ('none', 'additive', 'general', 'dot')
TRANSFORMERS = [(positions, score) for positions in ('sinusoidal', 'learned')
                for score in ('scaled_dot', 'additive')]


SEEDS = 3   # every variant under seeds 1, 2, 3 (--seeds=N overrides)


def get_config(arg: str | None = None):
  c = reverse.get_config(arg)
  if arg != 'smoke':
    c.train.steps = 1500     # additive: 96% exact match on validation by step 500
    c.train.eval_every = 500
    c.train.checkpoint_every = 500
  return c


def get_sweep(arg: str | None = None):
  smoke = arg == 'smoke'
  small = {'model.d_model': 16, 'model.heads': 2, 'model.ff_dim': 32,
           'model.transformer_layers': 1} if smoke else {}
  return [(score, {'model.score': score}) for score in VARIANTS] + [
      ('additive_coverage', {'model.score': 'additive', 'model.coverage': True,
                             'train.coverage_weight': 1.0})] + [
      (f'transformer_{positions}_{score}',
       {'model.arch': 'transformer', 'model.positions': positions,
        'model.cross_attention_score': score, **small})
      for positions, score in TRANSFORMERS]
