"""Evaluators: what is measured on a split once it is scored (scoring.score_split: the
teacher-forced sums and the decoded outputs), each a registered class with its own config
fields, its splits and its moments (after the design of big_vision's evaluators).

  by_length    the figures by source length (Cho et al. 2014, Bahdanau et al. 2015's figure)
  attribution  implicit attention against gold alignments (implicit/alignment.py)
  word_alignment  word alignments of every map against word-level gold (implicit/word_maps.py)
  heatmaps     attention heatmaps of the first outputs
  records      the per-sentence records (records.py), which `compare` resamples

They run at each validation ('validation'), at the end of training on every split ('final':
Session.finish writes what they return into the run's results) and in `evaluate` ('evaluate':
saved_run.evaluate_run), in registration order, on process 0 only. A new one is a class and
a line:

  @evaluators.register('longest')
  class Longest(evaluators.Evaluator):
    when = ('final', 'evaluate')
    def run(self, ctx):
      return {'longest': max(r['src_len'] for r in ctx.records[1])}
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Sequence

import ml_collections
import numpy as np

from attention_jax import fields, registry
from attention_jax.data import builders
from attention_jax.decoding import inference
from attention_jax.evaluation import metrics as metrics_lib
from attention_jax.evaluation import plots
from attention_jax.evaluation import records as records_lib
from attention_jax.implicit import alignment
from attention_jax.implicit import attribution
from attention_jax.implicit import word_maps
from attention_jax.models import encoders
from attention_jax.symbols import EOS

EVALUATORS: dict[str, type['Evaluator']] = {}
register = registry.registrar(EVALUATORS, 'evaluator')
MOMENTS = ('validation', 'final', 'evaluate')
DEFAULT_LENGTH_EDGES = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)


@dataclasses.dataclass
class Context:
  """What an evaluator reads: one scored split of one model."""
  when: str                   # MOMENTS
  split: str                  # the split's name ('validation', 'test', ...)
  report: dict                # the split's figures so far (score_split); evaluators add to it
  kept: list                  # the first outputs (src, hyp, ref, ids [L], weights [L, S], image)
  records: tuple              # (header, per-sentence records) of records.build
  task: Any                   # data.Task
  graphdef: Any
  params: Any
  mcfg: Any                   # models.model.ModelConfig
  cfg: ml_collections.ConfigDict   # the run's config (its eval section: the evaluators')
  sentences: list = dataclasses.field(default_factory=list)   # scoring.Scored.sentences
  path: Callable[[str], str] | None = None   # where a file of kind 'heatmaps' / 'sentences'
                                             # goes (None: nothing is written)
  prefix: str = ''            # of the heatmaps' file names
  one_model: bool = True      # False for an ensemble (no per-head maps)


def _check_bleu_tokenize(name, value):
  import sacrebleu  # pylint: disable=g-import-not-at-top  (seconds of import, where checked)
  if value not in sacrebleu.BLEU.TOKENIZERS:
    raise ValueError(f'unknown {name} {value!r}; valid (sacrebleu): '
                     f'{", ".join(sacrebleu.BLEU.TOKENIZERS)}')


@dataclasses.dataclass(frozen=True)
class Scoring(fields.Fields):
  """The eval section's fields every evaluation reads: BLEU's tokenizer, the beam."""
  SECTION = 'eval'
  bleu_tokenize: str = fields.field('13a', 'sacrebleu tokenizer: 13a for words, char for '
                                    'character tasks', _check_bleu_tokenize, 'sacrebleu\'s')
  beam_size: int = fields.positive(5, 'the beam of evaluate and of the final evaluation')
  alpha: float = fields.number(0.6, 'length penalty ((5+|Y|)/6)^alpha (Wu et al. 2016)')


fields.own('every evaluation', Scoring)


class Evaluator:
  """One registered evaluator. `Fields`: its fields of the config's eval section, a frozen
  dataclass (fields.Fields, SECTION 'eval': their defaults and meaning; or `fields`, a dict of
  their defaults); self.opts holds their values; `when`: the MOMENTS it runs at; `splits`: the
  splits it runs on (None: every split scored)."""
  name = ''
  fields: dict[str, Any] = {}
  when: tuple[str, ...] = ('final', 'evaluate')
  splits: tuple[str, ...] | None = None

  @classmethod
  def field_defaults(cls) -> dict[str, Any]:
    return cls.Fields.defaults() if hasattr(cls, 'Fields') else dict(cls.fields)

  def __init__(self, eval_cfg):
    self.opts = {k: eval_cfg.get(k, v) for k, v in self.field_defaults().items()}

  def check(self, task=None) -> None:
    """Fails in one line on a bad value of its fields (task: that it can run on it)."""

  def applies(self, ctx: Context) -> bool:
    return ctx.when in self.when and (self.splits is None or ctx.split in self.splits)

  def run(self, ctx: Context) -> dict | None:
    """-> entries added to the split's report (the run's results[split] at the end)."""
    raise NotImplementedError


def defaults() -> dict[str, Any]:
  """Every registered evaluator's fields of the eval section with their defaults (the one place
  each is declared: the class); a key two evaluators give different defaults is refused."""
  out: dict[str, Any] = {}
  owner: dict[str, str] = {}
  for name, cls in EVALUATORS.items():
    for k, v in cls.field_defaults().items():
      if k in out and out[k] != v:
        raise ValueError(f'eval.{k}: evaluator {name} gives it the default {v!r}, evaluator '
                         f'{owner[k]} {out[k]!r}; a shared key has one default')
      out.setdefault(k, v)
      owner.setdefault(k, name)
  return out


def build(eval_cfg) -> list[Evaluator]:
  """Every registered evaluator, configured by a run's eval section, fields checked."""
  out = [cls(eval_cfg) for cls in EVALUATORS.values()]
  for e in out:
    e.check()
  return out


