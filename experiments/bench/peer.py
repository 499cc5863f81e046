"""OpenNMT-py as a peer: trains and translates with it on the benchmark's sentences
(a venv with OpenNMT-py; see experiments/benchmark.py), pinned to given CPUs."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import time
from typing import Any

from experiments.bench.measure import pinned
from experiments.bench.workload import Shape, sentences


ONMT_ATTENTION = {'general': 'general', 'additive': 'mlp', 'dot': 'dot'}
# OpenNMT-py's Transformer has one attention: scaled dot product (its default
# `self_attn_type: scaled-dot-flash`, PyTorch's fused scaled_dot_product_attention)
ONMT_TRANSFORMER_SCORES = ('scaled_dot',)
PEER_CORPUS_BATCHES = 32


def _peer_text(sentences: list[list[int]]) -> str:
  """Token-id sentences as OpenNMT-py text lines: id i is the word `t{i}`."""
  return '\n'.join(' '.join(f't{i}' for i in ids) for ids in sentences) + '\n'


def _model_options(shape: Shape, score: str, arch: str, input_feeding: bool) -> dict[str, Any]:
  """OpenNMT-py's model and optimizer options for our benchmark model of this shape."""
  if arch == 'transformer':
    if score not in ONMT_TRANSFORMER_SCORES:
      raise ValueError(f"OpenNMT-py's Transformer has no {score!r} attention; valid: "
                       f'{", ".join(ONMT_TRANSFORMER_SCORES)}')
    # Vaswani et al.'s recipe as OpenNMT-py documents it (pre-norm layers, sinusoidal
    # positions, label smoothing 0.1, Adam beta2 0.998, noam schedule), at our sizes
    return {'encoder_type': 'transformer', 'decoder_type': 'transformer',
            'enc_layers': 3, 'dec_layers': 3, 'hidden_size': shape.d_model,
            'word_vec_size': shape.d_model, 'transformer_ff': shape.ff_dim, 'heads': 4,
            'position_encoding': True, 'dropout': [0.1], 'attention_dropout': [0.1],
            'label_smoothing': 0.1, 'optim': 'adam', 'adam_beta2': 0.998,
            'decay_method': 'noam', 'warmup_steps': 4000, 'learning_rate': 2.0,
            'param_init': 0.0, 'param_init_glorot': True, 'max_grad_norm': 0.0}
  if arch != 'rnn':
    raise ValueError(f"unknown peer arch {arch!r}; valid: rnn, transformer")
  return {'encoder_type': 'brnn', 'decoder_type': 'rnn', 'rnn_type': 'LSTM',
          'enc_layers': 1, 'dec_layers': 1, 'enc_hid_size': 2 * shape.enc_hidden,
          'dec_hid_size': shape.dec_hidden, 'word_vec_size': shape.emb_dim,
          'global_attention': ONMT_ATTENTION[score], 'input_feed': int(input_feeding),
          'dropout': [0.1], 'optim': 'adam', 'learning_rate': 0.002}


