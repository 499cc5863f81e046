r"""Translate text with a trained run: one sentence per line in, one translation per line out.

  printf 'Nov 3, 1999\n22. November 2026\n' | bash launch.sh translate --workdir=runs/dates_additive --beam=5
  bash launch.sh translate --workdir=RUN --input=test.src --output=test.hyp [--step=N]
      [--beam=K] [--alpha=A] [--nbest=N] [--attention=att.npz|att.jsonl] [--batch=B]

Input: UTF-8, one sentence per line (stdin by default, or --input=FILE); a line that is not
UTF-8 stops the command before anything is translated, with an error naming the line. Output
(stdout by default, or --output=FILE), in input order:
  - one translation per line; an empty input line gives an empty output line;
  - with --nbest=N: N lines per input line, `hypothesis<TAB>score`, best first (the score is
    the beam's length-normalised log-probability, the log-probability for --beam=1);
    an empty input line gives N lines `<TAB>0`.
--attention=FILE writes each sentence's attention matrix (of its best output) with its tokens:
  .jsonl: one JSON object per input line {"line", "source", "output", "src_tokens",
          "tgt_tokens", "weights" [T][S]} (empty inputs: empty lists);
  .npz:   arrays weights_<line> [T, S] float32, src_tokens_<line>, tgt_tokens_<line> (str).
Sentences are decoded in chunks of --batch lines, each sorted by length (compiled shapes are
reused); every chunk's output is written and flushed before the next is decoded, so an
interrupted run keeps what it wrote. A progress bar goes to stderr when it is a terminal, and
the speed (sentences/s) at the end. Expected failures (bad input, missing or corrupt run, an
unreadable file) print one line `error: ...` and exit with status 2; set
ATTENTION_JAX_TRACEBACK=1 to see the traceback.
"""

import json
import os
import sys
import time

import numpy as np
import tqdm
from absl import app, flags, logging

from attention_jax import api
from experiments import cli

flags.DEFINE_string('workdir', None, 'A training run directory.', required=True)
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_string('input', '-', 'Input text file, one sentence per line ("-": stdin).')
flags.DEFINE_string('output', '-', 'Output file ("-": stdout).')
flags.DEFINE_integer('beam', 1, 'Beam size (1 = greedy).', lower_bound=1)
flags.DEFINE_float('alpha', 0.6, 'Length penalty exponent ((5+|Y|)/6)^alpha.', lower_bound=0)
flags.DEFINE_integer('nbest', 1, 'Hypotheses per input line (<= --beam).', lower_bound=1)
flags.DEFINE_string('attention', None, 'Write attention matrices to this .npz or .jsonl file.')
flags.DEFINE_integer('batch', 256, 'Sentences decoded per chunk.', lower_bound=1)
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


def format_hypotheses(h: api.Hypotheses, nbest: int) -> list[str]:
  if nbest == 1:
    return [h.outputs[0]]
  return [f'{out}\t{score:.6g}' for out, score in zip(h.outputs, h.scores)]


class AttentionWriter:
  """Writes each line's attention to .jsonl (streamed) or .npz (at the end)."""

  def __init__(self, path: str):
    self.path, self.kind = path, os.path.splitext(path)[1]
    if self.kind not in ('.jsonl', '.npz'):
      raise InputError(f'--attention must end in .jsonl or .npz, got {path!r}')
    self.arrays: dict[str, np.ndarray] = {}
    self.file = open(path, 'w', encoding='utf-8') if self.kind == '.jsonl' else None

  def add(self, line: int, source: str, h: api.Hypotheses) -> None:
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
    if self.file is not None:
      self.file.close()
    else:
      tmp = self.path + '.tmp.npz'
      np.savez(tmp, **self.arrays)
      os.replace(tmp, self.path)


def translate(translator: api.Translator, lines: list[str], out, *, beam: int, alpha: float,
              nbest: int, batch: int, attention: AttentionWriter | None = None,
              progress: bool = False) -> int:
  """Translates `lines` chunk by chunk into the text stream `out`; returns the line count."""
  bar = tqdm.tqdm(total=len(lines), unit='sent', disable=not progress, file=sys.stderr)
  for start in range(0, len(lines), batch):
    chunk = lines[start:start + batch]
    hyps = translator.decode(chunk, beam=beam, alpha=alpha, nbest=nbest)
    for i, (text, h) in enumerate(zip(chunk, hyps)):
      out.write(''.join(line + '\n' for line in format_hypotheses(h, nbest)))
      if attention is not None:
        attention.add(start + i + 1, text, h)
    out.flush()
    if attention is not None:
      attention.flush()
    bar.update(len(chunk))
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
  logging.set_verbosity(logging.WARNING)
  name = 'stdin' if FLAGS.input == '-' else FLAGS.input
  if FLAGS.input == '-':
    data = sys.stdin.buffer.read()
  else:
    with open(FLAGS.input, 'rb') as f:
      data = f.read()
  lines = read_lines(data, name)
  translator = api.load(FLAGS.workdir, step=FLAGS.step)
  translator.chunk_size = FLAGS.batch
  attention = AttentionWriter(FLAGS.attention) if FLAGS.attention else None
  out = sys.stdout if FLAGS.output == '-' else open(FLAGS.output, 'w', encoding='utf-8')
  start = time.time()
  try:
    n = translate(translator, lines, out, beam=FLAGS.beam, alpha=FLAGS.alpha,
                  nbest=FLAGS.nbest, batch=FLAGS.batch, attention=attention,
                  progress=sys.stderr.isatty())
  finally:
    if out is not sys.stdout:
      out.close()
    if attention is not None:
      attention.close()
  elapsed = time.time() - start
  print(f'translated {n} lines in {elapsed:.1f} s ({n / max(elapsed, 1e-9):.1f} sentences/s, '
        f'{"greedy" if FLAGS.beam == 1 else f"beam {FLAGS.beam}"}, step {translator.step})',
        file=sys.stderr)


if __name__ == '__main__':
  cli.run(main)
