"""Evaluators are plugins (evaluation/evaluators.py): a class and one line register one, with
its own config fields; training's final evaluation and `evaluate` run it with no other file
edited, and its fields are checked before any training."""

import json
import os

import pytest

from attention_jax.analysis import saved_run
from attention_jax.evaluation import evaluators, records
from attention_jax.training import train
from experiments.configs import dates

import helpers


@pytest.fixture
def throwaway():
  """A throwaway evaluator: the share of outputs longer than eval.throwaway_len characters,
  registered for the test only."""

  @evaluators.register('throwaway')
  class Throwaway(evaluators.Evaluator):
    fields = {'throwaway_len': 3}

    def check(self, task=None):
      if not isinstance(self.opts['throwaway_len'], int) or self.opts['throwaway_len'] < 0:
        raise ValueError(f'eval.throwaway_len must be an integer >= 0, got '
                         f'{self.opts["throwaway_len"]!r}')

    def run(self, ctx):
      n = self.opts['throwaway_len']
      return {'throwaway': sum(len(s['hyp']) > n for s in ctx.sentences) / len(ctx.sentences)}

  yield Throwaway
  del evaluators.EVALUATORS['throwaway']


@pytest.mark.extended   # a training and an evaluation (6 s): after the suite, in CI
def test_a_registered_evaluator_shows_up_in_results_and_in_evaluate(throwaway, data_dir, tmp_path):
  cfg = helpers.smoke(dates, data_dir)
  with cfg.unlocked():
    cfg.eval.throwaway_len = 0   # its own field, read from the eval section
  workdir = str(tmp_path / 'run')
  summary = train.train_and_evaluate(cfg, workdir)
  with open(os.path.join(workdir, 'results.json')) as f:
    saved = json.load(f)
  for split in ('validation', 'test'):   # 'final': every split
    assert saved['results'][split]['throwaway'] == summary['results'][split]['throwaway']
    hyps = [r['hyp'] for r in records.read(os.path.join(workdir, f'sentences_{split}.jsonl'))[1]]
    assert saved['results'][split]['throwaway'] == pytest.approx(
        sum(len(h) > 0 for h in hyps) / len(hyps))
  report = saved_run.evaluate_run(workdir, split='test', beam=1, verbose=False)
  assert report['throwaway'] == pytest.approx(saved['results']['test']['throwaway'])
  with open(os.path.join(workdir, 'eval_test_beam1_a0.6.json')) as f:
    assert json.load(f)['throwaway'] == report['throwaway']


def test_an_evaluator_s_bad_field_is_refused_before_any_training(throwaway, data_dir, tmp_path):
  cfg = helpers.smoke(dates, data_dir)
  with cfg.unlocked():
    cfg.eval.throwaway_len = -1
  workdir = tmp_path / 'run'
  with pytest.raises(ValueError, match=r'^eval.throwaway_len must be an integer >= 0, got -1$'):
    train.train_and_evaluate(cfg, str(workdir))
  assert not workdir.exists()


def test_every_evaluator_runs_at_known_moments_and_says_what_it_is():
  for name, cls in evaluators.EVALUATORS.items():
    assert cls.name == name and cls.__doc__, name
    assert set(cls.when) <= set(evaluators.MOMENTS), name


@pytest.mark.parametrize('field, value, message', [
    ('word_alignment_num', -1, r"^eval.word_alignment_num must be an integer >= 0 .*got -1$"),
    ('word_alignment_steps', 0, r"^eval.word_alignment_steps must be a positive integer .*got 0$"),
    ('word_alignment_methods', 'gradients', r"gradients"),
])
def test_the_word_alignment_evaluators_fields_are_checked_in_one_line(field, value, message):
  cfg = helpers.smoke(dates, '/unused')
  with cfg.unlocked():
    cfg.eval[field] = value
  with pytest.raises(ValueError, match=message):
    evaluators.build(cfg.eval)
