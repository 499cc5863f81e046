"""The frozen model config and the Seq2Seq model (encoder + attention decoder)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import attention, cells, scores, self_attention
from attention_jax.decoder import DECODERS
from attention_jax.encoder import Encoder
from attention_jax.layers import dropout

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Everything that fixes the model's architecture and parameter shapes.

  Validated on construction: a bad value fails here, before anything is compiled.
  """
  src_vocab: int
  tgt_vocab: int
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
  dropout: float = 0.0
  max_src_len: int = 128
  dtype: str = 'float32'

  def __post_init__(self):
    for name in ('src_vocab', 'tgt_vocab', 'emb_dim', 'enc_hidden', 'enc_layers',
                 'dec_hidden', 'dec_layers', 'attn_dim', 'max_src_len', 'window',
                 'self_attention_heads'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'model.{name} must be a positive integer, got {value!r}')
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f'model.dropout must be in [0, 1), got {self.dropout!r}')
    if not isinstance(self.self_attention_layers, int) or self.self_attention_layers < 0:
      raise ValueError(f'model.self_attention_layers must be an integer >= 0, got '
                       f'{self.self_attention_layers!r}')
    if not self.hard_temperature > 0:
      raise ValueError(f'model.hard_temperature must be > 0, got {self.hard_temperature!r}')
    for name, valid in (('cell', cells.CELLS), ('decoder', DECODERS), ('score', scores.SCORES),
                        ('dtype', DTYPES)):
      if getattr(self, name) not in valid:
        raise ValueError(f'unknown model.{name} {getattr(self, name)!r}; '
                         f'valid: {", ".join(sorted(valid))}')
    scores.SCORES[self.score].check_sizes(self.dec_hidden, self.key_dim)
    attention.check_combination(self.score, self.attention_mode, self.normaliser,
                                self.coverage)
    if self.self_attention_layers:
      self_attention.check(self.self_attention_score, self.self_attention_heads, self.key_dim)

  @property
  def stochastic(self) -> bool:
    """True when attention samples positions in training (trained by REINFORCE)."""
    return attention.MODES[self.attention_mode].stochastic

  @property
  def key_dim(self) -> int:
    """Size K of the encoder annotations h̄_s."""
    return self.enc_hidden * (2 if self.bidirectional else 1)

  @property
  def compute_dtype(self) -> Any:
    return DTYPES[self.dtype]

  @classmethod
  def from_dict(cls, d: Mapping[str, Any], **overrides) -> 'ModelConfig':
    """From a config section (unknown keys fail, naming them and the valid ones)."""
    d = {**dict(d), **overrides}
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - fields)
    if unknown:
      raise ValueError(f'unknown model config field(s) {unknown}; valid: {sorted(fields)}')
    return cls(**d)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


class Seq2Seq(nnx.Module):
  """Encoder-decoder with attention.

  model(src [B, S], tgt_in [B, T]) -> (logits [B, T, V] float32, weights [B, T, S] float32)
  Token id 0 is padding. Pass `dropout_key` to train (dropout on), None to evaluate.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.encoder = Encoder(vocab=cfg.src_vocab, emb_dim=cfg.emb_dim, hidden=cfg.enc_hidden,
                           layers=cfg.enc_layers, bidirectional=cfg.bidirectional,
                           cell=cfg.cell, dropout=cfg.dropout, dtype=cfg.compute_dtype,
                           self_layers=cfg.self_attention_layers,
                           self_heads=cfg.self_attention_heads,
                           self_score=cfg.self_attention_score, attn_dim=cfg.attn_dim,
                           max_src_len=cfg.max_src_len, rngs=rngs)
    self.decoder = DECODERS[cfg.decoder](cfg, cfg.key_dim, rngs=rngs)

  def __call__(self, src: jax.Array, tgt_in: jax.Array, *,
               dropout_key: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    logits, read = self.forward(src, tgt_in, dropout_key=dropout_key)
    return logits, read.weights

  def forward(self, src: jax.Array, tgt_in: jax.Array, *, dropout_key: jax.Array | None = None,
              sample_key: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """-> (logits [B, T, V] float32, attention.Read [B, T, ...] without context).

    `sample_key`: the hard modes sample positions with it (training); None = argmax.
    """
    k_enc, k_emb, k_out = (None,) * 3 if dropout_key is None else jax.random.split(dropout_key, 3)
    enc = self.encoder(src, dropout_key=k_enc)
    carry, mem = self.decoder.start(enc)
    dec = self.decoder
    emb = dropout(dec.embed(tgt_in), dec.dropout, k_emb)                     # [B, T, E]
    feat, read = dec.features(carry, dec.cells[0].project(emb), mem, sample_key)  # [B,T,F]
    return dec.logits(feat, emb, k_out), read

  # ---- step-by-step decoding (greedy / beam search) -------------------------
  def start(self, src: jax.Array):
    """src [B, S] -> (decoder carry, memory) for `step`."""
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

