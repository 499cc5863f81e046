"""The frozen model config, the recurrent Seq2Seq model (encoder + attention decoder), and
`build`, which makes the model a config names (model.arch: rnn | transformer; model.encoder:
the source encoder, encoders.ENCODERS)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import registry
from attention_jax.models import (attention, cells, contract, encoders, images, rnn_encoder,
                                  scores, sources, transformer)
from attention_jax.models.layers import dropout
from attention_jax.models.rnn_decoder import DECODERS

# the modules whose encoder classes register themselves in encoders.ENCODERS ('rnn'; 'cnn', 'vit')
ENCODER_MODULES = (rnn_encoder, images)

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Everything that fixes the model's architecture and parameter shapes.

  Validated on construction: a bad value fails here, before anything is compiled. Each arch
  and encoder reads its own fields (`reads(arch, encoder)`: its registry entry's `fields`);
  one it does not read set to another value than its default is refused in one line.
  """
  src_vocab: int
  tgt_vocab: int
  arch: str = 'rnn'                  # ARCHS: rnn | transformer
  # the source encoder (encoders.ENCODERS): '' = the arch's own token encoder (rnn: 'rnn';
  # transformer: its Transformer encoder); 'cnn' or 'vit' for image sources (images.py)
  encoder: str = ''
  emb_dim: int = 64
  enc_hidden: int = 64
  enc_layers: int = 1
  bidirectional: bool = True
  cell: str = 'gru'
  dec_hidden: int = 128
  dec_layers: int = 1
  decoder: str = 'bahdanau'
  score: str = 'additive'
  attn_dim: int = 64
  input_feeding: bool = True
  attention_mode: str = 'global'     # attention.MODES: global local_m local_p hard hard_st
  normaliser: str = 'softmax'        # softmax | sparsemax
  window: int = 5                    # D, the half-width of the local windows
  coverage: bool = False             # coverage vector in the (additive) score
  hard_temperature: float = 1.0      # τ of hard_st's Gumbel-softmax
  self_attention_layers: int = 0     # encoder self-attention layers (0 = off)
  self_attention_heads: int = 4
  self_attention_score: str = 'scaled_dot'
  dropout: float = 0.0               # the experiments use 0.1 (experiments/configs/common.py)
  max_src_len: int = 128             # location score: the size of its output layer
  dtype: str = 'float32'             # compute dtype: float32 | bfloat16 (params stay float32)
  # ---- transformer (arch='transformer') ----
  d_model: int = 128
  heads: int = 4
  ff_dim: int = 512
  transformer_layers: int = 3        # encoder layers, and as many decoder layers
  # sinusoidal (defined for every length: sentences longer than the training maximum get
  # positions the model has never seen, but well defined), learned (a table of max_positions
  # vectors: positions past the training lengths stay at their random init, and inputs or
  # output limits past max_positions are refused), none (the encoder sees a bag of tokens)
  positions: str = 'sinusoidal'
  max_positions: int = 512           # learned positions: the table's size ('vit' with
                                     # learned_2d: rows and columns of patches)
  norm_first: bool = True            # pre-norm (False: post-norm, as Vaswani et al. 2017)
  attention_dropout: float = 0.0
  cross_attention_score: str = 'scaled_dot'
  share_embeddings: bool = False     # one embedding table for source and target
  tie_output: bool = False           # output projection = target embeddings transposed
  # ---- image sources (model.encoder = 'cnn' | 'vit'; images.py) ----
  image_channels: int = 1            # 1 grayscale, 3 RGB
  image_dim: int = 128               # annotation size K of an image encoder (RNN decoders)
  cnn_layers: int = 3                # conv blocks, each halving H and W: cells of 2^L pixels
  cnn_width: int = 32                # channels of the first block, doubling per block
  cnn_row_rnn: bool = False          # a bidirectional RNN (model.cell) along each grid row
  cnn_norm: bool = False             # LayerNorm over channels after each convolution
  cnn_columns: bool = False          # max over each column of the grid: a 1 x W' grid
  cnn_cell_width: int = 0            # pixels per grid cell across (0: 2^cnn_layers, square)
  cnn_positions: str = 'annotations'  # 2-D positions added to the annotations, the row RNN's
                                     # input ('rnn_input') or nowhere ('none')
  patch_size: int = 4                # 'vit': p x p pixel patches (its layers: d_model, heads,
                                     # ff_dim, transformer_layers, self_attention_score)
  vit_stem: int = 0                  # 'vit': stride-2 3x3 convolutions before the patches (a
                                     # convolutional stem, Xiao et al. 2021; 0: none, linear
                                     # patch embeddings): patch_size a multiple of 2^vit_stem
  vit_positions: str = 'sinusoid_2d'  # 'vit': sinusoid_2d (fixed) | learned_2d (a vector per
                                     # row and per column, up to max_positions of each)
  # Xu et al. 2015 §4.2.1: the context is scaled by a gate beta_t = sigmoid(w · s_{t-1} + b)
  context_gate: bool = False

  def __post_init__(self):
    """Each field is validated once, by its owner: the fields every model reads here; the
    fields of the chosen arch and encoder (ARCHS, encoders.ENCODERS: their `fields`) in
    their `check`. A field the chosen model does not read must keep its default."""
    for name, valid in (('arch', ARCHS), ('dtype', DTYPES)):
      if getattr(self, name) not in valid:
        raise ValueError(f'unknown model.{name} {getattr(self, name)!r}; '
                         f'valid: {", ".join(sorted(valid))}')
    if self.encoder:
      encoders.lookup(self.encoder)
    check_read(self.to_dict())
    read = reads(self.arch, self.encoder)
    for name, valid in (('cell', cells.CELLS), ('decoder', DECODERS), ('score', scores.SCORES)):
      if name in read and getattr(self, name) not in valid:
        raise ValueError(f'unknown model.{name} {getattr(self, name)!r}; '
                         f'valid: {", ".join(sorted(valid))}')
    for name in sorted(POSITIVE & read):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'model.{name} must be a positive integer, got {value!r}')
    for name in ('dropout', 'attention_dropout'):
      if name in read and not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f'model.{name} must be in [0, 1), got {getattr(self, name)!r}')
    attention.check_normaliser(self.normaliser)
    self._check_encoder()
    ARCHS[self.arch].check(self)

  def require_arch(self, arch: str, model: str) -> None:
    """A model class (aj.Seq2Seq, aj.Transformer) given the config of another arch fails in
    one line that names aj.build."""
    if self.arch != arch:
      raise ValueError(f"aj.{model} is the model of model.arch='{arch}', this config has "
                       f"model.arch={self.arch!r}: aj.build(cfg, rngs=...) builds the model of "
                       f"any arch ({', '.join(ARCHS)})")

  def _check_encoder(self) -> None:
    name = self.encoder or ARCHS[self.arch].token_encoder
    if not name:
      return
    cls = encoders.lookup(name)
    ARCHS[self.arch].check_encoder(self, cls)
    sources.lookup(cls.source).check(self)
    if hasattr(cls, 'check'):
      cls.check(self)

  @property
  def source_encoder(self) -> str:
    """The encoder's name: model.encoder, else the arch's token encoder, else (a token
    encoder inside the arch's own class) the arch's name."""
    return self.encoder or ARCHS[self.arch].token_encoder or self.arch

  @property
  def source(self) -> str:
    """'tokens' or 'images': what the model reads ('' encoder: the arch's token encoder)."""
    return encoders.lookup(self.encoder).source if self.encoder else 'tokens'

  def describe(self) -> str:
    """One line naming the architecture, for logs."""
    return sources.of(self).describe(self) + ARCHS[self.arch].describe(self)

  @property
  def stochastic(self) -> bool:
    """True when attention samples positions in training (trained by REINFORCE)."""
    return attention.MODES[self.attention_mode].stochastic

  @property
  def key_dim(self) -> int:
    """Size K of the encoder annotations h̄_s (RNN decoders): the source kind's."""
    return sources.of(self).key_dim(self)

  @property
  def cache_width(self) -> int:
    """Numbers a decoder keeps per output position and hypothesis (the arch's cache_width)."""
    return ARCHS[self.arch].cache_width(self)

  @property
  def memory_width(self) -> int:
    """Numbers the attention reads per source position (grid cell) and decoding step (the
    arch's memory_width)."""
    return ARCHS[self.arch].memory_width(self)

  def check_source_length(self, length: int) -> None:
    """ValueError where the model cannot read `length` source positions (EOS included): part
    of the model's contract (the arch's check_source_length), so decoding asks the model."""
    ARCHS[self.arch].check_source_length(self, length)

  @property
  def compute_dtype(self) -> Any:
    return DTYPES[self.dtype]

  @property
  def variant(self) -> str:
    """A short name of the attention under study (the arch's variant: score/decoder, ...)."""
    return ARCHS[self.arch].variant(self)

  @classmethod
  def from_dict(cls, d: Mapping[str, Any], **overrides) -> 'ModelConfig':
    """From a config section (unknown keys fail, naming them and the valid ones)."""
    d = {**dict(d), **overrides}
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - fields)
    if unknown:
      raise ValueError(f'unknown model config field(s) {unknown}; valid: {sorted(fields)}')
    return cls(**d)

  @classmethod
  def defaults(cls) -> dict[str, Any]:
    """The default of every field that has one."""
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING}

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