def run_all(evaluators: Sequence[Evaluator], ctx: Context) -> dict:
  """Runs those that apply to ctx, adding what each returns to ctx.report -> ctx.report."""
  for e in evaluators:
    if e.applies(ctx):
      ctx.report.update(e.run(ctx) or {})
  return ctx.report


# ---- by source length -------------------------------------------------------------------
def _buckets(edges: Sequence[int], max_len: int) -> list[tuple[int, int]]:
  """Source-length buckets (lo, hi] from edges, extended to cover max_len."""
  edges = sorted(int(e) for e in edges)
  if not edges or edges[0] != 0:
    edges = [0] + [e for e in edges if e > 0]
  while edges[-1] < max_len:
    edges.append(edges[-1] + (edges[-1] - edges[-2] if len(edges) > 1 else 10))
  return list(zip(edges[:-1], edges[1:]))


def bucket_label(lo: int, hi: int) -> str:
  return f'{lo + 1}-{hi}'


def by_length(sentences: Sequence[dict], edges: Sequence[int], bleu_tokenize: str) -> list[dict]:
  """Per-sentence records (records.build: src_len, hyp, ref, refs, align, registered) -> the
  figures of each source-length bucket (lo, hi] that holds sentences."""
  out = []
  several = bool(sentences) and sentences[0].get('refs') is not None
  for lo, hi in _buckets(edges, max((s['src_len'] for s in sentences), default=0)):
    sel = [s for s in sentences if lo < s['src_len'] <= hi]
    if not sel:
      continue
    m = metrics_lib.text_metrics([s['hyp'] for s in sel], [s['ref'] for s in sel], bleu_tokenize)
    entry = {'bucket': bucket_label(lo, hi), 'lo': lo, 'hi': hi, 'sentences': len(sel),
             'exact_match': m['exact_match'], 'bleu': m['bleu'], 'chrf': m['chrf']}
    if several:
      entry.update(metrics_lib.g2p_metrics([s['hyp'] for s in sel], [s['refs'] for s in sel]))
    for n in sel[0].get('registered', {}):
      entry[n] = metrics_lib.METRICS[n].score(np.sum([s['registered'][n] for s in sel], 0))
    steps = sum(s['align'][1] for s in sel if s.get('align'))
    if steps:
      entry['alignment_accuracy'] = 100.0 * sum(s['align'][0] for s in sel) / steps
    out.append(entry)
  return out


