"""Expected failures of the command-line entry points as one line: `error: ...`, exit 2.

  if __name__ == '__main__':
    cli.run(main)                     # instead of absl's app.run(main)

Expected failures are a bad config or flag, a missing or malformed corpus or input file, a
missing, corrupt or foreign checkpoint, a workdir in use, disk full, a permission error and
a non-finite loss: each names what is wrong and where. Set ATTENTION_JAX_TRACEBACK=1 to see
the traceback instead. Anything else (a bug) keeps its traceback. Library logs and notices
are off unless --verbosity asks for them (quiet_libraries).
"""

import importlib.util
import logging as py_logging
import os
import signal
import sys
import threading
import warnings

import jax
from absl import app, flags, logging

from attention_jax import devices
from attention_jax import workdir
from attention_jax.data import textfiles
from attention_jax.decoding import compile_cache
from attention_jax.state import checkpoint

EXPECTED = (ValueError, OSError, checkpoint.CheckpointError, workdir.WorkdirInUse,
            textfiles.CorpusError, FloatingPointError, MemoryError)


def message(e: BaseException) -> str:
  """The one line printed for an expected failure."""
  text = str(e).strip() or type(e).__name__
  if isinstance(e, OSError) and e.strerror:   # 'PATH: reason', not '[Errno N] reason: PATH'
    text = f'{e.filename}: {e.strerror}' if e.filename else e.strerror
  if isinstance(e, OSError) and e.errno == 28 and 'disk full' not in text:   # ENOSPC
    text = f'disk full: {text}'
  return 'error: ' + ' '.join(text.split('\n'))


def out_of_memory(e: BaseException) -> str:
  """The one line for an accelerator out of memory (XLA's RESOURCE_EXHAUSTED): what failed,
  the share of the device this process had, and what to lower."""
  first = next((x.strip() for x in str(e).splitlines() if x.strip()), type(e).__name__)
  had = devices.share_note() or "this process had JAX's default 75% of the device"
  return (f'error: out of accelerator memory ({first[:200]}); {had}: run fewer per device, or '
          'lower data.batch_size')


def check_output(path: str) -> None:
  """Refuses, before any work, an output file that cannot be written: a directory, a
  missing folder, a folder or file without write permission (OSError naming the path)."""
  if os.path.isdir(path):
    raise IsADirectoryError(21, 'is a directory, not an output file', path)
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(2, 'no such folder for the output file', folder)
  if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
    raise PermissionError(13, 'not writable', path if os.path.exists(path) else folder)


def _config_override_error(argv) -> str | None:
  """Names the first --config.a.b=... override whose field does not exist, with the valid
  fields of its section (absl's config flags fail on it with a bare KeyError)."""
  try:
    cfg = flags.FLAGS['config'].value
  except (KeyError, AttributeError):
    return None
  if cfg is None:   # the config flag failed while applying overrides: load the file again
    spec = next((a.split('=', 1)[1] for a in argv[1:] if a.startswith('--config=')),
                flags.FLAGS['config'].default)
    path, _, arg = (spec or '').partition(':')
    try:
      loader = importlib.util.spec_from_file_location('config_file', path)
      module = importlib.util.module_from_spec(loader)
      loader.loader.exec_module(module)
      cfg = module.get_config(arg or None)
    except Exception:  # pylint: disable=broad-except  (the override error is what we report)
      return None
  for arg in argv[1:]:
    if not arg.startswith('--config.'):
      continue
    path = arg[len('--config.'):].split('=', 1)[0].split('.')
    node = cfg
    for i, key in enumerate(path):
      if not hasattr(node, 'keys') or key not in node:
        where = '.'.join(path[:i]) or 'the config'
        valid = ', '.join(sorted(node.keys())) if hasattr(node, 'keys') else '(none)'
        return f'unknown config field {".".join(path[:i + 1])!r} in {arg}; fields of {where}: {valid}'
      node = node[key]
  return None


def define_compilation_cache_flag() -> flags.FlagHolder:
  """--compilation_cache, for the commands that load a saved run (translate, evaluate,
  attribute): compile_cache.py. use_compilation_cache(flag) before loading the run."""
  return flags.DEFINE_string(
      'compilation_cache', None,
      'Folder of JAX\'s persistent compilation cache ("off": none); default '
      f'${compile_cache.ENV}, else {compile_cache.default_dir()}')


