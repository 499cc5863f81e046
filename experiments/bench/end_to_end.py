r"""End to end: a fresh process translating a file, timed from its start to its exit (the last
line written), ours (`aj.load(run)` and experiments/translate.py's loop) against OpenNMT-py's
`onmt_translate` on the same file, at equal resources, with an empty compilation cache (cold)
and with one an identical earlier process filled (warm).

  bash launch.sh bench --end_to_end --peer --peer_venv=/tmp/onmt_venv --out=/tmp/e2e.json
  bash launch.sh bench --end_to_end --e2e_archs=transformer --e2e_beams=1 --e2e_cores=2
  bash launch.sh bench --end_to_end --e2e_noahead --e2e_beams=1 --e2e_cores=2   # what ahead gains
  bash launch.sh bench --end_to_end --peer --peer_venv=/tmp/onmt_venv --e2e_repeats=3 --e2e_cores=2

What runs (set up untimed, in a temp folder):
  - the file: `sentences` random sources of 10-250 symbols (uniform: the `char` and `long`
    ranges of the benchmark and between), 28 symbols;
  - our models: a run of `reverse` over those 28 symbols with the benchmark's `char` sizes
    (workload.experiment_config): 'rnn' = LSTM, general score, Luong decoder with input
    feeding; 'transformer' = 3+3 layers, d_model 128, 4 heads; trained 1 step (it makes the
    run folder: config, tokenizers, checkpoint);
  - OpenNMT-py's model of the same kind (peer.py's options), trained 4 steps.
Both models have EOS suppressed (the output layer's EOS bias at -1e9; untrained weights
would end sentences at random), so every output runs to its length limit: ours 2n + 10 tokens
for a source of n (train.max_decode_factor 2, each sentence its own limit), OpenNMT-py's
2m + 5 for a batch whose longest source has m (-max_length_ratio 2; it sorts a file's
sentences by length, so m is about n): the same work within a few tokens a sentence.
Timed, per (arch, beam 1 | 5, cores 1 | 2): ours cold, ours warm, OpenNMT-py (no compiling:
one figure); with `--e2e_repeats=N`, N interleaved rounds of the three and their medians (one
pair of processes on a shared VM moved by a third between runs of one command). The warm process then translates the file again (untimed by the wall clock):
`second_translate_s` against its first call's `translate_s`. One core: `taskset -c 0`,
OpenNMT-py with 1 thread; two cores: both unpinned, OpenNMT-py with 2 threads. Ours splits
the CPU as `translate` does: one JAX device per core it may run on, each chunk's rows split
among them (devices.cpu_devices; `--e2e_devices=N`: N devices, 1: one). Our process also
reports the seconds it spent tracing and compiling (or reading the cache:
compile_cache.counts), the shapes it decoded and its device count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

from attention_jax.data import builders
from attention_jax.decoding import compile_cache
from attention_jax.training import train
from experiments.bench import peer as peer_lib
from experiments.bench import translate_file
from experiments.bench import workload
from experiments.bench.measure import pinned
from experiments.configs import reverse

SYMBOLS = 28
LENGTHS = (10, 250)
FACTOR = 2.0
ARCHS = {'rnn': ('general', 'luong'), 'transformer': ('scaled_dot', 'transformer')}


def source_lines(n: int, lengths: tuple[int, int] = LENGTHS, seed: int = 0) -> list[str]:
  """n random sources of `lengths` symbols (uniform), over the first SYMBOLS of `reverse`'s."""
  rng = np.random.default_rng(seed)
  alphabet = np.array(list(builders.SYMBOLS[:SYMBOLS]))
  return [''.join(rng.choice(alphabet, size=int(k)))
          for k in rng.integers(lengths[0], lengths[1] + 1, size=n)]


def our_config(arch: str, data_dir: str, lengths: tuple[int, int] = LENGTHS,
               shape: str = 'char'):
  """The run's config: `reverse` over SYMBOLS symbols of `lengths`, the bench's `shape`
  sizes, 1 train step, outputs limited to FACTOR x the source + 10."""
  score, decoder = ARCHS[arch]
  cfg = workload.experiment_config(workload.CONFIGS[shape], score, decoder, seed=0)
  base = reverse.get_config()
  cfg.data = base.data
  cfg.eval = base.eval
  d = cfg.data
  d.num_symbols, d.min_len, d.max_len, d.test_max_len = SYMBOLS, *lengths, lengths[1]
  d.max_src_len = d.max_tgt_len = lengths[1] + 1
  d.num_train, d.num_valid, d.num_test, d.batch_size = 64, 4, 4, 16
  d.num_buckets, d.data_dir = 1, data_dir
  if cfg.model.arch == 'transformer':   # (learned positions' table: the RNN has none)
    cfg.model.max_positions = 1024
  cfg.model.max_src_len = 512
  cfg.train.steps, cfg.train.eval_every, cfg.train.checkpoint_every = 1, 1, 1
  cfg.train.max_decode_factor = FACTOR
  cfg.eval.heatmaps = 0
  return cfg