def train_config(venv: str, shape: Shape, score: str, steps: int, seed: int, workdir: str,
                 input_feeding: bool = True, arch: str = 'rnn') -> str:
  """Writes onmt_train's corpus, vocabularies and config (JSON, which is YAML) for our
  benchmark model of this shape into workdir; -> the config's path. Its last step's checkpoint
  is `workdir/model_step_{steps}.pt`."""
  binary = os.path.join(venv, 'bin', 'onmt_train')
  if not os.path.exists(binary):
    raise FileNotFoundError(f'{binary} not found: install OpenNMT-py into {venv} (see the '
                            f'docstring of experiments/benchmark.py)')
  os.makedirs(workdir, exist_ok=True)
  src, tgt = [], []
  for k in range(PEER_CORPUS_BATCHES):
    s, t = sentences(shape, seed + k)
    src += s
    tgt += t
  for name, side in (('src', src), ('tgt', tgt)):
    with open(os.path.join(workdir, f'train.{name}'), 'w') as f:
      f.write(_peer_text(side))
    with open(os.path.join(workdir, f'vocab.{name}'), 'w') as f:
      f.write(''.join(f't{i}\t1\n' for i in range(4, shape.vocab)))
  report = max(steps // 4, 1)
  cfg = {
      'save_data': os.path.join(workdir, 'run'),
      'save_model': os.path.join(workdir, 'model'),
      'src_vocab': os.path.join(workdir, 'vocab.src'),
      'tgt_vocab': os.path.join(workdir, 'vocab.tgt'),
      'data': {'corpus_1': {'path_src': os.path.join(workdir, 'train.src'),
                            'path_tgt': os.path.join(workdir, 'train.tgt')}},
      'src_seq_length': shape.padded * 2, 'tgt_seq_length': shape.padded * 2,
      **_model_options(shape, score, arch, input_feeding),
      'batch_size': shape.batch, 'batch_type': 'sents',
      'train_steps': steps, 'report_every': report,
      # the last step's checkpoint is what peer_beam_sentences_per_s translates with
      'valid_steps': 10 * steps, 'save_checkpoint_steps': steps, 'seed': seed,
      # one bucket = the whole corpus: with the default (262,144 examples) OpenNMT-py
      # re-reads a small corpus hundreds of times before its first step
      'num_workers': 0, 'bucket_size': PEER_CORPUS_BATCHES * shape.batch,
  }
  path = os.path.join(workdir, 'config.yaml')
  with open(path, 'w') as f:
    json.dump(cfg, f)   # JSON is YAML
  return path


def _run_onmt_train(venv: str, config: str, workdir: str, threads: int,
                    cpus: str | None) -> str:
  """Runs `onmt_train -config config` on `threads` OpenMP/MKL threads, pinned to `cpus` ->
  its log (stdout and stderr); raises with the log's last lines if it fails."""
  env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)}
  proc = subprocess.run(pinned([os.path.join(venv, 'bin', 'onmt_train'), '-config', config],
                               cpus), capture_output=True, text=True, cwd=workdir, env=env,
                        check=False)
  log = proc.stdout + proc.stderr
  if proc.returncode:
    raise RuntimeError(f'onmt_train failed (exit {proc.returncode}); last lines:\n'
                       + '\n'.join(log.splitlines()[-20:]))
  return log


def peer_tokens_per_s(venv: str, shape: Shape, score: str, steps: int, seed: int,
                      workdir: str, threads: int = 1, cpus: str | None = None,
                      input_feeding: bool = True, arch: str = 'rnn') -> dict[str, Any]:
  """Trains OpenNMT-py on the same synthetic sentences and returns its target tokens/s
  (as it logs them, data loading included): the median of its report windows after the
  first. arch 'rnn': brnn LSTM encoder, rnn LSTM decoder with input feeding unless
  input_feeding=False (i.e. Luong), global attention `ONMT_ATTENTION[score]`; arch
  'transformer': 3+3 layers of shape.d_model, 4 heads, FF shape.ff_dim (score scaled_dot).
  `threads`: OMP/MKL threads of PyTorch (on this 2-core machine, with other work running,
  2 OpenMP threads made it 10-20x slower than 1)."""
  path = train_config(venv, shape, score, steps, seed, workdir, input_feeding, arch)
  t0 = time.perf_counter()
  log = _run_onmt_train(venv, path, workdir, threads, cpus)
  wall = time.perf_counter() - t0
  rates = [float(m.group(2)) for m in re.finditer(r'(\d+)/\s*(\d+) tok/s', log)]
  if not rates:
    raise RuntimeError('onmt_train logged no tok/s; last lines:\n'
                       + '\n'.join(log.splitlines()[-20:]))
  kept = rates[1:] or rates
  return {'arch': arch,
          'attention': ONMT_ATTENTION[score] if arch == 'rnn' else 'scaled-dot-flash',
          'tokens_per_s': statistics.median(kept),
          'report_windows': rates, 'steps': steps, 'threads': threads, 'cpus': cpus,
          'wall_s': wall,
          'checkpoint': os.path.join(workdir, f'model_step_{steps}.pt')}


