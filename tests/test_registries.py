"""Adding a score is one class plus one registry line, a metric one `metrics.register`, a task
one `data.register_task`: plugins (tests/throwaway_score.py, throwaway_metric.py,
throwaway_task.py) register a throwaway one at test time, and the tests driven by the
registries (scores against NumPy, attention invariants; metrics as the score of their summed
statistics; tasks' splits and batches) collect them and pass, with no list edited."""

import os
import re
import subprocess
import sys

import pytest

import attention_jax as aj
from attention_jax import data
from attention_jax.evaluation import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = {'throwaway_score': 'negdot', 'throwaway_metric': 'longer', 'throwaway_task': 'swapcase'}


@pytest.mark.extended   # a pytest of its own over 4 modules (8 s): after the suite, in CI
def test_a_score_a_metric_and_a_task_registered_at_test_time_are_picked_up():
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join([os.path.join(ROOT, 'tests'), ROOT])}
  plugins = [arg for name in PLUGINS for arg in ('-p', name)]
  proc = subprocess.run(   # one interpreter for the three (each start imports jax and flax)
      [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', *plugins, '-q', '-rA', '-k',
       ' or '.join([*PLUGINS.values(), 'every_reported', 'registry_line']),
       'tests/test_scores.py', 'tests/test_attention.py', 'tests/test_metrics.py',
       'tests/test_data_sources.py'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  passed = set(re.findall(r'^PASSED (\S+)', proc.stdout, re.M))
  # the score: 2 tests in test_scores (NumPy, jit), 4 in test_attention (weights, padding, jit)
  assert len([t for t in passed if 'negdot' in t]) >= 6, proc.stdout[-2000:]
  # the metric: its statistics' corpus score, and in evaluation's report, bands and records
  assert {'tests/test_metrics.py::test_a_metric_is_the_score_of_its_summed_sentence_statistics'
          '[longer]', 'tests/test_metrics.py::test_every_reported_metric_is_the_score_of_its_'
          'summed_sentence_statistics'} <= passed
  # the task: loaded from the test config, split and batched
  assert ('tests/test_data_sources.py::test_every_registered_task_gives_three_splits_that_'
          'batch[swapcase]') in passed
  # and without the plugins (this process) none of them exists
  assert 'negdot' not in aj.SCORES and 'longer' not in metrics.METRICS
  assert 'swapcase' not in data.TASKS