# ---- the timed processes ----------------------------------------------------------------
def timed(cmd: list[str], cpus: str | None, env: dict) -> tuple[float, str]:
  """Runs cmd (pinned to `cpus`) -> (wall seconds from start to exit, its stderr). The
  process finds the start time in $ATTENTION_JAX_BENCH_STARTED (translate_file.STARTED)."""
  env = {**env, translate_file.STARTED: repr(time.time())}
  start = time.perf_counter()
  proc = subprocess.run(pinned(cmd, cpus), capture_output=True, text=True, env=env,
                        check=False)
  wall = time.perf_counter() - start
  if proc.returncode:
    raise RuntimeError(f'{cmd[:3]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}')
  return wall, proc.stderr


def ours(run: str, source: str, beam: int, cpus: str | None, cache: str, work: str,
         again: bool = False, ahead: bool = True, devices: int = 0) -> dict:
  """One fresh process of ours (experiments/bench/translate_file.py) -> its wall time and
  figures. ahead False: each shape compiled on first use (Translator.compile_ahead).
  devices: the process sees the CPU as that many devices (JAX_NUM_CPU_DEVICES; 0: as
  `translate` does, one per core it may run on), and the translator splits each chunk's rows
  across them (inference.split_batch)."""
  out = os.path.join(work, f'ours_beam{beam}.txt')
  env = {**os.environ, compile_cache.ENV: cache}
  env.pop('JAX_NUM_CPU_DEVICES', None)
  if devices:
    env['JAX_NUM_CPU_DEVICES'] = str(devices)
  wall, err = timed([sys.executable, '-m', 'experiments.bench.translate_file', run, source,
                     out, str(beam)] + ['again'] * again + ['noahead'] * (not ahead), cpus, env)
  figures = json.loads(err.strip().splitlines()[-1])
  with open(out, encoding='utf-8') as f:
    figures['output_tokens'] = sum(len(line.rstrip('\n')) for line in f)   # characters
  # start to the last line written (a warm process then translates again: not counted)
  return {'wall_s': figures.pop('written_s'), 'exit_s': wall, **figures}


# ---- OpenNMT-py ---------------------------------------------------------------------------
_SUPPRESS_EOS = """
import sys, torch
ck = torch.load(sys.argv[1], weights_only=False)
ck['generator']['bias'][ck['vocab']['tgt'].index('</s>')] = -1e9
torch.save(ck, sys.argv[1])
"""


def peer_model(venv: str, arch: str, work: str, shape: str = 'char') -> str:
  """OpenNMT-py's model of `arch` (peer.py's options at the bench's `shape` sizes) trained 4
  steps on sentences of these symbols, EOS suppressed -> its checkpoint."""
  p = peer_lib.peer_tokens_per_s(venv, workload.CONFIGS[shape], ARCHS[arch][0], 4, 0,
                                 os.path.join(work, f'onmt_{arch}'), arch=arch)
  # its vocabulary: the words t4..t31 (peer.py's), our SYMBOLS symbols (peer_file)
  subprocess.run([os.path.join(venv, 'bin', 'python'), '-c', _SUPPRESS_EOS, p['checkpoint']],
                 check=True)
  return p['checkpoint']


def peer_file(source: str, work: str) -> str:
  """Our file as OpenNMT-py's words: symbol i of builders.SYMBOLS is the word t{4 + i}."""
  path = os.path.join(work, 'onmt.src')
  with open(source, encoding='utf-8') as f, open(path, 'w', encoding='utf-8') as out:
    for line in f:
      out.write(' '.join(f't{4 + builders.SYMBOLS.index(c)}' for c in line.strip()) + '\n')
  return path


def peer(venv: str, checkpoint: str, source: str, beam: int, cores: int, work: str) -> dict:
  """One onmt_translate process on the file -> its wall time (start to exit)."""
  out = os.path.join(work, f'onmt_beam{beam}.txt')
  env = {**os.environ, 'OMP_NUM_THREADS': str(cores), 'MKL_NUM_THREADS': str(cores),
         'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'}
  wall, _ = timed([os.path.join(venv, 'bin', 'onmt_translate'), '-model', checkpoint,
                   '-src', source, '-output', out, '-beam_size', str(beam),
                   '-max_length_ratio', str(FACTOR), '-max_length', '1000', '-gpu', '-1'],
                  '0' if cores == 1 else None, env)
  with open(out, encoding='utf-8') as f:
    tokens = sum(len(line.split()) for line in f)
  return {'wall_s': wall, 'output_tokens': tokens}


