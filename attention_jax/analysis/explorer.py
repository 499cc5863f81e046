"""The attention explorer: one offline page per run, or per set of runs (a sweep's variants x
seeds), that opens from disk in a browser with no server and no network.

  aj.explore(['runs/dates_additive'], out='explore/dates')          # -> explore/dates/index.html
  aj.explore(['runs/length_study'], out='explore/ls', methods=['gradient'], beam=3)

(`bash launch.sh explore RUN ... --out=DIR` is this with flags; docs/explorer.md.) Every input
is checked before any work (explorer_data.resolve: runs with records of the split, of one task
and split; the methods; `out` writable), and the page is written into a temporary folder
beside `out`, then renamed: a failure leaves nothing half-written.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Sequence

from attention_jax.analysis import explorer_data
from attention_jax.analysis import explorer_page
from attention_jax.analysis import explorer_words
from attention_jax.implicit import attribution
from attention_jax.loaded import loading
from attention_jax.models import encoders

DEFAULT_METHODS = ('gradient', 'gradient_x_input')
MARKER = '.attention_jax_explorer'   # in every folder explore writes: it may replace one


def check_out(out: str) -> None:
  """Refuses (OSError naming the path) an output folder that cannot be written: a file, a
  missing or unwritable parent, or a non-empty folder that explore did not write."""
  out = os.path.abspath(out)
  parent = os.path.dirname(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise NotADirectoryError(20, 'exists and is not a folder', out)
  if not os.path.isdir(parent):
    raise FileNotFoundError(2, 'no such folder for the output', parent)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise PermissionError(13, 'not writable', parent)
  if os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, MARKER)):
    raise FileExistsError(17, 'exists, is not empty and was not written by explore', out)


def check_methods(methods: Sequence[str], runs: Sequence[explorer_data.RunInfo]) -> None:
  """Each method registered (attribution.METHODS) and applicable to each run's source."""
  for r in runs:
    source = encoders.lookup(r.config.get('model', {}).get('encoder') or 'rnn').source
    for m in methods:
      attribution.check(m, source)


def _folder_name(name: str) -> str:
  return re.sub(r'[^A-Za-z0-9_.-]+', '__', name)


def _run_page(run: explorer_data.RunInfo, folder: str, root: str, split: str,
              methods: Sequence[str], beam: int | None, limit: int | None, back: str = '',
              verbose: bool = True):
  """One run's page into `folder` -> (its summary, the run's Task)."""
  t = loading.load(run.workdir)
  task = explorer_data.load_task(run.config, (t.src_tok, t.tgt_tok))
  beam = int(run.config.get('eval', {}).get('beam_size', 5)) if beam is None else beam
  ids = sorted(r['id'] for r in run.records)
  words = explorer_words.word_alignments(t, task, split, ids, keep=ids[:limit])
  summary = explorer_data.run_summary(run, split, task, words)
  if verbose:
    print(f'{run.name}: {len(summary["sentences"])} {split} sentences, maps of '
          f'{min(limit or 10 ** 9, len(summary["sentences"]))}', flush=True)
  details = explorer_data.sentence_details(t, summary, task, methods, beam, limit=limit,
                                           words=words)
  shape = next((len(d['heads']), len(d['heads'][0])) for d in details.values() if 'heads' in d) \
      if any('heads' in d for d in details.values()) else (0, 0)
  summary['layers'], summary['heads'] = shape
  explorer_page.write_run_page(folder, summary, details, root, methods, beam, back)
  return summary, task


def explore(paths: str | Sequence[str], out: str, *, split: str = 'test',
            methods: Sequence[str] = DEFAULT_METHODS, beam: int | None = None,
            limit: int | None = None, verbose: bool = True) -> str:
  """Writes the explorer into `out` (replacing an earlier explorer there) -> its index.html.

  paths: runs, groups of seeds or a sweep's root (every finished run beneath); one run gives
  its page, several a comparison page linking to each run's page (out/runs/<name>/). split:
  whose records to show. methods: the attribution methods drawn beside the attention
  (attribution.METHODS). beam: the n-best list's beam (default: the run's eval.beam_size).
  limit: the maps of only the first `limit` sentences by id (None: all)."""
  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  if beam is not None and beam < 1:
    raise ValueError(f'beam must be at least 1, got {beam}')
  check_out(out)
  runs = explorer_data.resolve([os.fspath(p) for p in paths], split)
  check_methods(methods, runs)
  out = os.path.abspath(out)
  tmp = tempfile.mkdtemp(prefix='.explore-', dir=os.path.dirname(out))
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)   # (mkdtemp's folder is private; the page is not)
  try:
    open(os.path.join(tmp, MARKER), 'w').close()
    explorer_page.write_assets(tmp)
    if len(runs) == 1:
      _run_page(runs[0], tmp, '', split, methods, beam, limit, verbose=verbose)
    else:
      links, task = {}, None
      for r in runs:
        sub = os.path.join('runs', _folder_name(r.name))
        links[r.name] = f'{sub}/index.html'
        _, task = _run_page(r, os.path.join(tmp, sub), '../../', split, methods, beam, limit,
                            back='<p><a href="../../index.html">← all runs</a></p>',
                            verbose=verbose)
      cmp = explorer_data.comparison(runs, split, task.texts(split))
      explorer_page.write_comparison_page(tmp, cmp, links)
    old = None
    if os.path.exists(out):   # an earlier explorer (check_out): swapped out, then removed
      old = tempfile.mkdtemp(prefix='.explore-old-', dir=os.path.dirname(out))
      os.rename(out, os.path.join(old, 'page'))
    os.rename(tmp, out)
    if old:
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  index = os.path.join(out, 'index.html')
  if verbose:
    print(f'wrote {index}')
  return index
