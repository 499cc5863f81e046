"""A throwaway RNN decoder with a field of its own, added the way a researcher adds one: one
class, one registry line and its Fields, in this file alone (tests/test_new_parts.py trains it
on every route).

  model.decoder='tempered'  model.logit_temperature=2.0
"""

import dataclasses

from attention_jax import fields
from attention_jax.models import rnn_decoder


@rnn_decoder.register('tempered')
class Tempered(rnn_decoder.BahdanauDecoder):
  """The Bahdanau decoder with its logits [B, T, V] divided by model.logit_temperature."""

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    logit_temperature: float = fields.number(1.0, 'the logits are divided by it', strict=True)

  def __init__(self, cfg, key_dim, *, rngs):
    super().__init__(cfg, key_dim, rngs=rngs)
    self.temperature = cfg.logit_temperature

  def logits(self, feat, emb, dropout_key=None):
    return super().logits(feat, emb, dropout_key) / self.temperature