# ---- the comparison -------------------------------------------------------------------------
def compare(archs: Sequence[str], beams: Sequence[int], cores: Sequence[int], sentences: int,
            peer_venv: str | None, log=print, lengths: tuple[int, int] = LENGTHS,
            shape: str = 'char', saved=lambda rows: None,
            noahead: bool = False, devices: int = 0, repeats: int = 1) -> list[dict[str, Any]]:
  """Every (arch, beam, cores): ours cold and warm, OpenNMT-py's -> rows with the ratios
  (OpenNMT-py's wall time over ours: > 1 where ours is faster). repeats: rounds of the three
  processes, interleaved (ours cold, ours warm, OpenNMT-py's; a fresh cache each round), so
  that a machine's drift falls on all three alike: the row's `cold`, `warm` and `onmt` are
  the median runs, `*_all_s` every round's wall time, `*_ratios` each round's ratio, `*_ratio`
  the medians'. saved(rows) after each row:
  a stopped comparison keeps the rows it finished. noahead: also a cold process that compiles
  each shape on first use (`cold_noahead`: what compiling ahead gains, ahead.py). devices:
  our processes see the CPU as that many devices (ours(); 0: as `translate` does); the row's
  `devices` is what they saw."""
  rows = []
  with tempfile.TemporaryDirectory(prefix='e2e_') as work:
    source = os.path.join(work, 'file.src')
    with open(source, 'w', encoding='utf-8') as f:
      f.write('\n'.join(source_lines(sentences, lengths)) + '\n')
    onmt_source = peer_file(source, work) if peer_venv else None
    for arch in archs:
      run = os.path.join(work, f'run_{arch}')
      log(f'[{arch}] setting up: our run (1 step), OpenNMT-py\'s model (untimed)')
      train.train_and_evaluate(our_config(arch, os.path.join(work, 'tfds'), lengths, shape), run)
      checkpoint = peer_model(peer_venv, arch, work, shape) if peer_venv else None
      for beam in beams:
        for n in cores:
          cpus = '0' if n == 1 else None
          runs = {'cold': [], 'warm': [], 'onmt': []}
          for _ in range(repeats):   # interleaved: each round ours cold, warm, OpenNMT-py's
            cache = tempfile.mkdtemp(dir=work, prefix='cache_')
            runs['cold'].append(ours(run, source, beam, cpus, cache, work, devices=devices))
            runs['warm'].append(ours(run, source, beam, cpus, cache, work, again=True,
                                     devices=devices))
            if checkpoint:
              runs['onmt'].append(peer(peer_venv, checkpoint, onmt_source, beam, n, work))
          row = {'arch': arch, 'beam': beam, 'cores': n, 'sentences': sentences,
                 'repeats': repeats}
          for k, done in runs.items():
            if done:
              row[k] = median_run(done)
              row[f'{k}_all_s'] = [r['wall_s'] for r in done]
          row['devices'] = row['cold']['devices']
          if noahead:
            row['cold_noahead'] = ours(run, source, beam, cpus,
                                       tempfile.mkdtemp(dir=work, prefix='cache_'), work,
                                       ahead=False, devices=devices)
          if checkpoint:
            for k in ('cold', 'warm'):
              row[f'{k}_ratio'] = row['onmt']['wall_s'] / row[k]['wall_s']
              row[f'{k}_ratios'] = [o / x for o, x in zip(row['onmt_all_s'], row[f'{k}_all_s'])]
          rows.append(row)
          saved(rows)
          log(format_row(row))
  return rows


def median_run(runs: list[dict]) -> dict:
  """The run of median wall time (of an even number, the faster of the middle two)."""
  return sorted(runs, key=lambda r: r['wall_s'])[(len(runs) - 1) // 2]


def format_row(r: dict) -> str:
  """One line: the wall times (and where ours went), sentences/s and the ratios."""
  n = r['sentences']
  devices = f' as {r["devices"]} devices' if r.get('devices', 1) > 1 else ''
  line = (f'{r["arch"]:11s} beam {r["beam"]} {r["cores"]} core(s){devices}: ours cold '
          f'{r["cold"]["wall_s"]:.1f} s ({n / r["cold"]["wall_s"]:.1f} sent/s; compiling '
          f'{r["cold"]["compile_s"]:.1f} s, {len(r["cold"]["shapes"])} shapes), warm '
          f'{r["warm"]["wall_s"]:.1f} s ({n / r["warm"]["wall_s"]:.1f} sent/s; cache reads and '
          f'compiling {r["warm"]["compile_s"]:.1f} s)')
  if 'cold_noahead' in r:
    line += (f'; cold without compiling ahead {r["cold_noahead"]["wall_s"]:.1f} s '
             f'({r["cold_noahead"]["wall_s"] / r["cold"]["wall_s"]:.2f}x ours cold)')
  if 'onmt' in r:
    line += (f'; OpenNMT-py {r["onmt"]["wall_s"]:.1f} s ({n / r["onmt"]["wall_s"]:.1f} sent/s)'
             f': cold {r["cold_ratio"]:.2f}x, warm {r["warm_ratio"]:.2f}x')
  if r.get('repeats', 1) > 1:
    line += f' (medians of {r["repeats"]} interleaved rounds: ' + '; '.join(
        f'{k} ' + ' '.join(f'{x:.1f}' for x in r[f'{k}_all_s']) + ' s'
        for k in ('cold', 'warm', 'onmt') if f'{k}_all_s' in r) + ')'
  return line
