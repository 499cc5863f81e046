"""The timed process of the end-to-end benchmark (end_to_end.py): what a user's `translate`
does (experiments/translate.py: aj.load, chunks of lines, each written whole), with EOS
suppressed, importing no more than `translate` does. Prints its figures as one JSON line on
stderr.

  python -m experiments.bench.translate_file RUN INPUT OUTPUT BEAM [again] [noahead]

With `again`, the lines are translated a second time in the same process (not written): the
first call of a process against its second, which compiles nothing. With `noahead`, each shape
compiles when first decoded (Translator.compile_ahead False), not in the background.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax

from attention_jax import devices
from attention_jax.decoding import compile_cache
from attention_jax.loaded import loading
from experiments.bench.measure import suppress_eos

STARTED = 'ATTENTION_JAX_BENCH_STARTED'   # time.time() when the parent started the process


def translate_file(run: str, source: str, output: str, beam: int, again: bool = False,
                   batch: int = 1024, ahead: bool = True) -> dict:
  """What a user's `translate` does (experiments/translate.py: aj.load, chunks of `batch`
  lines, each written whole), with EOS suppressed -> the compiling and decoding figures."""
  devices.cpu_devices(0)   # as translate's default --cpu_devices (JAX_NUM_CPU_DEVICES wins)
  t = loading.load(run)
  t.params = suppress_eos(t.params)
  t.chunk_size = batch   # as translate's --batch
  t.compile_ahead = ahead
  with open(source, encoding='utf-8') as f:
    lines = f.read().splitlines()
  start = time.perf_counter()
  with open(output, 'w', encoding='utf-8') as out:
    for a in range(0, len(lines), batch):
      out.write(''.join(x + '\n' for x in t.translate(lines[a:a + batch], beam=beam)))
  figures = {'translate_s': time.perf_counter() - start, **compile_cache.counts,
             # since the parent started this process (its clock in STARTED): the file is written
             'written_s': time.time() - float(os.environ.get(STARTED, 'nan')),
             'shapes': sorted({s[3:] for s in t.shapes_used}),
             'devices': jax.local_device_count(), 'cache_budget': t.cache_budget}
  if again:
    start = time.perf_counter()
    for a in range(0, len(lines), batch):
      t.translate(lines[a:a + batch], beam=beam)
    figures['second_translate_s'] = time.perf_counter() - start
  return figures


if __name__ == '__main__':
  print(json.dumps(translate_file(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                  again='again' in sys.argv[5:],
                                  ahead='noahead' not in sys.argv[5:])), file=sys.stderr)
