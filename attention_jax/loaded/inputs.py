"""A loaded run's inputs, per source kind (models/sources.py): what the Translator accepts,
how each input is read and checked, batched and decoded, and how attention over a batch maps
back onto the input's own positions (its tokens, or its image's own grid cells). The
Translator asks `inputs_for(config)` instead of branching on the kind:

  inputs = inputs_for(t.config)        # TokenInputs or ImageInputs
  inputs.check(t, texts, name)         # TypeError / ValueError naming the first bad input
  hyps = inputs.decode(t, texts, beam, alpha, nbest, with_weights)

A new source kind registers its class here under the kind's name (`@register_inputs`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import jax
import numpy as np

from attention_jax import data as data_lib
from attention_jax import registry
from attention_jax.decoding import ahead, greedy, inference
from attention_jax.models import encoders
from attention_jax.models import images as images_lib

INPUTS: dict[str, type['Inputs']] = {}
register_inputs = registry.registrar(INPUTS, 'source kind of a loaded run')


def inputs_for(config) -> type['Inputs']:
  """The inputs of a run reading config.source."""
  return registry.lookup(INPUTS, 'source kind of a loaded run', config.source)


class One(NamedTuple):
  """One input made a batch of one: src [1, ...]; src_tokens (its pieces, '</s>' last; []
  for images); own(a [T, S]) -> a map over the memory cut to the input's own positions (its
  tokens, its image's own grid cells); crop(a [T, *P]) the same for a map over the input's
  positions (tokens; an image's pixels); source: what decode() takes for it (an image: the
  array read, not read again)."""
  src: np.ndarray
  src_tokens: list[str]
  own: Callable[[np.ndarray], np.ndarray]
  crop: Callable[[np.ndarray], np.ndarray]
  source: object


class Inputs:
  """What differs between source kinds in a loaded run (see the module docstring)."""
  name: str
  one_input: str                 # what one input is called in messages: saliency(text)
  empty_heads: tuple[int, ...]   # attend_heads' weights of an empty output: (0,) * ndim

  @classmethod
  def check(cls, t, inputs, name: Callable[[int], str]) -> None:
    """Raises ValueError / TypeError for inputs that t.translate() would refuse."""
    raise NotImplementedError

  @classmethod
  def check_list(cls, inputs, what: str) -> None:
    """TypeError unless `inputs` is a list of this kind's inputs (`what`: the call)."""

  @classmethod
  def check_one(cls, source, what: str) -> None:
    """TypeError unless `source` is one input of this kind."""

  @classmethod
  def decode(cls, t, inputs, beam: int, alpha: float, nbest: int,
             with_weights: bool) -> list:
    raise NotImplementedError

  @classmethod
  def one(cls, t, source, what: str) -> One | None:
    """One input as a batch of one (None: an empty text, nothing to attribute)."""
    raise NotImplementedError

  @classmethod
  def layer_weights(cls, t, source, h) -> np.ndarray:
    """Every decoder layer's and head's weights [N, H, T, ...] of hypothesis h of `source`,
    over the input's own positions."""
    raise NotImplementedError


@register_inputs('tokens')
class TokenInputs(Inputs):
  one_input = 'text'
  empty_heads = (0, 0, 0, 0)

  @classmethod
  def check(cls, t, texts, name):
    cls.check_list(texts, 'check(texts)')
    t._check_lengths(texts, [i for i, x in enumerate(texts) if x.strip()], name)

  @classmethod
  def check_list(cls, texts, what):
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
      raise TypeError(f'{what}: texts must be a list of str, got {type(texts).__name__}')
    for i, x in enumerate(texts):
      if not isinstance(x, str):
        raise TypeError(f'{what}: texts[{i}] is {type(x).__name__}, not str')

  @classmethod
  def check_one(cls, text, what):
    if not isinstance(text, str):
      raise TypeError(f'{what}: text must be a str, got {type(text).__name__}')

  @classmethod
  def decode(cls, t, texts, beam, alpha, nbest, with_weights):
    """Sorted by length into chunks of length buckets (t.planner().chunks), compiled ahead of use."""
    cls.check_list(texts, 'decode(texts)')
    fn = t.decoder(beam, alpha, nbest, with_weights)
    out: list = [None] * len(texts)
    todo = [i for i, x in enumerate(texts) if x.strip()]
    for i in set(range(len(texts))) - set(todo):
      out[i] = t.empty_hypotheses(nbest)
    t._check_lengths(texts, todo)
    ids = {i: t.src_tok.encode(texts[i]) + [data_lib.EOS] for i in todo}
    todo.sort(key=lambda i: len(ids[i]))            # similar lengths share a chunk
    plan = list(t.planner().chunks(todo, [len(ids[i]) for i in todo], beam * nbest))
    shape = lambda n, length: (n, length, greedy.max_output_len(length, t._factor), t._factor)
    programs = None
    if t.compile_ahead and hasattr(fn, 'lower'):
      key = (beam, float(alpha), nbest, with_weights)
      if key not in t._programs:
        t._programs[key] = ahead.Programs(fn)
      programs = t._programs[key]
      programs.schedule(t.params, [shape(*s) for _, s in plan])
    try:
      for rows, (n, length) in plan:
        src = t._batch([ids[i] for i in rows], n, length)
        t.shapes_used.add((beam, float(alpha), nbest) + src.shape)
        result = (programs.get(t.params, shape(n, length))(t.params, src) if programs
                  else fn(t.params, src, *shape(n, length)[2:]))
        tokens, scores, weights = jax.device_get(result)
        for r, i in enumerate(rows):
          src_tokens = t.src_tok.pieces(texts[i]) + ['</s>']
          out[i] = t._hypotheses(tokens[r], scores[r], weights[r], src_tokens,
                                 lambda w, s=len(src_tokens): w[:, :s])
    except BaseException:
      if programs:   # a stopped decode (an error, Ctrl-C) leaves no compiling queued
        programs.cancel()
      raise
    return out

  @classmethod
  def one(cls, t, text, what):
    cls.check_one(text, what)
    if not text.strip():
      return None
    t._check_lengths([text], [0], lambda i: what)
    src_tokens = t.src_tok.pieces(text) + ['</s>']
    cut = lambda a: a[..., :len(src_tokens)]
    return One(t._encode([text]), src_tokens, cut, cut, text)

  @classmethod
  def layer_weights(cls, t, text, h):
    src = t._encode([text])[0][:len(h.src_tokens)]
    return inference.layer_weights(t.graphdef, t.params, src, h.ids[0])