def use_compilation_cache(flag: flags.FlagHolder) -> None:
  """The flag, when given, is this process's $ATTENTION_JAX_CACHE (loading.load reads it)."""
  if flag.value is not None:
    os.environ[compile_cache.ENV] = flag.value


HELP = ('--help', '-?', '--helpfull', '--helpshort', '--helpxml')


def _parse_flags(argv):
  """absl's flag parsing, with bad flags and unknown config fields reported in one line; the
  help that --help / --helpfull print is a success (exit 0; absl exits 1)."""
  try:
    return flags.FLAGS(argv)
  except SystemExit as e:
    if e.code == 1 and any(a in HELP for a in argv[1:]):
      sys.exit(0)
    raise
  except flags.Error as e:   # a config file that raised: its first and last lines
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    _exit('error: ' + (lines[0] if len(lines) < 2 or 'Traceback' not in str(e)
                       else f'{lines[0]} {lines[-1]}'))
  except (AttributeError, KeyError, ValueError, TypeError, OSError) as e:
    if os.environ.get('ATTENTION_JAX_TRACEBACK'):
      raise
    _exit('error: ' + (_config_override_error(argv) or f'bad flags: {e}'))


def _exit(line: str, status: int = 2) -> None:
  try:
    sys.stdout.flush()
  except (OSError, ValueError):   # a closed pipe
    pass
  print(line, file=sys.stderr, flush=True)
  os._exit(status)   # skips interpreter teardown (no asyncio "Event loop is closed" noise)


def quiet_libraries() -> None:
  """Library chatter off, unless --verbosity (-v) was given: absl's and Orbax's INFO logs,
  Ray's notices, Pillow's decompression-bomb warning (an oversized image is refused in one
  line anyway) and SciPy's precision warnings (a test between identical scores), so that a
  command prints its own lines and, on a refusal, only the `error:` line."""
  if flags.FLAGS['verbosity'].present:
    return
  _quiet_closed_event_loops()
  logging.set_verbosity(logging.WARNING)
  for name in ('ray', 'orbax', 'absl', 'jax._src.xla_bridge', 'tensorflow_datasets'):
    py_logging.getLogger(name).setLevel(py_logging.ERROR)
  warnings.filterwarnings('ignore', module='PIL')
  warnings.filterwarnings('ignore', category=RuntimeWarning, module='scipy')


def _closed_loop(exc) -> bool:
  return isinstance(exc, RuntimeError) and str(exc) == 'Event loop is closed'


def _quiet_closed_event_loops() -> None:
  """A failed checkpoint write (a full disk) leaves Orbax's coroutines behind; when they are
  collected after its event loop closed, Python prints 'Exception ignored ... RuntimeError:
  Event loop is closed' (from the garbage collector or a worker thread) before the command's
  own error line. Those two hooks drop that one exception; every other one is printed."""
  unraisable, in_thread = sys.unraisablehook, threading.excepthook
  sys.unraisablehook = lambda u: None if _closed_loop(u.exc_value) else unraisable(u)
  threading.excepthook = lambda a: None if _closed_loop(a.exc_value) else in_thread(a)


class Terminated(BaseException):
  """SIGTERM, raised where the program is (as Ctrl-C raises KeyboardInterrupt), so that
  `finally` blocks run: outputs are closed whole."""


def _terminate(signum, frame):
  del frame
  raise Terminated(signum)


def run(main) -> None:
  """absl's app.run(main), with expected failures reported as one line and exit status 2;
  Ctrl-C and SIGTERM as one line and 130 / 143 (training saves first: preemption.py)."""
  def wrapped(argv):
    signal.signal(signal.SIGTERM, _terminate)
    quiet_libraries()
    try:
      return main(argv)
    except KeyboardInterrupt:
      _exit('interrupted (Ctrl-C)', 130)
    except Terminated:
      _exit('stopped by SIGTERM', 143)
    except app.UsageError as e:   # bad or conflicting flags: one line, like the rest
      _exit(f'error: {e}')
    except EXPECTED as e:
      if os.environ.get('ATTENTION_JAX_TRACEBACK'):
        raise
      _exit(message(e))
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e) or os.environ.get('ATTENTION_JAX_TRACEBACK'):
        raise
      _exit(out_of_memory(e))
    except (AttributeError, KeyError):   # a config file loaded lazily, with a bad override
      line = _config_override_error(sys.argv)
      if line is None or os.environ.get('ATTENTION_JAX_TRACEBACK'):
        raise
      _exit(f'error: {line}')
  app.run(wrapped, flags_parser=_parse_flags)
