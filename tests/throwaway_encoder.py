"""A throwaway encoder with a field of its own, added the way a researcher adds one: one class,
one registry line and its Fields, in this file alone (tests/test_new_parts.py trains it on
every route).

  model.encoder='scaled_rnn'  model.annotation_scale=0.5
"""

import dataclasses

from attention_jax import fields
from attention_jax.models import rnn_encoder
from attention_jax.models.encoders import register_encoder


@register_encoder('scaled_rnn')
class ScaledRNN(rnn_encoder.Encoder):
  """The RNN encoder with its annotations [B, S, K] multiplied by model.annotation_scale."""

  @dataclasses.dataclass(frozen=True)
  class Fields(rnn_encoder.Encoder.Fields):
    annotation_scale: float = fields.number(1.0, 'the annotations are multiplied by it',
                                            strict=True)

  @classmethod
  def build(cls, cfg, *, dim, rngs):
    encoder = super().build(cfg, dim=dim, rngs=rngs)
    encoder.scale = cfg.annotation_scale
    return encoder

  def __call__(self, src, **kwargs):
    enc = super().__call__(src, **kwargs)
    return enc._replace(annotations=enc.annotations * self.scale)
