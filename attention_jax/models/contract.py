"""The model contract: what training, decoding, evaluation and attribution ask of a model.

aj.Seq2Seq (model.arch='rnn') and aj.Transformer implement it; an image encoder
(model.encoder = 'cnn' | 'vit') is the source side of either, so every combination is one of
the two. A new architecture subclasses EncoderDecoder and implements the methods that raise
NotImplementedError; greedy and beam search (greedy.py, beam.py), evaluation, heatmaps and
attribution then work unchanged (the same split as the Flax WMT example's encode / decode /
tokens_to_logits). The defaults are those of a model whose decoding carry has a fixed size.

Shapes: src [B, S] int32 token ids (0 = padding) or images [B, H, W(, C)] (padding -1; S is
then the encoder's grid cells), tgt_in [B, T] int32 (BOS first), V the target vocabulary.
"""

from __future__ import annotations

from typing import Any

import jax


class EncoderDecoder:
  """The methods every model implements, and defaults: a mixin of the models (they are
  flax.nnx.Module subclasses besides), or the base of a plain test double."""

  def __call__(self, src: jax.Array, tgt_in: jax.Array, *,
               dropout_key: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Teacher forcing -> (logits [B, T, V] float32, attention weights [B, T, S] float32);
    dropout on when dropout_key is given."""
    logits, read = self.forward(src, tgt_in, dropout_key=dropout_key)
    return logits, read.weights

  def forward(self, src: jax.Array, tgt_in: jax.Array, *, dropout_key: jax.Array | None = None,
              sample_key: jax.Array | None = None, source_shift: jax.Array | None = None,
              memory_shift: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """-> (logits [B, T, V] float32, a read whose .weights are [B, T, S]); source_shift /
    memory_shift [B, S, D]: added to the embedded source / the encoder's output (attribution
    takes gradients there); sample_key: hard attention's samples."""
    raise NotImplementedError

  def source_mask(self, src: jax.Array) -> jax.Array:
    """-> [B, S] bool: the memory positions that are real (not padding)."""
    raise NotImplementedError

  def encode(self, src: jax.Array) -> tuple[jax.Array, jax.Array]:
    """-> (annotations [B, S, K] the decoder attends over, mask [B, S] bool)."""
    raise NotImplementedError

  def start(self, src: jax.Array, max_len: int) -> tuple[Any, Any]:
    """-> (decoding carry for max_len output positions, memory) for `step`."""
    raise NotImplementedError

  def step(self, carry: Any, y_prev: jax.Array, mem: Any) -> tuple[Any, jax.Array, jax.Array]:
    """y_prev [N] int32 -> (carry, log-probabilities [N, V] float32, weights [N, S] float32).
    Beam search reorders every leaf of the carry and memory along axis 0."""
    raise NotImplementedError

  def cache_lengths(self, max_len: int, shortest: int | None = None,
                    most: int | None = None) -> tuple[int, ...]:
    """The carry lengths decoding grows through (greedy.segments), the last max_len, at most
    `most` of them, none under `shortest` (None: the model's defaults); a model whose carry
    has a fixed size decodes in one loop."""
    del shortest, most
    return (max_len,)

  def resize(self, carry: Any, length: int) -> Any:
    """The carry for outputs up to `length` positions (with cache_lengths)."""
    del length
    return carry

  def layer_weights(self, read: Any) -> jax.Array | None:
    """forward's read -> every decoder layer's cross-attention per head [B, N, H, T, S]
    (a Transformer's), or None for a model with one attention."""
    del read
    return None