# ---- which fields a model reads: each arch (ARCHS) and encoder (encoders.ENCODERS) declares
# its own (`fields`; an arch's `image_fields` only with an image encoder); these every model reads
COMMON_FIELDS = ('src_vocab', 'tgt_vocab', 'arch', 'encoder', 'dropout', 'dtype', 'max_src_len',
                 'normaliser')
POSITIVE = frozenset({  # fields that are positive integers (checked where read)
    'src_vocab', 'tgt_vocab', 'emb_dim', 'enc_hidden', 'enc_layers', 'dec_hidden', 'dec_layers',
    'attn_dim', 'max_src_len', 'window', 'self_attention_heads', 'd_model', 'heads', 'ff_dim',
    'transformer_layers', 'max_positions', 'image_channels', 'image_dim', 'cnn_layers',
    'cnn_width', 'patch_size'})
# a field of the other arch with the same role, named when it is set for the wrong one
_INSTEAD = {('transformer', 'score'): 'cross_attention_score',
            ('rnn', 'cross_attention_score'): 'score'}


def reads(arch: str, encoder: str = '') -> frozenset[str]:
  """The ModelConfig fields the model of (model.arch, model.encoder) reads."""
  cls = registry.lookup(ARCHS, 'model.arch', arch)
  name = encoder or cls.token_encoder     # '' = the arch's own (the Transformer's: inside it)
  out = set(COMMON_FIELDS) | set(cls.fields)
  if name:
    enc = encoders.lookup(name)
    out |= set(enc.fields) | set(cls.source_fields.get(enc.source, ()))
  return frozenset(out)


