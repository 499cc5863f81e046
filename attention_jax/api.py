"""Reload a trained run in one call and translate, with attention weights.

  t = attention_jax.load('runs/dates_additive')      # best checkpoint (or step=N)
  t.translate(['22. November 2026'])                  # -> ['2026-11-22']
  out, weights, src_tokens, tgt_tokens = t.attend('Nov 3, 1999')   # weights [T, S]

Input policy (translate and attend): any str is accepted. Empty or whitespace-only strings
give '' (nothing to translate). Unknown and control characters map to the UNK token.
Inputs longer than the run's training maximum (data.max_src_len tokens) are translated
with a RuntimeWarning naming how many and how long (attention has no length limit, but
quality beyond the training lengths is not what was measured); only the `location` score,
whose output layer has model.max_src_len positions, rejects longer inputs with a ValueError.
Non-strings raise TypeError naming the argument. Large batches are decoded in chunks of
`chunk_size` sentences (sorted by length, so each chunk pads little): memory stays bounded.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Sequence

import jax
import ml_collections
import numpy as np

from attention_jax import checkpoint as ckpt_lib
from attention_jax import data as data_lib
from attention_jax import decode as decode_lib
from attention_jax import train as train_lib
from attention_jax.model import ModelConfig


class Translator:
  """A trained model with its tokenizers; greedy decoding, jit-compiled per length bucket."""

  def __init__(self, mcfg: ModelConfig, graphdef, params, src_tok, tgt_tok, factor: float,
               step: int, max_train_len: int | None = None, chunk_size: int = 256):
    self.config, self.step = mcfg, step
    self.max_train_len, self.chunk_size = max_train_len, chunk_size
    self.src_tok, self.tgt_tok = src_tok, tgt_tok
    self.graphdef, self.params, self._factor = graphdef, params, factor
    self._predict = jax.jit(lambda p, src, n: train_lib.predict_step(graphdef, p, src, n),
                            static_argnums=2)

  def _encode(self, texts: Sequence[str]) -> np.ndarray:
    ids = [self.src_tok.encode(t) + [data_lib.EOS] for t in texts]
    s = max(8, -(-max(len(x) for x in ids) // 8) * 8)        # bucket: a multiple of 8
    src = np.zeros((len(ids), s), np.int32)
    for i, x in enumerate(ids):
      src[i, :len(x)] = x
    return src

  def _run(self, texts):
    src = self._encode(texts)
    tokens, weights = jax.device_get(self._predict(
        self.params, src, decode_lib.max_output_len(src.shape[1], self._factor)))
    return src, tokens, weights

  def _check_lengths(self, texts: Sequence[str]) -> None:
    lengths = [len(self.src_tok.encode(t)) for t in texts]
    longest = max(lengths, default=0)
    if self.config.score == 'location' and longest + 1 > self.config.max_src_len:
      raise ValueError(f"score 'location' scores at most model.max_src_len="
                       f'{self.config.max_src_len} source positions; an input has {longest} '
                       f'tokens (+ EOS)')
    if self.max_train_len is not None and longest > self.max_train_len:
      n = sum(x > self.max_train_len for x in lengths)
      warnings.warn(f'{n} input(s) longer than the training maximum of {self.max_train_len} '
                    f'tokens (longest {longest}); translating them anyway', RuntimeWarning,
                    stacklevel=3)

  def translate(self, texts: Sequence[str]) -> list[str]:
    """list of source strings -> list of output strings (greedy), in input order."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
      raise TypeError(f'translate(texts): texts must be a list of str, got '
                      f'{type(texts).__name__}')
    for i, t in enumerate(texts):
      if not isinstance(t, str):
        raise TypeError(f'translate(texts): texts[{i}] is {type(t).__name__}, not str')
    out = [''] * len(texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    self._check_lengths([texts[i] for i in todo])
    todo.sort(key=lambda i: len(texts[i]))          # similar lengths share a chunk
    for c in range(0, len(todo), self.chunk_size):
      rows = todo[c:c + self.chunk_size]
      _, tokens, _ = self._run([texts[i] for i in rows])
      for i, row in zip(rows, tokens):
        out[i] = self.tgt_tok.decode(row.tolist())
    return out

  def attend(self, text: str):
    """text -> (output str, weights [T, S] float32, source tokens, output tokens).

    An empty or whitespace-only text gives ('', an empty [0, 0] array, [], [])."""
    if not isinstance(text, str):
      raise TypeError(f'attend(text): text must be a str, got {type(text).__name__}')
    if not text.strip():
      return '', np.zeros((0, 0), np.float32), [], []
    self._check_lengths([text])
    src, tokens, weights = self._run([text])
    src_tokens = self.src_tok.pieces(text) + ['</s>']
    ids = tokens[0].tolist()
    n = ids.index(data_lib.EOS) + 1 if data_lib.EOS in ids else len(ids)
    tgt_tokens = [self.tgt_tok.id_to_piece(i) for i in ids[:n]]
    return (self.tgt_tok.decode(ids), weights[0, :n, :len(src_tokens)], src_tokens,
            tgt_tokens)


def load(workdir: str, step: int | None = None) -> Translator:
  """Rebuilds the model of a run from its saved config and tokenizers, and restores the best
  checkpoint (or `step`, from the latest/best checkpoints). Fails with CheckpointError
  naming the problem when the workdir, config or checkpoint is missing or corrupt."""
  if not os.path.isdir(workdir):
    raise ckpt_lib.CheckpointError(f'no such workdir: {workdir!r}')
  try:
    with open(os.path.join(workdir, 'model_config.json')) as f:
      mcfg = ModelConfig.from_dict(json.load(f))
    with open(os.path.join(workdir, 'config.json')) as f:
      train_cfg = ml_collections.ConfigDict(json.load(f)['train'])
    factor = float(train_cfg.max_decode_factor)
    with open(os.path.join(workdir, 'config.json')) as f:
      max_train_len = json.load(f).get('data', {}).get('max_src_len')
    src_tok, tgt_tok = data_lib.load_tokenizers(os.path.join(workdir, 'tokenizers'))
  except (OSError, ValueError, KeyError) as e:
    raise ckpt_lib.CheckpointError(f'{workdir!r} is not a usable attention_jax workdir: '
                                   f'{type(e).__name__}: {e}') from e
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  if step is None:
    manager, step = ckpts.best, ckpts.best.best_step()
    if step is None:
      manager, step = ckpts.latest, ckpts.latest.latest_step()
  else:
    manager = next((m for m in (ckpts.best, ckpts.latest) if step in m.all_steps()), None)
    if manager is None:
      raise ckpt_lib.CheckpointError(
          f'no checkpoint at step {step} in {workdir!r}; available: '
          f'{sorted(set(ckpts.best.all_steps()) | set(ckpts.latest.all_steps()))}')
  if step is None:
    raise ckpt_lib.CheckpointError(f'no checkpoint in {workdir!r}/checkpoints')
  graphdef, template = train_lib.init_state(mcfg, train_lib.make_optimizer(train_cfg), 0)
  try:
    params = ckpt_lib.restore(manager, step, template)[0]['params']
  finally:
    ckpts.close()
  return Translator(mcfg, graphdef, params, src_tok, tgt_tok, factor, step, max_train_len)
