"""The metrics registry (metrics.METRICS) as a specification: every metric that keeps
per-sentence statistics reports, per split and per source length, the corpus score of their
sum (what `compare` resamples), built-in or registered (tests/throwaway_metric.py);
registering is refused in one line where it would clash."""

import numpy as np
import pytest

from attention_jax import data
from attention_jax.evaluation import evaluators, scoring
from attention_jax.evaluation import metrics
from attention_jax.evaluation import records

# outputs against references, and each word's several references (G2P), gold-aligned steps
HYPS = ['a b c', 'c b a', 'x', '', 'a b c d e', 'K AE T']
REFS = ['a b c', 'c b a d', 'y', 'z', 'a b c d', 'K AE T']
REF_LISTS = [[r] for r in REFS[:5]] + [['K AH T', 'K AE T']]
ALIGN = [[2, 3], [0, 4], None, [1, 1], [4, 5], [3, 3]]
RECORDED = [n for n, m in metrics.METRICS.items() if m.record]


def corpus_figures(hyps, refs, ref_lists, align) -> dict:
  """What scoring.score_split reports for these outputs, by the same functions."""
  out = metrics.text_metrics(hyps, refs)
  out.update(metrics.g2p_metrics(hyps, ref_lists))
  steps = [a for a in align if a]
  out['alignment_accuracy'] = 100.0 * sum(a[0] for a in steps) / sum(a[1] for a in steps)
  out.update({n: metrics.METRICS[n].score(t.sum(0))
              for n, t in metrics.registered_statistics(hyps, refs, ref_lists).items()})
  return out


@pytest.mark.parametrize('name', RECORDED)
def test_a_metric_is_the_score_of_its_summed_sentence_statistics(name):
  rows = [{'id': i, 'src': str(i), 'src_len': 3, 'hyp': h, 'ref': r, 'refs': rl, 'align': a}
          for i, (h, r, rl, a) in enumerate(zip(HYPS, REFS, REF_LISTS, ALIGN))]
  _, recs = records.build('test', rows, '13a')
  want = corpus_figures(HYPS, REFS, REF_LISTS, ALIGN)[name]
  assert records.score(name, records.stats(recs, name).sum(0)) == pytest.approx(want, abs=1e-9)
  assert name in records.metrics_of(recs)
  half = records.stats(recs[:3], name).sum(0)        # any subset: a length band, a resample
  sub = corpus_figures(HYPS[:3], REFS[:3], REF_LISTS[:3], ALIGN[:3])[name]
  assert records.score(name, half) == pytest.approx(sub, abs=1e-9)


def test_every_reported_metric_is_the_score_of_its_summed_sentence_statistics(tmp_path):
  """scoring.score_split and the by_length evaluator on a split whose outputs are the
  references with a token more on every third sentence: each recorded metric of the report
  and of each length band equals the score of its records' statistics over those sentences;
  every registered metric is reported."""
  d = {'name': 'reverse', 'data_dir': str(tmp_path), 'num_train': 40, 'num_valid': 24,
       'num_test': 8, 'max_len': 12, 'test_max_len': 20, 'min_len': 1, 'batch_size': 8,
       'num_buckets': 1}
  from experiments.configs import common  # pylint: disable=g-import-not-at-top
  cfg = common.base_config().data
  cfg.update(d)
  task = data.load_task(cfg, seed=0)

  def tf_fn(params, batch):
    b, t = batch['tgt_out'].shape
    ones = {k: 1.0 for k in ('train_loss_sum', 'loss_sum', 'tokens', 'correct', 'seq_correct',
                              'sentences')}
    return ones, np.full((b, t), -1, np.int32)

  def decode_fn(params, src, max_len, factor):
    out = np.zeros((len(src), max_len), np.int32)
    for i, index in enumerate(batches.pop(0)):
      ids = task.tgt_tok.encode(task.texts('validation')[index][1])
      if index % 3 == 0:
        ids = ids + ids[:1]
      out[i, :len(ids) + 1] = ids + [data.EOS]
    return out, np.zeros((len(src), max_len, src.shape[1]), np.float32)

  batches = [list(b['index']) for b in task.eval_batches('validation', 8)]
  scored = scoring.score_split(
      None, task, 'validation', tf_fn=tf_fn, decode_fn=decode_fn, batch_size=8, factor=2.0,
      bleu_tokenize='13a')
  report, (_, recs) = scored.report, scored.records
  report['by_length'] = evaluators.by_length(scored.sentences, (0, 4, 8), '13a')
  assert report['sentences'] == len(recs) == 24 and 0 < report['exact_match'] < 100
  registered = [n for n, m in metrics.METRICS.items() if m.statistics is not None]
  reported = [n for n in RECORDED if n in report]
  assert {'bleu', 'chrf', 'exact_match', *registered} <= set(reported)
  for name in reported:
    assert records.score(name, records.stats(recs, name).sum(0)) == pytest.approx(
        report[name], abs=1e-9), name
  assert len(report['by_length']) > 1
  for band in report['by_length']:
    chosen = [r for r in recs if band['lo'] < r['src_len'] <= band['hi']]
    assert len(chosen) == band['sentences']
    for name in ('bleu', 'chrf', 'exact_match', *registered):
      assert records.score(name, records.stats(chosen, name).sum(0)) == pytest.approx(
          band[name], abs=1e-9), (name, band['bucket'])


def test_registering_a_clashing_or_incomplete_metric_is_one_line():
  stats = lambda hyps, refs, ref_lists: [[1, 1] for _ in hyps]
  with pytest.raises(ValueError, match="metric 'bleu' is already registered; registered: bleu"):
    metrics.register(metrics.Metric('bleu', 'x', record='x2', stats=('a', 'b'), statistics=stats))
  with pytest.raises(ValueError, match="metric 'ter' needs statistics"):
    metrics.register(metrics.Metric('ter', 'TER', record='ter', stats=('edits', 'words')))
  with pytest.raises(ValueError, match="metric 'ter': record key 'exact' is taken"):
    metrics.register(metrics.Metric('ter', 'TER', record='exact', stats=('e', 'w'),
                                    statistics=stats))
  assert 'ter' not in metrics.METRICS