def check_read(fields: Mapping[str, Any]) -> None:
  """One ValueError line when `fields` (model config fields) set a field the model of their
  arch and encoder does not read to a value other than its default."""
  arch, encoder = fields.get('arch', 'rnn'), fields.get('encoder', '')
  read, defaults = reads(arch, encoder), ModelConfig.defaults()
  unread = [k for k in defaults if k not in read and k in fields and fields[k] != defaults[k]]
  if not unread:
    return
  instead = [f'model.{_INSTEAD[arch, k]} in place of model.{k}' for k in unread
             if (arch, k) in _INSTEAD]
  raise ValueError(
      f'model.arch={arch!r}, model.encoder={encoder!r} does not read '
      + ', '.join(f'model.{k}={fields[k]!r}' for k in unread)
      + (f' ({"; ".join(instead)})' if instead else '')
      + ('; leave them at their defaults' if len(unread) > 1 else '; leave it at its default')
      + '. It reads: ' + ', '.join(f.name for f in dataclasses.fields(ModelConfig)
                                   if f.name in read))


def migrate(fields: Mapping[str, Any]) -> dict[str, Any]:
  """A saved model config (a run's model config, a checkpoint's, its config's model section)
  without the fields its model does not read: runs saved before each model owned its fields
  hold them all (a transformer of the smoke variant: enc_hidden=16); they now count as their
  defaults. Unknown keys and unknown archs are kept, to fail where they are used."""
  try:
    read = reads(fields.get('arch', 'rnn'), fields.get('encoder', ''))
  except ValueError:
    return dict(fields)
  known = ModelConfig.defaults()
  return {k: v for k, v in fields.items() if k in read or k not in known}


