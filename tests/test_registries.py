"""Adding a score is one class plus one registry line, a metric one `metrics.register`: plugins
(tests/throwaway_score.py, tests/throwaway_metric.py) register a throwaway one at test time,
and the tests driven by the registry (scores against NumPy, attention invariants; metrics as
the score of their summed statistics) collect it and pass, with no list edited."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_run(*args: str) -> subprocess.CompletedProcess:
  """python -m pytest ARGS in a fresh process, with tests/ importable (for -p PLUGIN)."""
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join([os.path.join(ROOT, 'tests'), ROOT])}
  return subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', *args],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_a_score_registered_at_test_time_is_picked_up_by_the_parametrized_tests():
  proc = pytest_run('-p', 'throwaway_score', '-q', '-k', 'negdot', 'tests/test_scores.py',
                    'tests/test_attention.py')
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  passed = int(re.search(r'(\d+) passed', proc.stdout).group(1))
  # 2 in test_scores (NumPy, jit), 4 in test_attention (weights, padding, jit)
  assert passed >= 6, proc.stdout[-2000:]
  # and without the plugin there is no such score: nothing of the kind is collected
  proc = pytest_run('-q', '--collect-only', '-k', 'negdot', 'tests/test_scores.py')
  assert 'negdot' not in proc.stdout.replace('-k negdot', '')


def test_a_metric_registered_at_test_time_is_reported_recorded_and_scored():
  """tests/throwaway_metric.py registers a metric (one `metrics.register`): the registry-driven
  metric tests collect it (its statistics' score) and find it in evaluation's report, each
  length band and the per-sentence records, with no list edited."""
  proc = pytest_run('-p', 'throwaway_metric', '-q', '-rA', 'tests/test_metrics.py')
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  assert 'PASSED tests/test_metrics.py::test_a_metric_is_the_score_of_its_summed_sentence_' \
         'statistics[longer]' in proc.stdout
  assert 'PASSED tests/test_metrics.py::test_every_reported_metric_is_the_score' in proc.stdout
  from attention_jax import metrics  # pylint: disable=g-import-not-at-top
  assert 'longer' not in metrics.METRICS        # without the plugin: no such metric