def peer_beam_sentences_per_s(venv: str, checkpoint: str, src: list[list[int]], length: int,
                              workdir: str, threads: int = 1, beam_size: int = 5,
                              repeats: int = 3, cpus: str | None = None) -> dict[str, Any]:
  """OpenNMT-py's beam search (onmt_translate) on the sentences `src`, one batch of len(src),
  with -min_length = -max_length = `length`: like our EOS-suppressed decoding, every output
  has `length` tokens. Timed as ours is, after a first batch: one run translates 1 batch,
  another 1 + `repeats` (the sentences repeated), and the difference of the two translation
  times (as OpenNMT-py reports them: its translation loop only, model loading and process
  start excluded) gives the sentences/s of the `repeats` batches after the first."""
  def translate(batches: int) -> tuple[float, list[int]]:
    """-> (seconds translating, output lengths) of `batches` batches."""
    path, pred = (os.path.join(workdir, f'beam{batches}.{e}') for e in ('src', 'pred'))
    with open(path, 'w') as f:
      f.write(_peer_text(src * batches))
    # OpenNMT-py 3.5.1 pickles its options into the checkpoint, which torch >= 2.6 refuses
    # to load by default (weights_only); the checkpoint was written by the run just before
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads),
           'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'}
    proc = subprocess.run(pinned(
        [os.path.join(venv, 'bin', 'onmt_translate'), '-model', checkpoint, '-src', path,
         '-output', pred, '-beam_size', str(beam_size), '-batch_size', str(len(src)),
         '-min_length', str(length), '-max_length', str(length), '-report_time', '-gpu',
         '-1'], cpus), capture_output=True, text=True, cwd=workdir, env=env, check=False)
    log = proc.stdout + proc.stderr
    ms = re.search(r'Average translation time \(ms\): ([\d.]+)', log)
    if proc.returncode or not ms:
      raise RuntimeError(f'onmt_translate failed (exit {proc.returncode}); last lines:\n'
                         + '\n'.join(log.splitlines()[-20:]))
    with open(pred) as f:
      out_lens = [len(line.split()) for line in f]
    return float(ms.group(1)) * len(out_lens) / 1e3, out_lens

  first_s, _ = translate(1)
  total_s, out_lens = translate(1 + repeats)
  return {'beam_size': beam_size, 'sentences_per_s': repeats * len(src) / (total_s - first_s),
          'first_batch_s': first_s, 'sentences': len(out_lens),
          'mean_output_len': statistics.mean(out_lens)}


def peer_profile(venv: str, shape: Shape, score: str, arch: str, what: str, workdir: str,
                 calls: int = 5, seed: int = 0, input_feeding: bool = True,
                 cpus: str | None = '0') -> dict[str, Any]:
  """OpenNMT-py's time per PyTorch operation (experiments/bench/peer_profile.py, run by the
  peer venv's Python on 1 thread, pinned to `cpus`): 'train', its train step on the
  benchmark's sentences (`calls` steps profiled after 3 untimed ones); 'beam5', beam-5
  translation of one batch of the benchmark's sources to the padded length (as
  peer_beam_sentences_per_s), after training 3 steps for a checkpoint. -> {'wall_ms': per
  call under the profiler, 'ops': [{'name', 'ms', 'per_call'}], ...}."""
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'peer_profile.py')
  python = os.path.join(venv, 'bin', 'python')
  env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1',
         'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'}
  steps = 3 + (calls if what == 'train' else 0)
  config = train_config(venv, shape, score, steps, seed, workdir, input_feeding, arch)
  out = os.path.join(workdir, f'profile_{what}.json')
  if what == 'train':
    argv = ['train', out, str(calls), '-config', config]
  elif what == 'beam5':
    _run_onmt_train(venv, config, workdir, 1, cpus)
    src = os.path.join(workdir, 'profile.src')
    with open(src, 'w') as f:
      f.write(_peer_text(sentences(shape, seed)[0]))
    argv = ['translate', out, str(calls), '-model',
            os.path.join(workdir, f'model_step_{steps}.pt'), '-src', src, '-output',
            os.path.join(workdir, 'profile.pred'), '-beam_size', '5', '-batch_size',
            str(shape.batch), '-min_length', str(shape.padded), '-max_length',
            str(shape.padded), '-gpu', '-1']
  else:
    raise ValueError(f"unknown peer profile {what!r}; valid: train, beam5")
  proc = subprocess.run(pinned([python, script] + argv, cpus), capture_output=True, text=True,
                        cwd=workdir, env=env, check=False)
  if proc.returncode or not os.path.exists(out):
    raise RuntimeError(f'{script} {what} failed (exit {proc.returncode}); last lines:\n'
                       + '\n'.join((proc.stdout + proc.stderr).splitlines()[-20:]))
  with open(out) as f:
    return {'what': what, 'arch': arch, 'score': score, **json.load(f)}