@register_inputs('images')
class ImageInputs(Inputs):
  one_input = 'image'
  empty_heads = (0, 0, 0, 0, 0)

  @classmethod
  def check(cls, t, sources, name):   # file paths: each read and checked, one line each
    cls.read(t, sources, name)

  @classmethod
  def check_list(cls, sources, what):
    if isinstance(sources, (str, bytes, np.ndarray)) or not isinstance(sources, Sequence):
      raise TypeError(f'this model reads images: pass a list of images (file paths or arrays), '
                      f'got {type(sources).__name__}')

  @classmethod
  def read(cls, t, sources, name=lambda i: f'images[{i}]') -> list[np.ndarray]:
    """Every image read and checked (readable, within t.max_image_shape) before any is
    decoded; a failure is one ValueError naming name(i) and the file."""
    imgs = []
    for i, s in enumerate(sources):
      try:
        imgs.append(images_lib.read_image(s, t.config.image_channels, t.max_image_shape))
      except (OSError, ValueError) as e:
        raise ValueError(f'{name(i)}: {e}') from None
    return imgs

  @classmethod
  def cell(cls, t) -> int:
    return encoders.lookup(t.config.encoder).cell_size(t.config)

  @classmethod
  def decode(cls, t, sources, beam, alpha, nbest, with_weights):
    """In chunks of t.chunk_size images, each padded to the chunk's largest; the output
    limit from the longest training target."""
    cls.check_list(sources, 'decode')
    imgs = cls.read(t, sources)
    fn = t.decoder(beam, alpha, nbest, with_weights)
    max_tgt = int(t.run_config.get('data', {}).get('max_tgt_len', 128))
    max_len = greedy.max_output_len(max_tgt, t._factor)
    out = []
    for start in range(0, len(imgs), t.chunk_size):
      chunk = imgs[start:start + t.chunk_size]
      src = images_lib.pad_batch(chunk, cls.cell(t))
      tokens, scores, weights = jax.device_get(fn(t.params, src, max_len, t._factor))
      for r, im in enumerate(chunk):
        out.append(t._hypotheses(tokens[r], scores[r], weights[r], [],
                                 cls.own_cells(t, im, src.shape[1:3])))
    return out

  @classmethod
  def own_cells(cls, t, image: np.ndarray, padded: tuple[int, int]):
    """-> a function of weights [T, S] over the grid of a batch padded to `padded` (H, W)
    pixels -> [T, H', W'] over `image`'s own cells (top left)."""
    enc = encoders.lookup(t.config.encoder)
    cell = enc.cell_size(t.config)
    grid = enc.grid_shape(t.config, padded)
    gh, gw = enc.grid_shape(t.config, (-(-image.shape[0] // cell) * cell,
                                       -(-image.shape[1] // cell) * cell))
    return lambda w: w.reshape(len(w), *grid)[:, :gh, :gw]

  @classmethod
  def one(cls, t, source, what):
    image = cls.read(t, [source], lambda i: what)[0]
    src = images_lib.pad_batch([image], cls.cell(t))
    return One(src, [], cls.own_cells(t, image, src.shape[1:3]),
               lambda a: a[:, :image.shape[0], :image.shape[1]], image)

  @classmethod
  def layer_weights(cls, t, source, h):
    image = cls.read(t, [source])[0]
    src = images_lib.pad_batch([image], cls.cell(t))[0]
    w = inference.layer_weights(t.graphdef, t.params, src, h.ids[0])
    grid = encoders.grid_shape(t.config, src.shape[:2])
    return w.reshape(*w.shape[:3], *grid)
