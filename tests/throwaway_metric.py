"""A pytest plugin that adds a text metric at test time, the way a researcher adds one: one
`metrics.register(Metric(...))` (per-sentence statistics, their corpus score), no other file.

  PYTHONPATH=tests pytest -p throwaway_metric tests/test_metrics.py

tests/test_registries.py runs the registry-driven tests with it, to show that evaluation,
the per-sentence records and their corpus scores pick a new metric up with no list edited.
"""

from attention_jax.evaluation import metrics

metrics.register(metrics.Metric(
    'longer', 'outputs longer than the reference', ' (%)', lower_is_better=True,
    record='longer', stats=('longer', 'sentences'),
    statistics=lambda hyps, refs, ref_lists: [[len(h) > len(r), 1] for h, r in zip(hyps, refs)]))