def build(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """The model of `cfg.arch`: Seq2Seq or transformer.Transformer (the same interface)."""
  return ARCHS[cfg.arch](cfg, rngs=rngs)


class Seq2Seq(nnx.Module, contract.EncoderDecoder):
  """Encoder-decoder with attention.

  model(src, tgt_in [B, T]) -> (logits [B, T, V] float32, weights [B, T, S] float32)
  src: token ids [B, S] (0 is padding) or images (encoders.py); S = the memory's length. Pass `dropout_key` to train (dropout on), None to evaluate.
  """

  # the fields it reads (model.check_read): the RNN decoder's; the source encoder's own
  # (encoders.ENCODERS, default token_encoder); with an image encoder also image_fields
  fields = ('emb_dim', 'cell', 'dec_hidden', 'dec_layers', 'decoder', 'score', 'attn_dim',
            'input_feeding', 'attention_mode', 'window', 'coverage', 'hard_temperature',
            'context_gate')
  source_fields = {'images': ('image_dim',)}   # the annotation size K an image encoder gives
  token_encoder = 'rnn'

  @staticmethod
  def describe(cfg: ModelConfig) -> str:
    return f'{cfg.decoder} decoder, {cfg.score} score, {cfg.cell} cells'

  @staticmethod
  def variant(cfg: ModelConfig) -> str:
    return f'{cfg.score}/{cfg.decoder}'

  @staticmethod
  def cache_width(cfg: ModelConfig) -> int:
    """The RNN decoder keeps no cache per output position."""
    return 0

  @staticmethod
  def memory_width(cfg: ModelConfig) -> int:
    """The annotations the attention reads: key_dim per source position."""
    return cfg.key_dim

  @staticmethod
  def check_encoder(cfg: ModelConfig, encoder: type) -> None:
    """Any registered encoder can feed the RNN decoder."""

  @staticmethod
  def check_source_length(cfg: ModelConfig, length: int) -> None:
    """The score's bound (the location score's output layer has max_src_len positions)."""
    scores.SCORES[cfg.score].check_source_length(length, cfg.max_src_len)

  @classmethod
  def check(cls, cfg: ModelConfig) -> None:
    """The decoder's fields (validated here only)."""
    if not cfg.hard_temperature > 0:
      raise ValueError(f'model.hard_temperature must be > 0, got {cfg.hard_temperature!r}')
    scores.SCORES[cfg.score].check_sizes(cfg.dec_hidden, cfg.key_dim)
    attention.check_combination(cfg.score, cfg.attention_mode, cfg.normaliser, cfg.coverage)

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    cfg.require_arch('rnn', 'Seq2Seq')
    self.cfg = cfg
    self.encoder = encoders.lookup(cfg.source_encoder).build(cfg, dim=cfg.key_dim, rngs=rngs)
    self.decoder = DECODERS[cfg.decoder](cfg, cfg.key_dim, rngs=rngs)

  def source_mask(self, src: jax.Array) -> jax.Array:
    """src -> [B, S] bool: the memory positions that are real (not padding)."""
    return self.encoder.source_mask(src)

  def encode(self, src: jax.Array) -> tuple[jax.Array, jax.Array]:
    """src -> (annotations [B, S, K] the decoder attends over, mask [B, S]) (as Transformer)."""
    enc = self.encoder(src)
    return enc.annotations, enc.mask

  def source_embeddings(self, src: jax.Array) -> jax.Array:
    """Token ids [B, S] -> the embedded source [B, S, E] the encoder reads (token encoders)."""
    return self.encoder.embed(src)

  def forward(self, src: jax.Array, tgt_in: jax.Array, *, dropout_key: jax.Array | None = None,
              sample_key: jax.Array | None = None, source_shift: jax.Array | None = None,
              memory_shift: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """-> (logits [B, T, V] float32, attention.Read [B, T, ...] without context).

    `sample_key`: the hard modes sample positions with it (training); None = argmax.
    `source_shift` [B, S, E] is added to the embedded source (token encoders) and
    `memory_shift` [B, S, K] to the encoder's annotations: attribution.py differentiates
    with respect to them.
    """
    k_enc, k_emb, k_out = (None,) * 3 if dropout_key is None else jax.random.split(dropout_key, 3)
    if source_shift is None:
      enc = self.encoder(src, dropout_key=k_enc)
    else:
      enc = self.encoder(src, dropout_key=k_enc, shift=source_shift)
    if memory_shift is not None:
      enc = enc._replace(annotations=enc.annotations + memory_shift.astype(enc.annotations.dtype))
    carry, mem = self.decoder.start(enc)
    dec = self.decoder
    emb = dropout(dec.embed(tgt_in), dec.dropout, k_emb)                     # [B, T, E]
    feat, read = dec.features(carry, dec.cells[0].project(emb), mem, sample_key)  # [B,T,F]
    return dec.logits(feat, emb, k_out), read

  # ---- step-by-step decoding (greedy / beam search) -------------------------
  def start(self, src: jax.Array, max_len: int | None = None):
    """src [B, S] -> (decoder carry, memory) for `step` (max_len: unused by the RNN)."""
    del max_len
    return self.decoder.start(self.encoder(src))

  def step(self, carry, y_prev: jax.Array, mem):
    """y_prev [B] int32 -> (carry, log-probabilities [B, V] float32, weights [B, S])."""
    dec = self.decoder
    emb = dec.embed(y_prev)                                                  # [B, E]
    vocab = dec.embed.num_embeddings
    if vocab <= y_prev.shape[0]:
      # fewer symbols than rows (char models, beam search): project the V embeddings, not
      # the B rows, and look the rows up (loop-invariant, so XLA may hoist it out entirely)
      xp = dec.cells[0].project(dec.embed(jnp.arange(vocab)))[y_prev]       # [B, G]
    else:
      xp = dec.cells[0].project(emb)                                         # [B, G]
    carry, (feat, r) = dec.step(carry, xp, mem)
    logits = dec.logits(feat[:, None], emb[:, None])[:, 0]
    return carry, jax.nn.log_softmax(logits), r.weights



ARCHS = {'rnn': Seq2Seq, 'transformer': transformer.Transformer}
