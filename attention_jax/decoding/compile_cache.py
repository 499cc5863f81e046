"""JAX's persistent compilation cache for the commands that use a saved run (translate,
evaluate, attribute, `aj.load`): a program compiled by one process is read from disk by the
next, so a second `translate` of a file does not compile its decoding loops again.

  compile_cache.enable()          # the folder of ATTENTION_JAX_CACHE, else the default below
  compile_cache.enable('/fast/ssd/jax_cache')
  ATTENTION_JAX_CACHE=off bash launch.sh translate ...   # not used

The folder: `ATTENTION_JAX_CACHE` (a path, or `off`/`0`/`none` for no cache), else JAX's own
`JAX_COMPILATION_CACHE_DIR` when set, else `$XDG_CACHE_HOME/attention_jax/jax` (by default
~/.cache/attention_jax/jax). Programs that compile in under MIN_COMPILE_S are not written
(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS overrides); the folder holds at most MAX_BYTES,
least recently used entries evicted first (JAX's LRU cache). A folder that cannot be created
or written, or entries that cannot be read (corrupt, from another jaxlib) or written, never
stop the command: one warning line, and the process compiles without the cache from then on.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

ENV = 'ATTENTION_JAX_CACHE'
OFF = ('off', '0', 'none', 'false', '')
MIN_COMPILE_S = 0.2        # JAX's default (1 s) skips most decoding loops of small models
MAX_BYTES = 2 * 2 ** 30    # LRU-evicted beyond this
# JAX warns once per entry it cannot read or write (compiler.py): those become one line
_JAX_CACHE_WARNING = 'persistent compilation cache entry'

_state = {'dir': None, 'warned': False, 'hooked': False, 'counting': False}
# what this process spent compiling (JAX's monitoring events), for --verbose and the bench
_COMPILE_EVENTS = ('/jax/core/compile/jaxpr_trace_duration',
                   '/jax/core/compile/jaxpr_to_mlir_module_duration',
                   '/jax/core/compile/backend_compile_duration')   # or a cache read
counts = {'programs': 0, 'compile_s': 0.0, 'cache_hits': 0}


def default_dir() -> str:
  """$XDG_CACHE_HOME/attention_jax/jax (XDG_CACHE_HOME: ~/.cache by default)."""
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'attention_jax', 'jax')


def chosen_dir(path: str | None = None) -> str | None:
  """The folder enable(path) uses: path, else $ATTENTION_JAX_CACHE, else
  $JAX_COMPILATION_CACHE_DIR, else default_dir(); None where it says off."""
  if path is None:
    path = os.environ.get(ENV)
  if path is None:
    path = os.environ.get('JAX_COMPILATION_CACHE_DIR') or default_dir()
  return None if path.strip().lower() in OFF else os.path.expanduser(path)


def _warn(message: str) -> None:
  """One line on stderr per process, then the cache is off for the rest of it."""
  jax.config.update('jax_enable_compilation_cache', False)
  jax_cache.reset_cache()   # JAX decides once per process whether it uses a cache: again
  if not _state['warned']:
    _state['warned'] = True
    print(f'warning: {message}; compiling without the persistent cache ({ENV}=off '
          'silences this)', file=sys.stderr, flush=True)


def _hook_jax_warnings() -> None:
  """JAX's per-entry read/write failures (warnings.warn in jax/_src/compiler.py) become our
  one line; every other warning is shown as before."""
  if _state['hooked']:
    return
  _state['hooked'] = True
  shown = warnings.showwarning

  def show(message, category, filename, lineno, file=None, line=None):
    text = str(message)
    if _JAX_CACHE_WARNING in text:
      _warn(f'the compilation cache at {_state["dir"]} failed: {text.splitlines()[0]}')
      return
    shown(message, category, filename, lineno, file, line)
  warnings.showwarning = show


def count() -> None:
  """Counts, from now on in this process, the programs compiled (or read from the cache),
  the seconds tracing, lowering and compiling them, and the cache hits: `counts`."""
  if _state['counting']:
    return
  _state['counting'] = True

  def duration(event: str, seconds: float, **_):
    if event in _COMPILE_EVENTS:
      counts['compile_s'] += seconds
      counts['programs'] += event == _COMPILE_EVENTS[-1]

  def hit(event: str, **_):
    counts['cache_hits'] += event == '/jax/compilation_cache/cache_hits'
  jax.monitoring.register_event_duration_secs_listener(duration)
  jax.monitoring.register_event_listener(hit)


def enable(path: str | None = None) -> str | None:
  """Turns JAX's persistent compilation cache on at chosen_dir(path) (created if needed) and
  returns the folder; None where it is off or the folder cannot be written (one warning
  line). Call before the first compilation of the process: JAX opens the cache then."""
  count()
  folder = chosen_dir(path)
  if folder is None:
    jax.config.update('jax_enable_compilation_cache', False)
    return None
  try:
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix='.probe_'):
      pass
  except OSError as e:
    _warn(f'the compilation cache folder {folder} cannot be written ({e.strerror or e})')
    return None
  _state['dir'] = folder
  _hook_jax_warnings()
  jax.config.update('jax_compilation_cache_dir', folder)
  jax.config.update('jax_enable_compilation_cache', True)
  if 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS' not in os.environ:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_S)
  if 'JAX_COMPILATION_CACHE_MAX_SIZE' not in os.environ:
    jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
  return folder


def active_dir() -> str | None:
  """The cache folder in use in this process (None: off, or given up after a failure)."""
  return None if _state['warned'] else _state['dir']


def size(folder: str) -> tuple[int, int]:
  """(entries, bytes) in a cache folder."""
  n = total = 0
  for entry in os.scandir(folder):
    if entry.is_file() and not entry.name.startswith('.'):
      n, total = n + 1, total + entry.stat().st_size
  return n, total
