"""Per-sentence records of an evaluation: what two runs need to be compared later, sentence
by sentence, without decoding again.

One JSON-lines file per evaluated split (`workdir.Run.sentences_path`). The
first line is a header: the split, its number of sentences and a fingerprint of its sources
and references (two runs are comparable only if their fingerprints are equal), the metric
signatures and the names of each metric's statistics. Then one line per sentence, in id
order:

  {"id": 17, "src_len": 23, "hyp": "...", "exact": 1, "bleu": [13 ints], "chrf": [18 ints],
   "wer": [wrong, 1], "per": [edits, ref_len], "align": [hits, steps]}

Every metric is a function of the sum of its per-sentence statistics over the corpus
(`score(name, summed)`): BLEU and chrF by sacrebleu's own formula (Papineni et al. 2002;
Popović 2015), exact match and WER as means, PER as edits over reference length, a
registered metric by its `from_stats` (metrics.register). So a
corpus score, a length bucket's score and every resample of a significance test come from
these numbers alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Sequence

import numpy as np
import sacrebleu

from attention_jax import workdir as workdir_lib
from attention_jax.evaluation import metrics as metrics_lib

KIND = 'attention_jax.sentences'
VERSION = 1


def keys() -> dict[str, str]:
  """metric (as named in a report) -> its key in a record, from metrics.METRICS (read at each
  call: a metric registered later is included)."""
  return {n: m.record for n, m in metrics_lib.METRICS.items() if m.record}


def stat_names() -> dict[str, tuple[str, ...]]:
  """metric -> the names of its per-sentence statistics (BLEU / chrF: sacrebleu's)."""
  return {n: m.stats for n, m in metrics_lib.METRICS.items() if m.stats}


def primary_metrics(report) -> tuple[str, str]:
  """The metric that selects checkpoints and leads comparisons, and the one shown beside it:
  WER and PER where a task has several references per source (G2P), else BLEU and exact
  match. The one place that rule is written."""
  return ('wer', 'per') if 'wer' in report else ('bleu', 'exact_match')


@functools.cache
def bleu_metric(tokenize: str) -> sacrebleu.BLEU:
  return sacrebleu.BLEU(tokenize=tokenize)


@functools.cache
def chrf_metric() -> sacrebleu.CHRF:
  return sacrebleu.CHRF()   # = sacrebleu.corpus_chrf's defaults


def fingerprint(items: Sequence[tuple]) -> str:
  """SHA-256 (hex, 16 chars) of the split's (id, source, references) in id order."""
  h = hashlib.sha256()
  for item in sorted(items, key=lambda x: x[0]):
    h.update(json.dumps(item, ensure_ascii=False).encode())
  return h.hexdigest()[:16]


def build(split: str, rows: Sequence[dict], bleu_tokenize: str) -> tuple[dict, list[dict]]:
  """rows: {'id', 'src', 'src_len', 'hyp', 'ref', 'refs' (list or None), 'align' ([hits,
  steps] or None), optionally 'registered' ({metric: its statistics} of the registered
  metrics, else computed here)} per sentence -> (header, records sorted by id)."""
  rows = sorted(rows, key=lambda r: r['id'])
  hyps, refs = [r['hyp'] for r in rows], [r['ref'] for r in rows]
  bleu, chrf = bleu_metric(bleu_tokenize), chrf_metric()
  bleu_stats = bleu._extract_corpus_statistics(hyps, [refs]) if rows else []
  chrf_stats = chrf._extract_corpus_statistics(hyps, [refs]) if rows else []
  records = []
  for r, b, c in zip(rows, bleu_stats, chrf_stats):
    rec = {'id': int(r['id']), 'src_len': int(r['src_len']), 'hyp': r['hyp'],
           'exact': int(r['hyp'] == r['ref']), 'bleu': [int(x) for x in b],
           'chrf': [int(x) for x in c]}
    if r.get('refs') is not None:
      wrong, edits, length = metrics_lib.g2p_sums(r['hyp'], r['refs'])
      rec['wer'], rec['per'] = [wrong, 1], [edits, length]
    if r.get('align') is not None and r['align'][1]:
      rec['align'] = [int(x) for x in r['align']]
    records.append(rec)
  if rows and all('registered' in r for r in rows):   # computed by the evaluation already
    tables = {n: [r['registered'][n] for r in rows] for n in rows[0]['registered']}
  else:
    ref_lists = [r['refs'] for r in rows] if rows and all(
        r.get('refs') is not None for r in rows) else None
    tables = metrics_lib.registered_statistics(hyps, refs, ref_lists)
  for name, table in tables.items():
    key = metrics_lib.METRICS[name].record
    for rec, row in zip(records, table):
      rec[key] = [int(x) if float(x).is_integer() else float(x) for x in row]
  header = {'kind': KIND, 'version': VERSION, 'split': split, 'sentences': len(records),
            'fingerprint': fingerprint([(r['id'], r['src'], r['ref'], r.get('refs'))
                                        for r in rows]),
            'bleu_signature': str(bleu.get_signature()),
            'chrf_signature': str(chrf.get_signature()), 'bleu_tokenize': bleu_tokenize,
            'stats': {'bleu': "sacrebleu BLEU's sentence statistics",
                      'chrf': "sacrebleu chrF's sentence statistics", **stat_names()}}
  return header, records


def write(file: str, header: dict, records: Sequence[dict]) -> str:
  lines = [json.dumps(header)] + [json.dumps(r, ensure_ascii=False) for r in records]
  workdir_lib.write_atomic(file, '\n'.join(lines) + '\n')
  return file


def read(file: str) -> tuple[dict, list[dict]]:
  """-> (header, records); a file that is not a records file fails naming it."""
  try:
    with open(file, encoding='utf-8') as f:
      header = json.loads(f.readline())
      records = [json.loads(line) for line in f if line.strip()]
  except (OSError, ValueError) as e:
    raise ValueError(f'cannot read per-sentence records {file}: {e}') from None
  if header.get('kind') != KIND or len(records) != header.get('sentences'):
    raise ValueError(f'{file} is not a complete per-sentence records file (header {header}, '
                     f'{len(records)} records)')
  return header, records


def metrics_of(records: Sequence[dict]) -> list[str]:
  """The metrics these records support, in report order."""
  return [m for m, k in keys().items() if any(k in r for r in records)]


def stats(records: Sequence[dict], metric: str) -> np.ndarray:
  """[sentences, k] float64 statistics of one metric (a name of keys())."""
  if metric not in keys():
    raise ValueError(f'unknown metric {metric!r}; valid: {", ".join(keys())}')
  if metric == 'exact_match':
    return np.array([[r['exact'], 1] for r in records], np.float64)
  if metric == 'alignment_accuracy':   # sentences without a gold alignment count nothing
    return np.array([r.get('align', [0, 0]) for r in records], np.float64)
  key = keys()[metric]
  if any(key not in r for r in records):
    raise ValueError(f'these records have no {metric!r} statistics')
  return np.array([r[key] for r in records], np.float64).reshape(len(records), -1)


def score(metric: str, summed: np.ndarray, bleu_tokenize: str = '13a') -> float:
  """The corpus score (a percentage) from statistics summed over sentences."""
  if metric == 'bleu':
    return bleu_metric(bleu_tokenize)._compute_score_from_stats(list(summed)).score
  if metric == 'chrf':
    return chrf_metric()._compute_score_from_stats(list(summed)).score
  return metrics_lib.METRICS[metric].score(summed)   # exact match, WER, PER, alignment, ...