@register('by_length')
class ByLength(Evaluator):
  """The figures by source length (eval.length_edges: bucket edges (lo, hi])."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SECTION = 'eval'
    length_edges: tuple = fields.field(DEFAULT_LENGTH_EDGES, 'source-length buckets (lo, hi] '
                                       '(empty: none)')
  when = MOMENTS

  def check(self, task=None) -> None:
    edges = self.opts['length_edges']
    if (isinstance(edges, str) or not hasattr(edges, '__len__')
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in edges)
        or any(a >= b for a, b in zip(edges, edges[1:]))):
      raise ValueError('eval.length_edges must be increasing integers >= 0 (source-length '
                       f'bucket edges, e.g. (10, 20, 30)), got {edges!r}')

  def applies(self, ctx: Context) -> bool:
    return super().applies(ctx) and bool(self.opts['length_edges'])

  def run(self, ctx: Context) -> dict:
    return {'by_length': by_length(ctx.sentences, self.opts['length_edges'],
                                   ctx.cfg.eval.bleu_tokenize)}


# ---- implicit attention against gold alignments -------------------------------------------
def train_max_len(data_cfg) -> int | None:
  """The longest training source of a task with gold alignments (copy, reverse, sort: their
  test sentences go beyond it), else None."""
  return int(data_cfg.max_len) if data_cfg.name in builders.ALIGNMENTS else None


def attribution_methods(spec: str, source: str | None = None) -> list[str]:
  """eval.attribution ('' | 'all' | 'gradient,integrated_gradients') -> method names (those
  that apply to `source`, 'tokens' or 'images', where given); an unknown name, or one that
  cannot apply, fails naming the valid ones."""
  names = [m.strip() for m in str(spec or '').split(',') if m.strip()]
  if names == ['all']:
    return attribution.names(source) if source else sorted(attribution.METHODS)
  for m in names:
    if source:
      attribution.check(m, source)
    else:
      attribution.lookup(m)
  return names


@register('attribution')
class AgainstGold(Evaluator):
  """Implicit attention (attribution methods, implicit/attribution.py) against the gold
  alignments of copy / reverse / sort (alignment.attribute_split) or digit_strips' boxes (the
  pointing game, alignment.attribute_images), on eval.attribution_num test sentences."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SECTION = 'eval'
    attribution: str = fields.field(
        '', "implicit attention at the end, on tasks with gold alignments (copy, reverse, "
        "sort): methods of implicit/attribution.py, comma-separated, or 'all'; '' = none")
    attribution_num: int = fields.field(200, 'test sentences attributed')
    attribution_steps: int = fields.field(32, "integrated gradients' steps (and SmoothGrad's "
                                          'samples)')
  splits = ('test',)

  def check(self, task=None) -> None:
    spec = self.opts['attribution']
    methods = attribution_methods(spec, task.source if task is not None else None)
    for name in ('attribution_num', 'attribution_steps'):
      value = self.opts[name]
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'eval.{name} must be a positive integer, got {value!r}')
    if task is not None and methods and not (task.has_alignment
                                             or getattr(task, 'has_boxes', False)):
      raise ValueError(f'eval.attribution={spec!r} measures attributions against gold '
                       f'alignments, which task {task.name!r} does not have (copy, reverse, '
                       "sort and digit_strips' boxes have them); set eval.attribution=''")

  def applies(self, ctx: Context) -> bool:
    return (ctx.when in self.when and bool(self.opts['attribution'])
            and (ctx.when == 'evaluate' or ctx.split in self.splits))

  def run(self, ctx: Context) -> dict:
    self.check(ctx.task)
    methods = attribution_methods(self.opts['attribution'], ctx.task.source)
    steps = int(self.opts['attribution_steps'])
    common = dict(num=int(self.opts['attribution_num']), batch_size=int(ctx.cfg.data.batch_size),
                  options=attribution.Options(steps=steps, samples=steps))
    if ctx.when == 'final':
      print(f'attributing {common["num"]} test sentences ({self.opts["attribution"]})',
            flush=True)
    if getattr(ctx.task, 'has_boxes', False):   # images with each output's box: pointing game
      grid = encoders.grid_shape(ctx.mcfg, ctx.task.image_shape)
      report = alignment.attribute_images(ctx.graphdef, ctx.params, ctx.task, ctx.split,
                                          methods, grid, **common)
    else:
      report = alignment.attribute_split(ctx.graphdef, ctx.params, ctx.task, ctx.split, methods,
                                         train_max_len=train_max_len(ctx.cfg.data), **common)
    return {'attribution': report}


