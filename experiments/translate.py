r"""Translate text with a trained run: one sentence per line in, one translation per line out.

  printf 'Nov 3, 1999\n22. November 2026\n' | bash launch.sh translate --workdir=runs/dates_additive --beam=5
  bash launch.sh translate --workdir=RUN --input=test.src --output=test.hyp [--step=N]
      [--beam=K] [--alpha=A] [--nbest=N] [--attention=att.npz|att.jsonl] [--batch=B]
  bash launch.sh translate --workdir=runs/rev/seed_1,runs/rev/seed_2 --beam=5 < test.src

--workdir takes one run, or several, comma-separated, decoded as an ensemble (the mean of
their log-probabilities at each step, attention weights averaged;
attention_jax/loaded/ensemble.py; --step then applies to every run): their tokenizers must be identical.

Input: UTF-8, one sentence per line (stdin by default, or --input=FILE); a line that is not
UTF-8 stops the command before anything is translated, with an error naming the line. Output
(stdout by default, or --output=FILE), in input order:
  - one translation per line; an empty input line gives an empty output line;
  - with --nbest=N: N lines per input line, `hypothesis<TAB>score`, best first (the score is
    the length-normalised log-probability, log P / lp with --alpha's penalty, --beam=1 too);
    an empty input line gives N lines `<TAB>0`.
--attention=FILE writes each sentence's attention matrix (of its best output) with its tokens:
  .jsonl: one JSON object per input line {"line", "source", "output", "src_tokens",
          "tgt_tokens", "weights" [T][S]} (empty inputs: empty lists);
  .npz:   arrays weights_<line> [T, S] float32, src_tokens_<line>, tgt_tokens_<line> (str).
Every line is checked before anything is decoded or written (an over-long line stops the
command naming its 1-based line number). Sentences are decoded in chunks of --batch lines,
each sorted by length into length buckets (attention_jax/decoding/shapes.py: few compiled shapes; a
2,000-line file of 10-250 characters compiles 9 (RNN) or 12 (Transformer) of them on 2 CPU
devices in 1,024-line chunks, docs/performance.md), and the programs are kept in a persistent compilation cache for the next command
(--compilation_cache; --verbose says what was compiled). On a CPU each chunk's rows are split
over one JAX device per core (--cpu_devices; inference.split_batch): XLA's decoding loop keeps
about one core busy, and two devices decoded 1.6x faster on 2 cores (docs/performance.md);
each device decodes at most the rows whose attention memory fits twice its core's L2 cache
(Translator.cache_budget): a step reads all of it, from cache 1.4-2.1x faster than from RAM.
--output and --attention files are written to a temp file beside them and renamed into place:
a reader never sees a mix of two commands writing the same file (the last to finish wins,
whole), and an interrupted command (Ctrl-C, SIGTERM, an error) leaves the whole chunks it
finished, and says how many lines. A progress bar goes to stderr when it is a terminal, and
the speed (sentences/s) at the end. Expected failures (bad input, missing or corrupt run, an
unreadable file) print one line `error: ...` and exit with status 2; set
ATTENTION_JAX_TRACEBACK=1 to see the traceback.
"""

import json
import os
import sys
import time

import jax
import numpy as np
import tqdm
from absl import app, flags

from attention_jax import devices
from attention_jax import hold
from attention_jax.decoding import compile_cache
from attention_jax.loaded import ensemble
from attention_jax.loaded.translator import Hypotheses, Translator
from experiments import cli

flags.DEFINE_list('workdir', None, 'A training run directory, or several, comma-separated: '
                  'decoded as an ensemble.', required=True)
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_string('input', '-', 'Input text file, one sentence per line ("-": stdin).')
flags.DEFINE_string('output', '-', 'Output file ("-": stdout).')
flags.DEFINE_integer('beam', 1, 'Beam size (1 = greedy).', lower_bound=1)
flags.DEFINE_float('alpha', 0.6, 'Length penalty exponent ((5+|Y|)/6)^alpha.', lower_bound=0)
flags.DEFINE_integer('nbest', 1, 'Hypotheses per input line (<= --beam).', lower_bound=1)
flags.DEFINE_string('attention', None, 'Write attention matrices to this .npz or .jsonl file.')
flags.DEFINE_integer('batch', 1024, 'Sentences decoded (and written) per chunk.',
                     lower_bound=1)
flags.DEFINE_bool('verbose', False, 'Also print the decoding shapes used, the programs '
                  'compiled (or read from the compilation cache) and their seconds.')
