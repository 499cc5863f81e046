"""Ensembles: several trained runs decoded as one model, as OpenNMT-py and Marian decode them:
greedy and beam search on the mean of the members' log-probabilities at every step, attention
weights averaged (for heatmaps and alignment accuracy).

  t = attention_jax.load(['runs/rev/seed_1', 'runs/rev/seed_2', 'runs/rev/seed_3'])
  t.translate(['a b c'], beam=5)                 # a Translator: translate / attend / decode
  attention_jax.load('runs/rev/seed_1')          # one run (a path, or a list of one): loading.load

The score is not renormalised (OpenNMT-py's EnsembleDecoder and Marian average log-probabilities
as they are): a step gives mean_m log p_m(y | ...), whose exponentials sum to at most 1 (the
geometric mean of distributions), and a hypothesis's beam score is the sum of those over its
positions divided by the length penalty (beam.py). Ensemble.forward, the teacher-forced pass,
returns the same per-position means as its logits, so it scores a hypothesis exactly as decoding
does; the loss evaluate reports from those logits (a log-softmax over them) is the cross-entropy
of the renormalised product of the members' distributions.

Members may differ in architecture (an RNN and a Transformer) but must share their source and
target tokenizers (byte-identical, checkpoint.fingerprint); runs whose tokenizers differ are
refused in one line naming both. Image runs are refused (their grids and image readers would
have to agree too). The first run's config stands for the ensemble where one value is needed
(the output-length factor, the data section evaluate reads, the training maximum length).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.loaded import loading, translator
from attention_jax.models import attention, contract, sources
from attention_jax.models.model import ModelConfig
from attention_jax.state import checkpoint as ckpt_lib


class EnsembleRead(NamedTuple):
  """Ensemble.forward's read: the members' mean weights and each member's own read."""
  weights: jax.Array   # [B, T, S] float32, the mean of the members' weights
  members: tuple       # each member's read, in member order


def _mean(xs: Sequence[jax.Array]) -> jax.Array:
  """The mean of same-shaped float32 arrays (one array: itself, exactly)."""
  return jnp.mean(jnp.stack([x.astype(jnp.float32) for x in xs]), axis=0)


class Ensemble(nnx.Module, contract.EncoderDecoder):
  """Several models as one EncoderDecoder (contract.py): `step` gives the mean of the members'
  log-probabilities [N, V] (not renormalised) and of their weights [N, S]; `start` the
  members' carries and memories as tuples, in member order. Decoding loops restart at the
  union of the members' cache_lengths (with Transformers: their KV cache segments, the same
  for every Transformer), and `resize` resizes every member's carry there (an RNN's: as is).
  The members are NNX modules held in an nnx.List, so nnx.split / nnx.merge (inside jit,
  inference.make_decoder) see their parameters as one state: {'members': {0: ..., 1: ...}}.
  Members must read the same sources (token ids of one source vocabulary): the memory length S
  and its mask are the first member's."""

  def __init__(self, members: Sequence[nnx.Module]):
    members = list(members)
    if not members:
      raise ValueError('an ensemble needs at least one model, got none')
    self.members = nnx.List(members)

  def source_mask(self, src: jax.Array) -> jax.Array:
    return self.members[0].source_mask(src)

  def encode(self, src: jax.Array):
    raise NotImplementedError('an ensemble has no single memory: encode with each member '
                              '(ensemble.members[i].encode)')

  def forward(self, src: jax.Array, tgt_in: jax.Array, *, dropout_key: jax.Array | None = None,
              sample_key: jax.Array | None = None, source_shift: jax.Array | None = None,
              memory_shift: jax.Array | None = None) -> tuple[jax.Array, EnsembleRead]:
    """Teacher forcing -> (mean of the members' log-probabilities [B, T, V] float32, as the
    logits; EnsembleRead with the mean weights [B, T, S]). Keys are split per member."""
    if source_shift is not None or memory_shift is not None:
      raise ValueError('attribution of an ensemble is not supported (its members embed the '
                       'source in spaces of their own): attribute one member')
    n = len(self.members)
    split = lambda key: [None] * n if key is None else [   # a key or an attention.Sample
        jax.tree.map(lambda x: x[i], attention.split_sample(key, n)) for i in range(n)]
    logps, reads = [], []
    for m, dk, sk in zip(self.members, split(dropout_key), split(sample_key)):
      logits, read = m.forward(src, tgt_in, dropout_key=dk, sample_key=sk)
      logps.append(jax.nn.log_softmax(logits.astype(jnp.float32)))
      reads.append(read)
    return _mean(logps), EnsembleRead(_mean([r.weights for r in reads]), tuple(reads))

  def start(self, src: jax.Array, max_len: int) -> tuple[tuple, tuple]:
    """-> ((each member's carry), (each member's memory))."""
    starts = [m.start(src, max_len) for m in self.members]
    return tuple(c for c, _ in starts), tuple(mem for _, mem in starts)

  def step(self, carry: tuple, y_prev: jax.Array, mem: tuple):
    """y_prev [N] -> (carries, mean log-probabilities [N, V] float32, mean weights [N, S])."""
    outs = [m.step(c, y_prev, mm) for m, c, mm in zip(self.members, carry, mem)]
    return (tuple(o[0] for o in outs), _mean([o[1] for o in outs]),
            _mean([o[2] for o in outs]))

  def cache_lengths(self, max_len: int, shortest: int | None = None,
                    most: int | None = None) -> tuple[int, ...]:
    """The union of the members' (each ends at max_len): (max_len,) for RNNs alone."""
    return tuple(sorted({e for m in self.members
                         for e in m.cache_lengths(max_len, shortest, most)}))

  def resize(self, carry: tuple, length: int) -> tuple:
    return tuple(m.resize(c, length) for m, c in zip(self.members, carry))

  def layer_weights(self, read: EnsembleRead) -> None:
    """None: members' layers and heads need not match; attend_heads gives the mean weights
    as one layer and head, [1, 1, T, S]."""
    del read
    return None