# ---- word alignments against word-level gold ----------------------------------------------
def word_alignment_maps(spec: str, methods: str, names_of: Callable[[Sequence[str]], list[str]],
                        source: str = 'tokens') -> list[str]:
  """eval.word_alignment ('auto' / 'all': every explicit map the model has; '' none; or
  comma-separated map names) and eval.word_alignment_methods (attribution methods, 'all' or
  comma-separated) -> the map names; names_of(methods) lists the model's (word_maps.map_names)."""
  spec = str(spec or '').strip()
  extra = attribution_methods(methods, source)
  if not spec:
    return extra
  offered = names_of(extra)
  if spec in ('auto', 'all'):
    return offered
  asked = [n.strip() for n in spec.split(',') if n.strip()] + extra
  unknown = [n for n in asked if n not in offered]
  if unknown:
    raise ValueError(f'eval.word_alignment: unknown map(s) {", ".join(unknown)}; this model '
                     f'offers: {", ".join(offered)}')
  return list(dict.fromkeys(asked))


@register('word_alignment')
class WordAlignments(Evaluator):
  """Word alignments of every map (word_maps: the explicit attention, a Transformer's layers
  and heads and their _shift rows, the attribution methods of eval.word_alignment_methods)
  against word-level gold (tasks whose examples carry links: greek_english), teacher-forced
  on the test references: precision, recall and AER per map and by source length, each target
  word linked to its argmax source word."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SECTION = 'eval'
    word_alignment: str = fields.field(
        'auto', "word alignments against word-level gold (greek_english) at the end: 'auto' / "
        "'all' every explicit map (attention, a Transformer's layers, heads, _shift rows), or "
        "map names; '' none")
    word_alignment_methods: str = fields.field('', "... and these attribution methods' maps "
                                               "('all', or names)")
    word_alignment_num: int = fields.field(0, 'test sentences aligned (0: all)')
    word_alignment_steps: int = fields.field(32, "integrated gradients' steps (and "
                                             "SmoothGrad's samples)")
  splits = ('test',)

  def check(self, task=None) -> None:
    n = self.opts['word_alignment_num']
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
      raise ValueError(f'eval.word_alignment_num must be an integer >= 0 (test sentences '
                       f'aligned; 0: all), got {n!r}')
    steps = self.opts['word_alignment_steps']
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
      raise ValueError(f'eval.word_alignment_steps must be a positive integer (integrated '
                       f'gradients\' steps, smoothgrad\'s samples), got {steps!r}')
    attribution_methods(self.opts['word_alignment_methods'],
                        task.source if task is not None else None)
    if (task is not None and not task.has_word_gold
        and self.opts['word_alignment'] not in ('auto', '')):
      raise ValueError(f'eval.word_alignment={self.opts["word_alignment"]!r} measures word '
                       f'alignments against word-level gold, which task {task.name!r} does not '
                       "have (greek_english has it); set eval.word_alignment='auto' or ''")

  def applies(self, ctx: Context) -> bool:
    return (ctx.when in self.when and bool(self.opts['word_alignment'])
            and ctx.task.has_word_gold and ctx.one_model
            and (ctx.when == 'evaluate' or ctx.split in self.splits))

  def run(self, ctx: Context) -> dict:
    self.check(ctx.task)
    names = word_alignment_maps(
        self.opts['word_alignment'], self.opts['word_alignment_methods'],
        lambda methods: word_maps.map_names(ctx.graphdef, ctx.params, methods),
        ctx.task.source)
    num = int(self.opts['word_alignment_num']) or None
    total = min(num or len(ctx.task.texts(ctx.split)), len(ctx.task.texts(ctx.split)))
    print(f'word alignments of {len(names)} maps on {total} {ctx.split} sentences', flush=True)
    steps = int(self.opts['word_alignment_steps'])
    out = word_maps.align_split(
        ctx.graphdef, ctx.params, ctx.task, ctx.split, names, num=num,
        batch_size=int(ctx.cfg.data.batch_size),
        options=attribution.Options(steps=steps, samples=steps),
        progress=lambda n: print(f'  word alignments: {n}/{total} sentences', flush=True))
    figures = {n: {**out['figures'][n], 'by_length': out['by_length'][n]} for n in names
               if out['figures'][n]['links']}   # score `none`: its attention links nothing
    return {'word_alignment': figures, 'word_alignment_sentences': len(out['gold']),
            'word_alignment_num': num or 0}


# ---- heatmaps ------------------------------------------------------------------------------
@register('heatmaps')
class Heatmaps(Evaluator):
  """Attention heatmaps of the first eval.heatmaps outputs of each test split (of the
  evaluated one in `evaluate`), a grid of them, and a Transformer's heads."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SECTION = 'eval'
    heatmaps: int = fields.field(3, 'attention heatmaps of the first test sentences at the end '
                                 '(0: none)')

  def check(self, task=None) -> None:
    shown = self.opts['heatmaps']
    if not isinstance(shown, int) or isinstance(shown, bool) or shown < 0:
      raise ValueError(f'eval.heatmaps must be an integer >= 0 (test sentences drawn), got '
                       f'{shown!r}')

  def applies(self, ctx: Context) -> bool:
    return (ctx.when in self.when and ctx.path is not None and bool(ctx.kept)
            and ctx.split != 'validation')

  def run(self, ctx: Context) -> dict:
    heads = (functools.partial(inference.layer_weights, ctx.graphdef, ctx.params)
             if ctx.one_model and ctx.mcfg.arch == 'transformer' else None)
    return {'heatmaps': heatmaps(ctx.task, ctx.kept, ctx.path('heatmaps'), ctx.prefix or ctx.split,
                                 heads, functools.partial(encoders.grid_shape, ctx.mcfg))}