flags.DEFINE_integer('cpu_devices', 0, 'On a CPU: decode each chunk split over this many JAX '
                     'devices (0: one per core this process may use; 1: one device). '
                     'JAX_NUM_CPU_DEVICES, when set, wins. GPUs and TPUs: unused.', lower_bound=0)
CACHE = cli.define_compilation_cache_flag()
FLAGS = flags.FLAGS


class InputError(ValueError):
  """Bad input text; the message names the line."""


def read_lines(data: bytes, name: str) -> list[str]:
  """UTF-8 bytes -> lines without their line ends ('\\n', '\\r\\n'); a BOM is dropped."""
  if data.startswith(b'\xef\xbb\xbf'):
    data = data[3:]
  raw = data.split(b'\n')
  if raw and raw[-1] == b'':
    raw.pop()
  lines = []
  for i, line in enumerate(raw, 1):
    try:
      lines.append(line.decode('utf-8').removesuffix('\r'))
    except UnicodeDecodeError as e:
      raise InputError(f'{name} line {i} is not valid UTF-8: byte {line[e.start]:#04x} at '
                       f'column {e.start + 1}') from None
  return lines


def format_hypotheses(h: Hypotheses, nbest: int) -> list[str]:
  if nbest == 1:
    return [h.outputs[0]]
  return [f'{out}\t{score:.6g}' for out, score in zip(h.outputs, h.scores)]


class Output:
  """A text file written through a temp file beside it and renamed into place on close():
  readers and other writers never see a mix (the last close wins, whole). '-': stdout."""

  def __init__(self, path: str):
    self.path = path
    if path == '-':
      self.file, self.tmp = sys.stdout, None
    else:
      cli.check_output(path)   # found now, not after translating everything
      folder, base = os.path.split(os.path.abspath(path))
      self.tmp = os.path.join(folder, f'.{base}.tmp{os.getpid()}')
      self.file = open(self.tmp, 'w', encoding='utf-8')

  def close(self) -> None:
    if self.tmp is not None and not self.file.closed:
      try:
        self.file.close()
        os.replace(self.tmp, self.path)
      finally:
        if os.path.exists(self.tmp):
          os.remove(self.tmp)


class AttentionWriter:
  """Writes each line's attention to .jsonl (streamed) or .npz (at the end)."""

  def __init__(self, path: str):
    self.path, self.kind = path, os.path.splitext(path)[1]
    if self.kind not in ('.jsonl', '.npz'):
      raise InputError(f'--attention must end in .jsonl or .npz, got {path!r}')
    self.arrays: dict[str, np.ndarray] = {}
    self.out = Output(path) if self.kind == '.jsonl' else None
    self.file = self.out.file if self.out else None

  def add(self, line: int, source: str, h: Hypotheses) -> None:
    w, src, tgt = h.weights[0], h.src_tokens, h.tgt_tokens[0]
    if self.file is not None:
      self.file.write(json.dumps({'line': line, 'source': source, 'output': h.outputs[0],
                                  'src_tokens': src, 'tgt_tokens': tgt,
                                  'weights': np.round(w.astype(np.float64), 6).tolist()}, ensure_ascii=False)
                      + '\n')
    else:
      self.arrays[f'weights_{line}'] = w
      self.arrays[f'src_tokens_{line}'] = np.array(src, dtype=str)
      self.arrays[f'tgt_tokens_{line}'] = np.array(tgt, dtype=str)

  def flush(self) -> None:
    if self.file is not None:
      self.file.flush()

  def close(self) -> None:
    if self.out is not None:
      self.out.close()
    else:
      tmp = self.path + f'.tmp{os.getpid()}.npz'
      np.savez(tmp, **self.arrays)
      os.replace(tmp, self.path)