class EnsembleMismatch(ValueError):
  """Runs that cannot be decoded together (other tokenizers, image sources)."""


class EnsembleTranslator(translator.Translator):
  """A Translator over an Ensemble of loaded runs: translate, attend, attend_heads and decode
  as for one run. `members`: the runs' own Translators; `workdirs`: their paths; `step`: the
  tuple of their checkpoint steps. Saliency (attribution) is refused."""

  def __init__(self, members: Sequence[translator.Translator], workdirs: Sequence[str]):
    first = members[0]
    model = Ensemble([nnx.merge(t.graphdef, t.params) for t in members])
    graphdef, state = nnx.split(model)
    super().__init__(first.config, graphdef, nnx.to_pure_dict(state), first.src_tok,
                     first.tgt_tok, first._factor, tuple(t.step for t in members),
                     first.max_train_len, run_config=first.run_config)
    self.members, self.workdirs = list(members), [str(w) for w in workdirs]

  @property
  def model_configs(self) -> tuple[ModelConfig, ...]:
    return tuple(t.config for t in self.members)

  def attributor(self, method: str, options: Any):
    raise ValueError(f'saliency of an ensemble ({len(self.members)} runs) is not supported: '
                     'load one run (attention_jax.load(workdir)) to attribute it')

  def saliency(self, source, method: str = 'gradient', *args, **kwargs):
    del source, args, kwargs
    return self.attributor(method, None)


def _tokenizer_dirs(workdir: str) -> tuple[str, str]:
  tok = workdir_lib.Run(workdir).tokenizers_dir
  return os.path.join(tok, 'src'), os.path.join(tok, 'tgt')


def check_compatible(workdirs: Sequence[str]) -> None:
  """Raises EnsembleMismatch, one line naming both runs, if a run's source or target tokenizer
  differs from the first run's (byte for byte). Runs whose tokenizers cannot be read are left
  to loading.load, which names what is wrong."""
  def describe(directory: str) -> str:
    try:
      tok = data_lib.load_tokenizer(directory)
      return f'{tok.kind}, {tok.vocab_size} symbols'
    except (OSError, ValueError, KeyError):
      return 'unreadable'
  dirs = [_tokenizer_dirs(w) for w in workdirs]
  for w, d in zip(workdirs[1:], dirs[1:]):
    for side, a, b in zip(('source', 'target'), dirs[0], d):
      if not (os.path.isdir(a) and os.path.isdir(b)):
        continue
      if ckpt_lib.fingerprint(a) != ckpt_lib.fingerprint(b):
        raise EnsembleMismatch(
            f'cannot ensemble {workdirs[0]!r} and {w!r}: their {side} tokenizers differ '
            f'({describe(a)} vs {describe(b)}); an ensemble averages log-probabilities over '
            'one vocabulary')


def load_ensemble(workdirs: Sequence[str], step: int | Sequence[int | None] | None = None,
                  compilation_cache: str | None = None) -> EnsembleTranslator:
  """Loads each run with loading.load (its best checkpoint, or `step`: one step for every run, or
  a list of steps, one per run) and returns their ensemble's Translator (even of one run; a run
  may be given twice). Refused, in one line each: no runs, runs whose source or target
  tokenizers differ (naming both), image runs."""
  if isinstance(workdirs, (str, bytes, os.PathLike)) or not isinstance(workdirs, Sequence):
    raise TypeError(f'load_ensemble takes a list of run directories, got '
                    f'{type(workdirs).__name__}')
  workdirs = [os.fspath(w) for w in workdirs]
  if not workdirs:
    raise ValueError('an ensemble needs at least one run, got an empty list of workdirs')
  steps = [step] * len(workdirs) if step is None or isinstance(step, int) else list(step)
  if len(steps) != len(workdirs):
    raise ValueError(f'{len(steps)} steps for {len(workdirs)} runs: give one step, or one per run')
  for w in workdirs:
    if not os.path.isdir(w):
      raise ckpt_lib.CheckpointError(f'no such workdir: {w!r}')
  check_compatible(workdirs)
  members = [loading.load(w, step=s, compilation_cache=compilation_cache)
             for w, s in zip(workdirs, steps)]
  for w, t in zip(workdirs, members):
    if not sources.of(t.config).ensembles:
      raise EnsembleMismatch(f'cannot ensemble {w!r}: it reads {t.config.source}; ensembles of '
                             'image runs are not supported')
  return EnsembleTranslator(members, workdirs)


def load(workdir: str | Sequence[str], step: int | Sequence[int | None] | None = None,
         compilation_cache: str | None = None) -> translator.Translator:
  """attention_jax.load: one run (a path, or a list of one) -> loading.load, exactly; several
  runs (a list or tuple) -> their ensemble (load_ensemble)."""
  if isinstance(workdir, (str, os.PathLike)):
    return loading.load(os.fspath(workdir), step=step, compilation_cache=compilation_cache)
  if isinstance(workdir, Sequence) and len(workdir) == 1 and not isinstance(workdir, bytes):
    one = step[0] if isinstance(step, Sequence) and len(step) == 1 else step
    return load(workdir[0], step=one, compilation_cache=compilation_cache)
  return load_ensemble(workdir, step=step, compilation_cache=compilation_cache)
