"""What the benchmark runs: the shapes (configs), the run settings, the synthetic
sentences and batches, and the experiment config of one (shape, score, decoder)."""

from __future__ import annotations

import dataclasses

import numpy as np

from attention_jax.data import batching
from attention_jax.models.rnn_decoder import DECODERS
from experiments.bench.measure import MATMUL_N
from experiments.configs import common


@dataclasses.dataclass(frozen=True)
class Shape:
  """One benchmark configuration: model sizes (LSTM cells, one bidirectional encoder layer)
  and the synthetic data's vocabulary, batch and length range (tokens, before EOS)."""
  emb_dim: int
  enc_hidden: int       # per direction; the annotations are 2 x enc_hidden
  dec_hidden: int
  attn_dim: int
  vocab: int            # both sides
  batch: int
  min_len: int
  max_len: int
  d_model: int = 128    # the Transformer of this size (decoder 'transformer'): 3+3 layers
  ff_dim: int = 512

  @property
  def padded(self) -> int:
    """The padded length S = T (longest sentence + EOS, rounded up to a multiple of 8)."""
    return batching.round_up(self.max_len + 1)


CONFIGS = {
    'char': Shape(emb_dim=128, enc_hidden=128, dec_hidden=256, attn_dim=256, vocab=32,
                  batch=64, min_len=50, max_len=70, d_model=128, ff_dim=512),
    'base': Shape(emb_dim=256, enc_hidden=256, dec_hidden=512, attn_dim=512, vocab=8000,
                  batch=64, min_len=30, max_len=50, d_model=256, ff_dim=1024),
    # long sentences (a character-level paragraph): where a Transformer's attention and its
    # padding show; batch 32 keeps about as many tokens per batch as char's 64 x 2
    'long': Shape(emb_dim=128, enc_hidden=128, dec_hidden=256, attn_dim=256, vocab=32,
                  batch=32, min_len=150, max_len=250, d_model=128, ff_dim=512),
    # a few seconds in all; for tests of this script
    'tiny': Shape(emb_dim=16, enc_hidden=16, dec_hidden=32, attn_dim=32, vocab=20, batch=8,
                  min_len=4, max_len=10, d_model=16, ff_dim=32),
}
# the decoders benchmarked: the RNN decoders, and 'transformer' (model.arch; its score is the
# cross-attention's, with scaled_dot self-attention, 4 heads, 3+3 layers)
ARCHITECTURES = sorted(DECODERS) + ['transformer']


@dataclasses.dataclass(frozen=True)
class Settings:
  warmup: int = 1           # untimed train steps after compiling
  windows: int = 5          # timed windows; the median counts
  steps: int = 1            # train steps per timed window
  decode_windows: int = 3   # timed decoding calls (one batch each) after an untimed first
                            # one; the median counts
  seed: int = 0
  batch: int | None = None  # sentences per batch (None: the config's), ours and the peer's
  input_feeding: bool = True  # Luong decoders (ours and OpenNMT-py's `input_feed`)
  matmul_n: int = MATMUL_N  # the n x n float32 matmul measured as the machine's ceiling
  pairs: str = 'all'        # which (config, decoder, score) of the selection run: PAIRS

  def shape(self, name: str) -> 'Shape':
    """The config `name`'s shape with this run's batch size."""
    return dataclasses.replace(CONFIGS[name], batch=self.batch or CONFIGS[name].batch)


def _quick_pair(config: str, decoder: str, score: str) -> bool:
  """--quick: the RNN decoders with every selected score but scaled_dot, on every selected
  config but long; the Transformer with scaled_dot (OpenNMT-py's one attention) on all."""
  if decoder == 'transformer':
    return score == 'scaled_dot'
  return config != 'long' and score != 'scaled_dot'


PAIRS = {'all': lambda config, decoder, score: True, 'quick': _quick_pair}


# 3 steps per window: single-step windows varied by 30% between runs on a quiet machine
QUICK = Settings(warmup=1, windows=2, steps=3, decode_windows=1, pairs='quick')


def sentences(shape: Shape, seed: int) -> tuple[list[list[int]], list[list[int]]]:
  """shape.batch random (source, target) token-id sentences, ids in [4, vocab) (0-3 are
  PAD, BOS, EOS, UNK), lengths uniform in [min_len, max_len], independently per side."""
  rng = np.random.default_rng(seed)
  def side():
    return [rng.integers(4, shape.vocab, size=int(n)).tolist()
            for n in rng.integers(shape.min_len, shape.max_len + 1, size=shape.batch)]
  return side(), side()


def make_batch(shape: Shape, seed: int) -> dict[str, np.ndarray]:
  """The package's own batch format (batching.make_batch), padded to (padded, padded)."""
  src, tgt = sentences(shape, seed)
  enc = batching.TokenizedSplit(batching.Ragged.from_lists(src), batching.Ragged.from_lists(tgt))
  return batching.make_batch(enc, range(shape.batch), (shape.padded, shape.padded),
                             shape.batch)


def experiment_config(shape: Shape, score: str, decoder: str, seed: int,
                      input_feeding: bool = True):
  """base_config() with this shape's model: LSTM cells, one bidirectional encoder layer,
  input feeding (Luong) unless input_feeding=False, dropout as in base_config; the batch
  split over the process's devices (shard_map) when it has several."""
  cfg = common.base_config()
  cfg.seed = seed
  cfg.parallel = 'auto'
  cfg.data.batch_size = shape.batch
  m = cfg.model
  if decoder == 'transformer':
    m.arch, m.cross_attention_score = 'transformer', score
    m.d_model, m.ff_dim, m.heads, m.transformer_layers = shape.d_model, shape.ff_dim, 4, 3
    m.max_positions = max(m.max_positions, 2 * shape.padded)
    # the work of OpenNMT-py's Transformer recipe (bench/peer.py): attention dropout and
    # label smoothing 0.1 (dropout 0.1 as above)
    m.attention_dropout, cfg.train.label_smoothing = 0.1, 0.1
    return cfg
  m.cell, m.decoder, m.score = 'lstm', decoder, score
  m.emb_dim, m.enc_hidden, m.enc_layers, m.bidirectional = (shape.emb_dim, shape.enc_hidden,
                                                            1, True)
  m.dec_hidden, m.dec_layers, m.attn_dim = shape.dec_hidden, 1, shape.attn_dim
  m.input_feeding = input_feeding
  m.max_src_len = max(m.max_src_len, shape.padded)
  return cfg