def translate(translator: Translator, lines: list[str], out, *, beam: int, alpha: float,
              nbest: int, batch: int, attention: AttentionWriter | None = None,
              progress: bool = False, done: list[int] | None = None) -> int:
  """Translates `lines` chunk by chunk into the text stream `out`; returns the line count.
  done[0] counts the lines written in whole chunks so far."""
  done = [0] if done is None else done
  bar = tqdm.tqdm(total=len(lines), unit='sent', disable=not progress, file=sys.stderr)
  for start in range(0, len(lines), batch):
    chunk = lines[start:start + batch]
    hyps = translator.decode(chunk, beam=beam, alpha=alpha, nbest=nbest,
                             with_weights=attention is not None)
    out.write(''.join(line + '\n' for h in hyps for line in format_hypotheses(h, nbest)))
    if attention is not None:
      for i, (text, h) in enumerate(zip(chunk, hyps)):
        attention.add(start + i + 1, text, h)
    out.flush()     # one write per chunk: an interruption leaves whole chunks
    if attention is not None:
      attention.flush()
    done[0] += len(chunk)
    bar.update(len(chunk))
    hold.point('translate_chunk', chunk=start // batch + 1)   # tests only (hold.py)
  bar.close()
  return len(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  run()


def run():
  if FLAGS.nbest > FLAGS.beam:
    raise app.UsageError(f'--nbest={FLAGS.nbest} needs --beam >= {FLAGS.nbest}, got '
                         f'--beam={FLAGS.beam}')
  name = 'stdin' if FLAGS.input == '-' else FLAGS.input
  if FLAGS.input == '-':
    data = sys.stdin.buffer.read()
  else:
    with open(FLAGS.input, 'rb') as f:
      data = f.read()
  files = [(flag, os.path.realpath(path)) for flag, path in (
      ('--input', FLAGS.input), ('--output', FLAGS.output), ('--attention', FLAGS.attention))
      if path and path != '-']
  for i, (flag, path) in enumerate(files):   # an output over an input or another output
    for other, same in files[:i]:
      if path == same:
        raise app.UsageError(f'{other} and {flag} name the same file {path}')
  lines = read_lines(data, name)
  devices.cpu_devices(FLAGS.cpu_devices)   # before JAX starts its CPU backend
  cli.use_compilation_cache(CACHE)
  translator = ensemble.load(FLAGS.workdir, step=FLAGS.step)
  translator.chunk_size = FLAGS.batch
  try:   # every line, before anything is written
    translator.check(lines, name=lambda i: f'{name} line {i + 1}')
  except ValueError as e:
    raise InputError(str(e)) from None
  attention = AttentionWriter(FLAGS.attention) if FLAGS.attention else None
  out = Output(FLAGS.output)
  start, done = time.time(), [0]
  try:   # Ctrl-C and SIGTERM raise here (cli.run)
    n = translate(translator, lines, out.file, beam=FLAGS.beam, alpha=FLAGS.alpha,
                  nbest=FLAGS.nbest, batch=FLAGS.batch, attention=attention,
                  progress=sys.stderr.isatty(), done=done)
  except BaseException:   # keep the whole chunks written so far, and say so
    if FLAGS.output != '-':
      print(f'stopped: {done[0]} of {len(lines)} lines translated and kept in {FLAGS.output}',
            file=sys.stderr, flush=True)
    raise
  finally:
    out.close()
    if attention is not None:
      attention.close()
  elapsed = time.time() - start
  print(f'translated {n} lines in {elapsed:.1f} s ({n / max(elapsed, 1e-9):.1f} sentences/s, '
        f'{"greedy" if FLAGS.beam == 1 else f"beam {FLAGS.beam}"}, step {translator.step})',
        file=sys.stderr)
  if FLAGS.verbose:
    print(compile_report(translator), file=sys.stderr)


def compile_report(translator: Translator) -> str:
  """The --verbose lines: shapes decoded, programs compiled or read from the cache, where."""
  c, folder = compile_cache.counts, compile_cache.active_dir()
  shapes = sorted({s[3:] for s in translator.shapes_used})
  cache = 'off'
  if folder is not None:
    entries, size = compile_cache.size(folder)
    cache = f'{folder} ({entries} entries, {size / 2 ** 20:.1f} MB)'
  growth = translator.bucket_growth
  buckets = 'multiples of 8' if growth is None else f'growth {growth:g}'
  return (f'decoding shapes (rows x source length; length buckets of {buckets}): '
          f'{len(shapes)}: ' + ' '.join(f'{r}x{s}' for r, s in shapes)
          + f'\nprograms compiled or read from the cache: {c["programs"]} in '
          f'{c["compile_s"]:.1f} s ({c["cache_hits"]} cache hits); compilation cache: {cache}'
          f'\ndevices sharing each chunk: {jax.local_device_count()} '
          f'({jax.local_devices()[0].platform}); rows per device kept in cache: '
          + ('off' if translator.cache_budget is None
             else f'{translator.cache_budget / 2 ** 20:g} MiB of attention memory'))


if __name__ == '__main__':
  cli.run(main)