def heatmaps(task, kept, directory: str, prefix: str, heads: Callable | None = None,
             grid: Callable | None = None) -> list[str]:
  """One labelled PNG per kept sentence, plus a grid of all of them; with `heads`
  (inference.layer_weights(graphdef, params, ...) of a Transformer) also a grid of the first
  sentence's cross-attention per decoder layer (rows) and head (columns). Image sources: each
  output token's attention upsampled onto the image (image_heatmaps), over the grid that
  `grid` (an image's (H, W) -> (H', W'): encoders.grid_shape of the model) gives."""
  os.makedirs(directory, exist_ok=True)
  if kept and kept[0][5] is not None:
    return image_heatmaps(task, kept, directory, prefix, grid, heads)
  paths, items = [], []
  for i, (src, hyp, ref, ids, weights, _) in enumerate(kept):
    src_tokens = task.src_tok.pieces(src) + ['</s>']
    n = next((j + 1 for j, t in enumerate(ids) if t == EOS), len(ids))
    tgt_tokens = [task.tgt_tok.id_to_piece(int(t)) for t in ids[:n]]
    title = f'{src!r} -> {hyp!r}' + ('' if hyp == ref else f' (ref {ref!r})')
    w = weights[:n, :len(src_tokens)]
    items.append((w, src_tokens, tgt_tokens, title))
    paths.append(plots.plot_attention(w, src_tokens, tgt_tokens,
                                      os.path.join(directory, f'{prefix}_{i}.png'), title))
  if items:
    paths.append(plots.plot_attention_grid(items, os.path.join(directory, f'{prefix}_grid.png')))
  if items and heads is not None:
    src, _, _, ids, _, _ = kept[0]
    w, src_tokens, tgt_tokens, title = items[0]
    src_ids = np.asarray(task.src_tok.encode(src) + [EOS], np.int32)
    per_head = heads(src_ids, np.asarray(ids[:len(tgt_tokens)], np.int32))      # [N, H, T, S]
    grid = [(per_head[n, h], src_tokens, tgt_tokens, f'layer {n + 1}, head {h + 1}')
            for n in range(per_head.shape[0]) for h in range(per_head.shape[1])]
    paths.append(plots.plot_attention_grid(
        grid, os.path.join(directory, f'{prefix}_heads.png'), cols=per_head.shape[1]))
  return paths


