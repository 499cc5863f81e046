"""The frozen model config, the recurrent Seq2Seq model (encoder + attention decoder), and
`build`, which makes the model a config names (model.arch: rnn | transformer; model.encoder:
the source encoder, encoders.ENCODERS)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import fields, registry
from attention_jax.models import (attention, cells, contract, encoders, images, rnn_encoder,
                                  scores, sources, transformer)
from attention_jax.models.layers import dropout
from attention_jax.models.rnn_decoder import DECODERS

# the modules whose encoder classes register themselves in encoders.ENCODERS ('rnn'; 'cnn', 'vit')
ENCODER_MODULES = (rnn_encoder, images)

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class EveryModel(fields.Fields):
  """The fields every model reads; each part (ARCHS, encoders.ENCODERS, DECODERS) owns the rest
  as its `Fields`."""
  arch: str = fields.one_of('rnn', lambda: ARCHS, 'the architecture')
  encoder: str = fields.field(
      '', "the source encoder (encoders.ENCODERS): '' = the arch's own token encoder (rnn: "
      "'rnn'; transformer: its Transformer encoder); 'cnn' or 'vit' for image sources",
      lambda name, value: value and encoders.lookup(value),
      lambda: ["''", *sorted(encoders.ENCODERS)])
  dropout: float = fields.rate(0.0, 'dropout rate (the experiments use 0.1)')
  dtype: str = fields.one_of('float32', DTYPES, 'compute dtype (parameters stay float32)')
  max_src_len: int = fields.positive(128, 'the location score: the size of its output layer')
  normaliser: str = fields.field('softmax', 'attention weights from scores: softmax | sparsemax',
                                 lambda name, value: attention.check_normaliser(value),
                                 'softmax, sparsemax')


fields.own('every model', EveryModel)
VOCABS = ('src_vocab', 'tgt_vocab')   # given by the data, not by the config


class ModelConfig:
  """Everything that fixes the model's architecture and parameter shapes: the EveryModel fields and
  the fields of the parts the config chooses (`parts`: the arch, its encoder, its decoder),
  read as attributes (cfg.score). Frozen, compared and hashed by value.

  Validated on construction: a bad value fails here, before anything is compiled, in one line
  (each part's Fields checks its values, then the part its combinations); a field the chosen
  parts do not read, set to another value than its default, is refused naming them
  (check_read)."""

  def __init__(self, src_vocab: int, tgt_vocab: int, **values: Any):
    known = ModelConfig.defaults()
    unknown = sorted(set(values) - set(known))
    if unknown:
      raise ValueError(f'unknown model config field(s) {unknown}; valid: {sorted(known)}')
    given = {'src_vocab': src_vocab, 'tgt_vocab': tgt_vocab, **values}
    for name in VOCABS:
      fields.check_positive(f'model.{name}', given[name])
    common = EveryModel.of(given)
    check_read(given)
    typed = {f: f.of(given) for f in field_types(given)}
    read = {k: v for part in (common, *typed.values()) for k, v in dataclasses.asdict(part).items()}
    object.__setattr__(self, '_values', {'src_vocab': src_vocab, 'tgt_vocab': tgt_vocab, **read})
    object.__setattr__(self, '_typed', typed)
    self._check_encoder()
    arch, *others = parts(given)   # each part checks its combinations of fields, the arch last
    for owner in (*others, arch):
      if hasattr(owner, 'check'):
        owner.check(self)

  # ---- a frozen value -------------------------------------------------------------------
  def __getattr__(self, name: str) -> Any:
    """A field's value; a field no chosen part reads has its default."""
    if name.startswith('_'):
      raise AttributeError(name)
    if name in self._values:
      return self._values[name]
    known = ModelConfig.defaults()
    if name in known:
      return known[name]
    raise AttributeError(f'ModelConfig has no field {name!r}')

  def __setattr__(self, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f'cannot assign to field {name!r}')

  def __eq__(self, other: Any) -> bool:
    return isinstance(other, ModelConfig) and self._values == other._values

  def __hash__(self) -> int:
    return hash(tuple(self._values.items()))

  def __repr__(self) -> str:
    return f'ModelConfig({", ".join(f"{k}={v!r}" for k, v in self._values.items())})'

  def __reduce__(self):
    return _rebuild, (self._values,)

  def replace(self, **changes: Any) -> 'ModelConfig':
    """A copy with `changes` (checked as on construction)."""
    return ModelConfig(**{**self._values, **changes})

  def fields_of(self, owner: type) -> fields.Fields:
    """The typed fields of a chosen part (an arch, encoder or decoder class, or a Fields)."""
    return self._typed[getattr(owner, 'Fields', owner)]

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
    return cls(**{**dict(d), **overrides})

  @staticmethod
  def defaults() -> dict[str, Any]:
    """The default of every registered model field, the EveryModel ones first (every part's; the
    vocabularies have none)."""
    return {**EveryModel.defaults(), **fields.defaults('model')}

  def to_dict(self) -> dict[str, Any]:
    """The fields the model reads (its vocabularies, the EveryModel fields, its parts')."""
    return dict(self._values)


def _rebuild(values: Mapping[str, Any]) -> ModelConfig:
  return ModelConfig(**values)


# ---- which fields a model reads: the EveryModel fields and its parts' --------------------------
def parts(values: Mapping[str, Any]) -> list[type]:
  """The parts a model config (its flat section) chooses: the arch, its source encoder
  (model.encoder, else the arch's token encoder) and the parts the arch's own fields choose
  (the RNN's decoder). Unknown names fail naming the valid ones."""
  arch = registry.lookup(ARCHS, 'model.arch', values.get('arch', 'rnn'))
  name = values.get('encoder', '') or arch.token_encoder
  return [arch, *([encoders.lookup(name)] if name else []), *arch.chosen(values)]


def field_types(values: Mapping[str, Any]) -> list[type[fields.Fields]]:
  """The Fields of the parts `values` chooses, and what the arch reads besides for the source
  kind of its encoder (its source_fields)."""
  arch, *rest = parts(values)
  kind = encoders.lookup(values['encoder']).source if values.get('encoder') else 'tokens'
  return [f.Fields for f in (arch, *rest) if hasattr(f, 'Fields')] + list(
      arch.source_fields.get(kind, ()))


def reads(values: Mapping[str, Any]) -> frozenset[str]:
  """The ModelConfig fields the model of a config section (its arch, encoder, decoder) reads."""
  return frozenset(VOCABS) | frozenset(EveryModel.names()) | frozenset(
      k for f in field_types(values) for k in f.names())


def smoke_sizes(values: Mapping[str, Any]) -> dict[str, Any]:
  """The smoke variant's sizes of the fields the model of `values` reads (its parts' SMOKE)."""
  return {k: v for f in field_types(values) for k, v in f.SMOKE.items()}


def check_read(values: Mapping[str, Any]) -> None:
  """One ValueError line when `values` (model config fields) set a field the model of their
  arch and encoder does not read to a value other than its default (an arch's `instead` names
  its field of the same role)."""
  arch, encoder = values.get('arch', 'rnn'), values.get('encoder', '')
  read, defaults = reads(values), ModelConfig.defaults()
  unread = [k for k in defaults if k not in read and k in values and values[k] != defaults[k]]
  if not unread:
    return
  instead = ARCHS[arch].instead
  named = [f'model.{instead[k]} in place of model.{k}' for k in unread if k in instead]
  raise ValueError(
      f'model.arch={arch!r}, model.encoder={encoder!r} does not read '
      + ', '.join(f'model.{k}={values[k]!r}' for k in unread)
      + (f' ({"; ".join(named)})' if named else '')
      + ('; leave them at their defaults' if len(unread) > 1 else '; leave it at its default')
      + '. It reads: ' + ', '.join(k for k in (*VOCABS, *defaults) if k in read))


def migrate(values: Mapping[str, Any]) -> dict[str, Any]:
  """A saved model config (a run's model config, a checkpoint's, its config's model section)
  without the fields its model does not read: runs saved before each model owned its fields
  hold them all (a transformer of the smoke variant: enc_hidden=16); they now count as their
  defaults. Unknown keys and unknown names are kept, to fail where they are used."""
  try:
    read = reads(values)
  except ValueError:
    return dict(values)
  known = ModelConfig.defaults()
  return {k: v for k, v in values.items() if k in read or k not in known}


def build(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """The model of `cfg.arch`: Seq2Seq or transformer.Transformer (the same interface)."""
  return ARCHS[cfg.arch](cfg, rngs=rngs)


class Seq2Seq(nnx.Module, contract.EncoderDecoder):
  """Encoder-decoder with attention.

  model(src, tgt_in [B, T]) -> (logits [B, T, V] float32, weights [B, T, S] float32)
  src: token ids [B, S] (0 is padding) or images (encoders.py); S = the memory's length. Pass `dropout_key` to train (dropout on), None to evaluate.
  """

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    """The RNN decoder's fields (its source encoder's are the encoder's own)."""
    SMOKE = {'emb_dim': 16, 'attn_dim': 16, 'dec_hidden': 32}
    emb_dim: int = fields.positive(64, 'target (and RNN source) embedding size')
    cell: str = fields.one_of('gru', lambda: cells.CELLS, 'the recurrent cell')
    dec_hidden: int = fields.positive(128, "the decoder's state size")
    dec_layers: int = fields.positive(1, 'stacked decoder cells')
    decoder: str = fields.one_of('bahdanau', lambda: DECODERS,
                                 'Bahdanau et al. 2015 or Luong et al. 2015')
    score: str = fields.one_of('additive', lambda: scores.SCORES, 'the alignment score')
    attn_dim: int = fields.positive(64, "the additive score's hidden size")
    input_feeding: bool = fields.field(True, "Luong: the attentional vector fed to the next step")
    attention_mode: str = fields.field('global', 'global, local_m, local_p, hard, hard_st',
                                       valid=lambda: attention.MODES)
    window: int = fields.positive(5, 'D, the half-width of the local windows')
    coverage: bool = fields.field(False, 'a coverage vector in the (additive) score')
    hard_temperature: float = fields.field(1.0, "τ of hard_st's Gumbel-softmax (> 0)")
    context_gate: bool = fields.field(
        False, 'Xu et al. 2015 §4.2.1: the context scaled by a gate sigmoid(w · s_{t-1} + b)')

  @dataclasses.dataclass(frozen=True)
  class ImageFields(fields.Fields):
    """What the RNN decoder reads besides from an image encoder."""
    image_dim: int = fields.positive(128, 'the annotation size K of an image encoder')

  source_fields = {'images': (ImageFields,)}   # read besides, per source kind
  token_encoder = 'rnn'
  instead = {'cross_attention_score': 'score'}   # a transformer's field of the same role

  @staticmethod
  def chosen(values: Mapping[str, Any]) -> list[type]:
    """The decoder model.decoder names (an unknown name: none, its field refuses it)."""
    decoder = DECODERS.get(values.get('decoder', 'bahdanau'))
    return [decoder] if decoder else []

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
for _name, _cls in ARCHS.items():
  fields.own(f'arch {_name}', _cls.Fields)
  for _kind, _more in _cls.source_fields.items():
    for _f in _more:
      fields.own(f'arch {_name} ({_kind})', _f)
