"""Reload a trained run in one call and translate, with beam search, n-best lists and attention
weights (evaluating a run: analysis/saved_run.py).

  t = attention_jax.load('runs/dates_additive')      # best checkpoint (or step=N)
  t.translate(['22. November 2026'])                  # -> ['2026-11-22'] (greedy)
  t.translate(['Nov 3, 1999'], beam=5, alpha=0.6)     # beam search, length penalty alpha
  t.translate(['Nov 3, 1999'], beam=5, nbest=3)       # -> [[('1999-11-03', -0.01), ...]]
  out, weights, src_tokens, tgt_tokens = t.attend('Nov 3, 1999', beam=5)   # weights [T, S]
  attention_jax.evaluate_run('runs/dates_additive', src='my.src', ref='my.ref', beam=5)
  t = attention_jax.load(['runs/a', 'runs/b'])        # an ensemble of runs (ensemble.py)

Input policy (translate and attend): any str is accepted. Empty or whitespace-only strings
give '' (nothing to translate). Unknown and control characters map to the UNK token.
Inputs longer than the run's training maximum (data.max_src_len tokens) are translated
with a RuntimeWarning naming how many and how long (attention has no length limit, but
quality beyond the training lengths is not what was measured); only the `location` score,
whose output layer has model.max_src_len positions, rejects longer inputs with a ValueError.
Inputs longer than `t.max_input_len` tokens (4x the training maximum, at least 512) raise a
ValueError before anything is allocated. Non-strings raise TypeError naming the argument.
Large batches are decoded in chunks of at most `chunk_size` sentences (sorted by length, so
each chunk pads little) whose attention weights fit MEMORY_BUDGET: memory stays bounded. On
CPUs a chunk is also kept to the rows per device whose attention memory fits twice a core's
L2 cache (`t.cache_budget` bytes; None: off), since each decoding step reads all of it.
Sources are padded to geometric length buckets, each chunk a full chunk of its bucket
(shapes.py: growth `t.bucket_growth`, 1.25, or 2 on one core: shapes.growth), so a file
compiles a bounded set of shapes (about one per bucket), each once per (beam, alpha, nbest),
in a background thread while the chunks before them decode (ahead.py;
`t.compile_ahead = False`: each on first use); `t.shapes_used` lists them. `load` turns on
JAX's persistent compilation cache (compile_cache.py): the next process reads the programs
from disk.

Image models (model.encoder 'cnn' / 'vit') take images where text models take strings: file
paths or arrays ([H, W], uint8 0-255 or float 0-1), padded together; `attend(image)` gives
the weights over the image's grid, [T, H', W'] (images.py):

  t = attention_jax.load('runs/image_dates')
  t.translate(['scan.png', np.asarray(...)], beam=5)   # -> ['2026-11-22', ...]
  out, weights, _, tgt_tokens = t.attend('scan.png')   # weights [T, H', W']

Implicit attention (attribution.py): how much each output token's log-probability depends on
each source position, by gradients or by erasing positions, beside the explicit weights:

  s = t.saliency('Nov 3, 1999', method='integrated_gradients')   # Saliency: s.scores [T, S]
  s = t.saliency('scan.png', method='gradcam')                   # [T, H', W'] (pixels: [T, H, W])
  s = t.saliency('abc', reference='cba')                         # teacher-forced on a reference
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Sequence

import jax
import numpy as np

from attention_jax import data as data_lib
from attention_jax.data import data_fields
from attention_jax.decoding import ahead
from attention_jax.decoding import inference
from attention_jax.decoding import shapes
from attention_jax.implicit import attribution
from attention_jax.implicit import saliency as saliency_lib
from attention_jax.implicit.saliency import Saliency
from attention_jax.loaded import inputs as inputs_lib
from attention_jax.models import images as images_lib
from attention_jax.models.model import ModelConfig


@dataclasses.dataclass
class Hypotheses:
  """The n-best outputs of one source sentence, best first."""
  outputs: list[str]               # detokenized outputs
  scores: list[float]              # log P (greedy) or the length-normalised beam score
  weights: list[np.ndarray]        # [T_i, S] attention of each output (EOS rows included)
  src_tokens: list[str]            # S source pieces, '</s>' last
  tgt_tokens: list[list[str]]      # T_i output pieces of each output, '</s>' last if ended
  ids: list[np.ndarray] = dataclasses.field(default_factory=list)  # [T_i] their token ids


def _on_cpu() -> bool:
  """Whether this process decodes on CPU devices, where the cache-sized chunks and the finer
  KV cache segments were measured (GPUs and TPUs keep the defaults)."""
  return jax.local_devices()[0].platform == 'cpu'


class Translator:
  """A trained model with its tokenizers; greedy or beam decoding, jit-compiled per shape."""

  MEMORY_BUDGET = 256 * 2 ** 20   # bytes of attention weights and KV caches per chunk

  def __init__(self, mcfg: ModelConfig, graphdef, params, src_tok, tgt_tok, factor: float,
               step: int, max_train_len: int | None = None, chunk_size: int = 256,
               run_config: dict | None = None):
    self.config, self.step = mcfg, step
    self.run_config = run_config or {}   # the run's config (workdir.Run.config), for evaluate
    self.max_train_len, self.chunk_size = max_train_len, chunk_size
    # the longest input accepted, in source tokens: 4x the training maximum, at least 512
    self.max_input_len = data_lib.decode_limit(max_train_len or 128)
    self.src_tok, self.tgt_tok = src_tok, tgt_tok
    self.graphdef, self.params, self._factor = graphdef, params, factor
    self._decoders: dict[tuple, object] = {}
    self._programs: dict[tuple, ahead.Programs] = {}
    self._attributors: dict[tuple, object] = {}
    # sources padded to geometric length buckets, chunks full chunks of a bucket (shapes.py):
    # a file compiles a bounded set of shapes, coarser on one core (shapes.growth); None:
    # multiples of 8, chunks as they come
    self.bucket_growth: float | None = shapes.growth()
    self.rows_per_octave: int = shapes.ROWS_PER_OCTAVE   # a call's last chunk's row counts
    self.shapes_used: set[tuple] = set()   # (beam, alpha, nbest, rows, length) decoded
    # a file's shapes compiled ahead of use in a background thread, while the first chunks
    # decode (ahead.py; with several devices too: split_batch's .lower); False: each
    # compiles when first called
    self.compile_ahead: bool = True
    # on CPUs, a chunk's rows per device kept to what keeps the attention's memory in cache
    # (shapes.cache_rows: 2x a core's L2); None (GPUs, TPUs): chunk_size and MEMORY_BUDGET only
    self.cache_budget: int | None = 2 * shapes.l2_bytes() if _on_cpu() else None

  @property
  def model_configs(self) -> tuple[ModelConfig, ...]:
    """The config of every model decoded: this run's (an ensemble's members': ensemble.py)."""
    return (self.config,)

  def decoder(self, beam: int = 1, alpha: float = 0.6, nbest: int = 1,
              with_weights: bool = True):
    """The jit-compiled n-best decode function (inference.make_decoder), one per setting;
    beam search on one CPU core with finer KV cache segments (shapes.kv_segments)."""
    # finer KV cache segments for beam search on one CPU core (faster there only; GPUs and
    # TPUs keep the model's defaults)
    kv = shapes.kv_segments(beam) if _on_cpu() else None
    key = (beam, float(alpha), nbest, with_weights, kv)
    if key not in self._decoders:
      if not alpha >= 0:
        raise ValueError(f'alpha must be >= 0, got {alpha!r}')
      self._decoders[key] = inference.make_decoder(self.graphdef, beam, float(alpha), nbest,
                                                   with_weights=with_weights, kv_segments=kv)
    return self._decoders[key]

  def _encode(self, texts: Sequence[str]) -> np.ndarray:
    """texts -> source ids [len(texts), S] (EOS last), S their padded length (planner().length)."""
    return self._batch([self.src_tok.encode(t) + [data_lib.EOS] for t in texts])

  def _batch(self, ids: Sequence[list[int]], rows: int | None = None,
             length: int | None = None) -> np.ndarray:
    """Token id lists -> [rows, length] int32 PAD-padded (default: len(ids) rows, planner().length
    of the longest); extra rows are a lone EOS (decoded, then dropped)."""
    rows = len(ids) if rows is None else rows
    src = np.zeros((rows, length or self.planner().length(max(map(len, ids)))), np.int32)
    src[len(ids):, 0] = data_lib.EOS
    for i, x in enumerate(ids):
      src[i, :len(x)] = x
    return src

  def check(self, texts: Sequence[str], name=lambda i: f'texts[{i}]') -> None:
    """Raises ValueError/TypeError for inputs that translate() would refuse, naming the
    first by name(i) (i: its index in texts), before anything is decoded."""
    self.inputs.check(self, texts, name)

  def _check_lengths(self, texts: Sequence[str], rows: Sequence[int],
                     name=lambda i: f'texts[{i}]') -> None:
    """Checks texts[i] for i in rows (the non-empty ones)."""
    for i in rows:   # a cheap bound first: a token is at least one character
      if len(texts[i]) > 64 * self.max_input_len:
        raise ValueError(f'{name(i)} has {len(texts[i]):,} characters, far beyond the limit '
                         f'of {self.max_input_len} tokens (t.max_input_len); split it or raise '
                         't.max_input_len')
    lengths = [len(self.src_tok.encode(texts[i])) for i in rows]
    longest = max(lengths, default=0)
    if longest > self.max_input_len:
      i = rows[lengths.index(longest)]
      raise ValueError(f'{name(i)} has {longest:,} tokens; the limit is {self.max_input_len} '
                       f'(t.max_input_len, 4x the training maximum, at least 512): split it or '
                       'raise t.max_input_len')
    for cfg in self.model_configs:
      cfg.check_source_length(longest + 1)   # + EOS
    if self.max_train_len is not None and longest > self.max_train_len:
      n = sum(x > self.max_train_len for x in lengths)
      warnings.warn(f'{n} input(s) longer than the training maximum of {self.max_train_len} '
                    f'tokens (longest {longest}); translating them anyway', RuntimeWarning,
                    stacklevel=4)

  def _hypotheses(self, tokens, scores, weights, src_tokens: list[str],
                  source_weights) -> Hypotheses:
    """One source's decoder rows (tokens [N, L], scores [N], weights [N, L, S]);
    source_weights: a row's weights [T, S] -> those over the source itself (its tokens, or
    its image's own grid cells)."""
    outs, ws, tgts, id_rows = [], [], [], []
    for row, w in zip(tokens, weights):
      ids = row.tolist()
      # up to EOS, or (stopped at its limit) up to the batch's padding: no decoder emits PAD
      n = (ids.index(data_lib.EOS) + 1 if data_lib.EOS in ids
           else ids.index(data_lib.PAD) if data_lib.PAD in ids else len(ids))
      outs.append(self.tgt_tok.decode(ids))
      tgts.append([self.tgt_tok.id_to_piece(i) for i in ids[:n]])
      ws.append(source_weights(np.asarray(w[:n], np.float32)) if w.shape[-1]
                else np.zeros((n, 0), np.float32))   # decoded without weights
      id_rows.append(np.asarray(ids[:n], np.int32))
    return Hypotheses(outs, [float(x) for x in scores], ws, src_tokens, tgts, id_rows)

  def decode(self, texts: Sequence[str], beam: int = 1, alpha: float = 0.6,
             nbest: int = 1, with_weights: bool = True) -> list[Hypotheses]:
    """list of source strings -> their n-best Hypotheses (outputs, scores, attention), in
    input order. An empty or whitespace-only text gives nbest empty outputs of score 0.
    Image models: a list of images (file paths or arrays); weights [T_i, H', W'].
    with_weights False: weights [T_i, 0], none kept while decoding (translate(): less work
    a step); the same outputs and scores."""
    return self.inputs.decode(self, texts, beam, alpha, nbest, with_weights)

  def empty_hypotheses(self, nbest: int) -> Hypotheses:
    """The nbest empty outputs (score 0) of an empty or whitespace-only text."""
    return Hypotheses([''] * nbest, [0.0] * nbest, [np.zeros((0, 0), np.float32)] * nbest,
                      [], [[] for _ in range(nbest)], [np.zeros(0, np.int32)] * nbest)

  @property
  def max_image_shape(self) -> tuple[int, int]:
    """The largest image decoded (height, width): images.MAX_SCALE times the training
    canvas (data.image_height x data.image_width)."""
    d = self.run_config.get('data', {})
    return (images_lib.MAX_SCALE * int(data_fields.get(d, 'image_height')),
            images_lib.MAX_SCALE * int(data_fields.get(d, 'image_width')))

  def read_image(self, source) -> np.ndarray:
    """An image (file path or array) as this model reads it: [H, W(, C)] float32 in [0, 1]
    (ValueError naming the problem: unreadable, out of range, over max_image_shape)."""
    return inputs_lib.ImageInputs.read(self, [source], lambda i: 'image')[0]

  def planner(self) -> shapes.Planner:
    """How sources are cut into chunks and padded, from this Translator's settings (chunk_size,
    MEMORY_BUDGET, cache_budget, bucket_growth, rows_per_octave: shapes.Planner)."""
    return shapes.Planner(self.model_configs, self._factor, self.chunk_size, self.MEMORY_BUDGET,
                          self.cache_budget, self.bucket_growth, self.rows_per_octave,
                          jax.local_device_count())

  def translate(self, texts: Sequence[str], beam: int = 1, alpha: float = 0.6,
                nbest: int = 1) -> list:
    """list of source strings -> list of output strings, in input order (greedy for beam 1,
    else beam search with length penalty alpha). nbest > 1: a list of [(output, score)]
    per input, best first. Image models: a list of images (file paths or arrays). Decodes
    without attention weights (decode(texts) gives them), which it does not return."""
    self.inputs.check_list(texts, 'translate(texts)')
    hyps = self.decode(texts, beam, alpha, nbest, with_weights=False)
    if nbest == 1:
      return [h.outputs[0] for h in hyps]
    return [list(zip(h.outputs, h.scores)) for h in hyps]

  def attend(self, text: str, beam: int = 1, alpha: float = 0.6):
    """text -> (output str, weights [T, S] float32, source tokens, output tokens).

    An empty or whitespace-only text gives ('', an empty [0, 0] array, [], []).
    Image models: an image (file path or array) -> weights [T, H', W'] over its grid."""
    self.inputs.check_one(text, 'attend(text)')
    h = self.decode([text], beam, alpha)[0]
    return h.outputs[0], h.weights[0], h.src_tokens, h.tgt_tokens[0]

  def attend_heads(self, text: str, beam: int = 1, alpha: float = 0.6):
    """text -> (output str, weights [N, H, T, S] float32, source tokens, output tokens): the
    cross-attention of each of a Transformer's N decoder layers and H heads over its output
    (an RNN's single attention as [1, 1, T, S]); `attend` gives the last layer's mean.
    Image models: an image (file path or array) -> weights [N, H, T, H', W'] over its grid."""
    self.inputs.check_one(text, 'attend_heads(text)')
    h = self.decode([text], beam, alpha)[0]
    if not h.tgt_tokens[0]:
      return (h.outputs[0], np.zeros(self.inputs.empty_heads, np.float32), h.src_tokens,
              h.tgt_tokens[0])
    return (h.outputs[0], self.inputs.layer_weights(self, text, h), h.src_tokens,
            h.tgt_tokens[0])

  def attributor(self, method: str, options: attribution.Options):
    """The jit-compiled attribution function (attribution.make_attributor), one per setting."""
    key = (method, options)
    if key not in self._attributors:
      self._attributors[key] = attribution.make_attributor(self.graphdef, method, options)
    return self._attributors[key]

  def saliency(self, source, method: str = 'gradient', beam: int = 1, alpha: float = 0.6,
               reference: str | None = None, **options) -> Saliency:
    """Implicit attention: how strongly each output token depends on each source position
    (attribution.METHODS; options: attribution.Options, e.g. steps=64 for
    integrated_gradients, erase='unk' for erasure). The output is the model's own (greedy, or
    beam search) unless a `reference` is given; both are teacher-forced. Source policy as
    `attend` (an empty text gives empty arrays); image models take an image (file path or
    array)."""
    opts = saliency_lib.options(method, self.config.source, **options)
    if reference is not None and not isinstance(reference, str):
      raise TypeError(f'saliency(reference): must be a str, got {type(reference).__name__}')
    one = self.inputs.one(self, source, f'saliency({self.inputs.one_input})')
    if one is None:   # an empty text: nothing to attribute
      empty = np.zeros((0, 0), np.float32)
      return Saliency('', method, empty, empty, np.zeros(0, np.float32), [], [])
    if reference is None:   # (an image decoded as the array read above: not read again)
      ids = self.decode([one.source], beam, alpha)[0].ids[0]
    else:
      ids = np.asarray(self.tgt_tok.encode(reference) + [data_lib.EOS], np.int32)
    a = saliency_lib.attribute_output(self.attributor(method, opts), self.params, one.src, ids)
    over_memory = attribution.lookup(method).over == 'memory'
    return Saliency(self.tgt_tok.decode(ids.tolist()), method,
                    np.asarray((one.own if over_memory else one.crop)(a.scores), np.float32),
                    np.asarray(one.own(a.weights), np.float32),
                    np.asarray(a.log_probs, np.float32), one.src_tokens,
                    [self.tgt_tok.id_to_piece(int(i)) for i in ids])

  @property
  def inputs(self) -> type[inputs_lib.Inputs]:
    """What this run reads, per source kind: checking, reading, batching (inputs.py)."""
    return inputs_lib.inputs_for(self.config)