def image_heatmaps(task, kept, directory: str, prefix: str, grid: Callable,
                   heads: Callable | None = None) -> list[str]:
  """Image sources (Xu et al. 2015's figures): per kept example a PNG with one row per output
  token, its attention over the grid upsampled onto the image, and a grid of all examples'
  first ten tokens; with `heads` (a Transformer decoder) also the first example's
  cross-attention per decoder layer and head, a column each."""
  paths, items = [], []
  for i, (src, hyp, ref, ids, weights, image) in enumerate(kept):
    n = next((j + 1 for j, t in enumerate(ids) if t == EOS), len(ids))
    tokens = [task.tgt_tok.id_to_piece(int(t)) for t in ids[:n]]
    title = f'{src!r} -> {hyp!r}' + ('' if hyp == ref else f' (ref {ref!r})')
    shape = grid(image.shape[:2])
    items.append((image, weights[:n].reshape(n, *shape), tokens, title))
    paths.append(plots.plot_image_attention(image, items[-1][1], tokens,
                                            os.path.join(directory, f'{prefix}_{i}.png'), title))
  if items:
    paths.append(plots.plot_image_attention_grid(
        items, os.path.join(directory, f'{prefix}_grid.png')))
  if items and heads is not None:
    image, _, tokens, _ = items[0]
    per_head = heads(image, np.asarray(kept[0][3][:len(tokens)], np.int32))   # [N, H, T, S]
    per_head = per_head.reshape(*per_head.shape[:3], *grid(image.shape[:2]))
    columns = [(image, per_head[n, h], tokens, f'layer {n + 1}, head {h + 1}')
               for n in range(per_head.shape[0]) for h in range(per_head.shape[1])]
    paths.append(plots.plot_image_attention_grid(
        columns, os.path.join(directory, f'{prefix}_heads.png')))
  return paths


# ---- per-sentence records ------------------------------------------------------------------
@register('records')
class Records(Evaluator):
  """The per-sentence records of every split (workdir.Run.sentences_path), for `compare`; in
  `evaluate` the report names the file (a run's own are where workdir.Run puts them)."""

  def applies(self, ctx: Context) -> bool:
    return ctx.when in self.when and ctx.path is not None

  def run(self, ctx: Context) -> dict | None:
    path = records_lib.write(ctx.path('sentences'), *ctx.records)
    return {'sentences_file': path} if ctx.when == 'evaluate' else None
