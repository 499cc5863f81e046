"""The attention explorer's data (explorer.py writes the page): the runs a user names, checked
before any work, and what the page shows of each, as plain dicts and lists.

  runs = resolve(['runs/dates_additive'], split='test')      # ValueError / OSError: why not
  t = aj.load(runs[0].workdir)
  task = load_task(runs[0].config, (t.src_tok, t.tgt_tok))
  ids = [r['id'] for r in runs[0].records]
  words = explorer_words.word_alignments(t, task, 'test', ids, keep=ids)   # word-level gold
  summary = run_summary(runs[0], 'test', task, words)        # results, curves, sentence rows
  details = sentence_details(t, summary, task, ('gradient',), beam=5, words=words)
  cmp = comparison(runs, 'test')                             # several runs: who got what right

Maps are stored compactly: every weight or score as an int in thousandths (rounded, so within
5e-4 of the value), attribution maps normalised per output token by their largest |score|.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from typing import Sequence

import ml_collections
import numpy as np

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.analysis import compare as compare_lib
from attention_jax.data import batching
from attention_jax.decoding import inference
from attention_jax.evaluation import records as records_lib
from attention_jax.implicit import attribution
from attention_jax.models import encoders
from attention_jax.models import images as images_lib
from attention_jax.models import sources as sources_lib
from attention_jax.symbols import BOS

SCALE = 1000   # maps are stored as ints in 1/SCALE


@dataclasses.dataclass
class RunInfo:
  """A finished run with its records of the split, as the explorer reads it."""
  name: str          # unique among the page's runs (a sweep's 'variant/seed_k')
  workdir: str
  config: dict       # workdir.Run.config()
  header: dict       # the records' header (split, fingerprint, ...)
  records: list      # the per-sentence records

  @property
  def task(self) -> str:
    return self.config.get('data', {}).get('name', '?')


def _finished_under(path: str, depth: int = 2) -> list[str]:
  """Finished runs at `path` or in its subdirectories (a group of seeds; a sweep's root of
  variants x seeds), in natural order."""
  if compare_lib.is_run(path):
    return [path]
  if depth == 0 or not os.path.isdir(path):
    return []
  subs = sorted((os.path.join(path, d) for d in os.listdir(path)), key=compare_lib._natural)
  return [r for s in subs if os.path.isdir(s) for r in _finished_under(s, depth - 1)]


def resolve(paths: Sequence[str], split: str = 'test') -> list[RunInfo]:
  """Run, group or sweep-root directories -> the finished runs, each with its records of
  `split`. Refuses (ValueError / FileNotFoundError naming it): a missing path, one with no
  finished run, a run without records of the split, and runs of other tasks or splits
  (different sentences: their records' fingerprints differ)."""
  if not paths:
    raise ValueError('give at least one run, group or sweep directory')
  found: list[tuple[str, str]] = []
  for p in paths:
    p = os.path.normpath(p)
    if not os.path.isdir(p):
      raise FileNotFoundError(2, 'no such run or sweep directory', p)
    runs = _finished_under(p)
    if not runs:
      raise ValueError(f'{p} is neither a finished run (no {workdir_lib.RESULTS}) nor a '
                       'directory of finished runs')
    base = os.path.basename(p)
    found += [(r, base if r == p else os.path.join(base, os.path.relpath(r, p))) for r in runs]
  names = [n for _, n in found]
  if len(set(names)) < len(names):
    raise ValueError(f'the same run was given twice, or two runs share a name: {", ".join(paths)}')
  out = []
  for workdir, name in found:
    run = workdir_lib.Run(workdir)
    file = run.sentences_path(split)
    if not os.path.exists(file):
      raise ValueError(f'{workdir} has no per-sentence records of the {split} split '
                       f'({os.path.basename(file)}); evaluate it first: bash launch.sh '
                       f'evaluate --workdir={workdir}')
    header, records = records_lib.read(file)
    out.append(RunInfo(name, workdir, run.config(), header, records))
  first = out[0]
  for r in out[1:]:
    if r.task != first.task:
      raise ValueError(f'{first.workdir} is a {first.task!r} run but {r.workdir} a {r.task!r} '
                       'run: one page shows runs of one task')
    if r.header['fingerprint'] != first.header['fingerprint']:
      raise ValueError(f'{first.workdir} and {r.workdir} were evaluated on different {split} '
                       f'sentences ({first.header["sentences"]} vs {r.header["sentences"]}; '
                       f'fingerprints {first.header["fingerprint"]} vs '
                       f'{r.header["fingerprint"]}): they cannot be compared sentence by sentence')
  return out


# ---- one run ---------------------------------------------------------------------------

def read_scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
  """A TensorBoard folder's scalars ({tag: [(step, value)]}, steps ascending), read from its
  event files (TFRecords of Event protos) with tensorboardX's protos: no TensorFlow."""
  from tensorboardX.proto import event_pb2   # pylint: disable=g-import-not-at-top
  out: dict[str, dict[int, float]] = {}
  if not os.path.isdir(directory):
    return {}
  for name in sorted(os.listdir(directory)):
    if 'tfevents' not in name:
      continue
    with open(os.path.join(directory, name), 'rb') as f:
      blob = f.read()
    pos = 0
    while pos + 12 <= len(blob):
      (n,) = struct.unpack('<Q', blob[pos:pos + 8])
      record = blob[pos + 12:pos + 12 + n]
      pos += 12 + n + 4
      if len(record) < n:   # a file cut short (a run still writing): what is whole
        break
      event = event_pb2.Event()
      try:
        event.ParseFromString(record)
      except Exception:  # pylint: disable=broad-except  (a torn record: skip it)
        continue
      for v in event.summary.value:
        if v.HasField('simple_value'):
          out.setdefault(v.tag, {})[int(event.step)] = float(v.simple_value)
  return {tag: sorted(points.items()) for tag, points in out.items()}


def load_task(config: dict, tokenizers: tuple):
  """A run's data set as a Task, with the run's own tokenizers (src_tok, tgt_tok)."""
  cfg = ml_collections.ConfigDict(config)
  return data_lib.load_task(cfg.data, seed=cfg.seed, tokenizers=tokenizers)


def run_summary(run: RunInfo, split: str, task, words: dict | None = None) -> dict:
  """What the run's page shows besides the maps: its results, by-length rows, curves from its
  TensorBoard log, and one row per sentence (id, source, reference, output, exact, sentence
  BLEU / chrF, source length; with `words`, explorer_words.word_alignments: its AER, None
  without gold). `task`: the run's Task (load_task)."""
  workdir = workdir_lib.Run(run.workdir)
  results = workdir.results()
  texts = task.texts(split)
  tokenize = run.header.get('bleu_tokenize', '13a')
  rows = []
  for r in run.records:
    src, ref = texts[r['id']]
    bleu = records_lib.score('bleu', np.asarray(r['bleu'], np.float64), tokenize)
    chrf = records_lib.score('chrf', np.asarray(r['chrf'], np.float64))
    rows.append({'id': r['id'], 'src': src, 'ref': ref, 'hyp': r['hyp'],
                 'exact': int(r['exact']), 'bleu': round(bleu, 1), 'chrf': round(chrf, 1),
                 'len': int(r['src_len'])})
    if words is not None:
      rows[-1]['aer'] = words['sentences'].get(r['id'], {}).get('aer')
  split_results = results['results'].get(split, {})
  table = [{'split': s, **{k: v for k, v in m.items() if isinstance(v, (int, float))}}
           for s, m in results['results'].items()]
  model = results.get('model_config') or workdir.model_config()
  return {'name': run.name, 'workdir': os.path.abspath(run.workdir), 'split': split,
          'task': run.task, 'source': task.source, 'arch': model.get('arch', 'rnn'),
          'variant': model.get('variant', ''), 'step': results.get('best_step'),
          'results': table, 'by_length': split_results.get('by_length', []),
          'curves': read_scalars(workdir.tensorboard_dir), 'sentences': rows,
          'word_map': None if words is None else words['map']}


def _ints(a: np.ndarray) -> list:
  """An array as nested lists of ints in 1/SCALE."""
  return np.rint(np.asarray(a, np.float64) * SCALE).astype(np.int64).tolist()


def _normalised(scores: np.ndarray) -> np.ndarray:
  """[T, ...] attribution scores, each output token's divided by its largest |score|."""
  flat = np.abs(scores.reshape(len(scores), -1)).max(axis=1) if scores.size else np.zeros(0)
  flat = np.where(flat > 0, flat, 1.0)
  return scores / flat.reshape((-1,) + (1,) * (scores.ndim - 1))


def _cells(translator, image: np.ndarray, grid: tuple[int, int]) -> tuple[int, int]:
  """(height, width) in pixels of one cell of an image's attention grid [H', W']: the image
  padded to the encoder's cell multiples, over the grid (a CNN's columns: the whole height)."""
  enc, cfg = encoders.lookup(translator.config.encoder), translator.config
  ch, cw = enc.cell_size(cfg), getattr(enc, 'cell_width_of', enc.cell_size)(cfg)
  return -(-image.shape[0] // ch) * ch // grid[0], -(-image.shape[1] // cw) * cw // grid[1]


def _pooled(scores: np.ndarray, grid: tuple[int, int], cell: tuple[int, int]) -> np.ndarray:
  """Pixel scores [T, H, W] -> [T, H', W']: the |score| summed over each grid cell."""
  t, (gh, gw), (ch, cw) = len(scores), grid, cell
  padded = np.zeros((t, gh * ch, gw * cw), np.float64)
  h, w = min(scores.shape[1], gh * ch), min(scores.shape[2], gw * cw)
  padded[:, :h, :w] = np.abs(scores[:, :h, :w])
  return padded.reshape(t, gh, ch, gw, cw).sum(axis=(2, 4))


def _token_saliency(translator, method: str, sources: Sequence[str],
                    outputs: Sequence[np.ndarray], rows: int = 32) -> list[np.ndarray]:
  """translator.saliency(source, method, reference=output) of each source (token models),
  computed in batches of `rows` padded to one shape (one compiled program per method, not
  one per sentence length): [T_i, S_i] each, T_i the output's ids, S_i the source's + EOS."""
  fn = translator.attributor(method, attribution.Options())
  src_ids = [translator.src_tok.encode(s) + [data_lib.EOS] for s in sources]
  s_len = batching.round_up(max(map(len, src_ids)))
  t_len = batching.round_up(max(len(o) for o in outputs))
  out = []
  for start in range(0, len(sources), rows):
    chunk = range(start, min(start + rows, len(sources)))
    src = np.zeros((rows, s_len), np.int32)
    src[:, 0] = data_lib.EOS                      # filler rows: a lone EOS
    tgt_in, tgt_out = np.zeros((rows, t_len), np.int32), np.zeros((rows, t_len), np.int32)
    tgt_in[:, 0] = BOS
    for r, i in enumerate(chunk):
      ids = np.asarray(outputs[i], np.int32)
      src[r, :len(src_ids[i])] = src_ids[i]
      tgt_out[r, :len(ids)] = ids
      tgt_in[r, :len(ids)] = np.concatenate([[BOS], ids[:-1]])
    scores = np.asarray(fn(translator.params, src, tgt_in, tgt_out).scores)
    out += [scores[r, :len(outputs[i]), :len(src_ids[i])] for r, i in enumerate(chunk)]
  return out


def _image_saliency(translator, method: str, images: Sequence[np.ndarray],
                    outputs: Sequence[np.ndarray], grids: Sequence[tuple[int, int]],
                    rows: int = 8) -> list[np.ndarray]:
  """translator.saliency(image, method, reference=output) of each image, over its own grid of
  cells [T_i, H'_i, W'_i] (pixel methods: |score| summed per cell, _pooled), computed in
  batches of `rows` padded to one shape: one compiled program per method, not one per image
  size. grids: each image's attention grid (its weights' shape)."""
  fn = translator.attributor(method, attribution.Options())
  cfg = translator.config
  cell = encoders.lookup(cfg.encoder).cell_size(cfg)
  shape = (max(im.shape[0] for im in images), max(im.shape[1] for im in images))
  t_len = batching.round_up(max(len(o) for o in outputs))
  over_memory = attribution.lookup(method).over == 'memory'
  out = []
  for start in range(0, len(images), rows):
    chunk = list(range(start, min(start + rows, len(images))))
    fill = [images[chunk[0]]] * (rows - len(chunk))            # filler rows: a copy
    src = images_lib.pad_batch([images[i] for i in chunk] + fill, cell, shape)
    tgt_in, tgt_out = np.zeros((rows, t_len), np.int32), np.zeros((rows, t_len), np.int32)
    tgt_in[:, 0] = BOS
    for r, i in enumerate(chunk):
      ids = np.asarray(outputs[i], np.int32)
      tgt_out[r, :len(ids)] = ids
      tgt_in[r, :len(ids)] = np.concatenate([[BOS], ids[:-1]])
    scores = np.asarray(fn(translator.params, src, tgt_in, tgt_out).scores)
    grid = encoders.grid_shape(cfg, src.shape[1:3])
    for r, i in enumerate(chunk):
      s, (gh, gw) = scores[r, :len(outputs[i])], grids[i]
      if over_memory:
        out.append(s.reshape(len(s), *grid)[:, :gh, :gw])
      else:
        h, w = images[i].shape[:2]
        out.append(_pooled(s[:, :h, :w], (gh, gw), _cells(translator, images[i], (gh, gw))))
  return out


def _layer_weights(translator, source: str, ids: np.ndarray) -> np.ndarray:
  """translator.attend_heads(source)'s weights [N, H, T, S] for the output `ids`, the source
  and output padded to multiples of 8 (few compiled shapes), then cut."""
  src_ids = translator.src_tok.encode(source) + [data_lib.EOS]
  src = np.zeros(batching.round_up(len(src_ids)), np.int32)
  src[:len(src_ids)] = src_ids
  out = np.zeros(batching.round_up(len(ids)), np.int32)
  out[:len(ids)] = ids
  w = inference.layer_weights(translator.graphdef, translator.params, src, out)
  return w[:, :, :len(ids), :len(src_ids)]


def sentence_details(translator, summary: dict, task, methods: Sequence[str], beam: int,
                     alpha: float = 0.6, limit: int | None = None,
                     words: dict | None = None) -> dict[int, dict]:
  """Per sentence id (the first `limit` rows by id; None: all): the explicit attention of the
  greedy output, as the run's records hold it (= translator.attend(source)), a Transformer's
  per layer and head (= attend_heads), each attribution method's map of that output, the gold
  alignment where the task has one, and the beam-`beam` n-best list. Image runs: the image
  (uint8) and the maps over its grid of cells (pixel maps summed per cell). With `words`
  (explorer_words.word_alignments, with details of these ids): the reference's word alignment
  as 'words' (explorer_words.detail)."""
  rows = sorted(summary['sentences'], key=lambda r: r['id'])[:limit]
  split, images = summary['split'], sources_lib.lookup(summary['source']).grid
  ids = [r['id'] for r in rows]
  sources = ([task.image(split, i) for i in ids] if images
             else [task.texts(split)[i][0] for i in ids])
  with warnings.catch_warnings():   # sources beyond the training lengths: shown all the same
    warnings.simplefilter('ignore', RuntimeWarning)
    best = translator.decode(sources)
    nbest = (translator.decode(sources, beam=beam, alpha=alpha, nbest=beam, with_weights=False)
             if beam > 1 else best)
    maps = {}
    todo = [k for k, h in enumerate(best) if len(h.ids[0])]
    for m in methods:
      if not todo:
        maps[m] = {}
      elif images:
        maps[m] = dict(zip(todo, _image_saliency(
            translator, m, [sources[k] for k in todo], [best[k].ids[0] for k in todo],
            [best[k].weights[0].shape[1:] for k in todo])))
      else:
        maps[m] = dict(zip(todo, _token_saliency(translator, m, [sources[k] for k in todo],
                                                 [best[k].ids[0] for k in todo])))
  cfg = translator.config
  transformer = cfg.arch == 'transformer'
  out = {}
  for k, (r, src, h, nb) in enumerate(zip(rows, sources, best, nbest)):
    weights, tgt_tokens = h.weights[0], h.tgt_tokens[0]
    cell = _cells(translator, src, weights.shape[1:]) if images and tgt_tokens else (1, 1)
    d = {'id': r['id'], 'output': h.outputs[0], 'src_tokens': h.src_tokens,
         'tgt_tokens': tgt_tokens, 'attn': _ints(weights),
         'nbest': [[o, round(s, 4)] for o, s in zip(nb.outputs, nb.scores)], 'maps': {}}
    if transformer and tgt_tokens:
      heads = (translator.attend_heads(src)[1] if images
               else _layer_weights(translator, src, h.ids[0]))
      d['heads'] = _ints(heads)
    for m in methods:
      if tgt_tokens:
        d['maps'][m] = _ints(_normalised(np.asarray(maps[m][k], np.float64))[:len(tgt_tokens)])
    if not images and task.has_alignment:
      src_text, ref = task.texts(split)[r['id']]
      gold = task.gold_alignment(np.asarray(task.src_tok.encode(src_text)),
                                 np.asarray(task.tgt_tok.encode(ref)))
      d['gold'] = None if gold is None else [int(g) for g in gold]
    w = {} if words is None else words['sentences'].get(r['id'], {})
    if 'detail' in w:
      d['words'] = w['detail']
    if images:
      d['image'] = np.rint(np.clip(src, 0, 1) * 255).astype(np.uint8)
      d['cell'] = list(cell)
    out[r['id']] = d
  return out


# ---- several runs ----------------------------------------------------------------------

def comparison(runs: Sequence[RunInfo], split: str, texts=None) -> dict:
  """Several runs of one task and split: per sentence which got it right (exact match), the
  comparison of their variants (compare.compare over seed groups: means, intervals,
  Holm-adjusted tests), and the by-length rows of each variant."""
  groups: dict[str, list[RunInfo]] = {}
  for r in runs:   # a sweep's 'variant/seed_k' runs make one group per variant
    parts = r.name.split(os.sep)
    key = os.sep.join(parts[:-1]) if len(parts) > 1 and parts[-1].startswith('seed_') else r.name
    groups.setdefault(key, []).append(r)
  if len(groups) == 1:   # one variant's seeds: compared with each other
    groups = {r.name: [r] for r in runs}
  evaluated = [compare_lib.Group(name, [compare_lib.load_run(r.workdir, (split,)) for r in rs])
               for name, rs in groups.items()]
  cmp = compare_lib.compare(evaluated, split, trials=2000) if len(evaluated) > 1 else None
  by_id = {r.name: {x['id']: x for x in r.records} for r in runs}
  ids = sorted(by_id[runs[0].name])
  sentences = []
  for i in ids:
    src, ref = texts[i] if texts is not None else ('', '')
    sentences.append({'id': i, 'src': src, 'ref': ref, 'len': by_id[runs[0].name][i]['src_len'],
                      'right': [int(by_id[r.name][i]['exact']) for r in runs],
                      'hyp': [by_id[r.name][i]['hyp'] for r in runs]})
  return {'split': split, 'task': runs[0].task, 'runs': [r.name for r in runs],
          'groups': {k: [r.name for r in v] for k, v in groups.items()},
          'compare': cmp, 'sentences': sentences}
