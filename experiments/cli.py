"""Expected failures of the command-line entry points as one line: `error: ...`, exit 2.

  if __name__ == '__main__':
    cli.run(main)                     # instead of absl's app.run(main)

Expected failures are a bad config or flag, a missing or malformed corpus or input file, a
missing, corrupt or foreign checkpoint, a workdir in use, disk full, a permission error and
a non-finite loss: each names what is wrong and where. Set ATTENTION_JAX_TRACEBACK=1 to see
the traceback instead. Anything else (a bug) keeps its traceback.
"""

import os
import sys

from absl import app

from attention_jax import checkpoint, workdir
from attention_jax.data import textfiles

EXPECTED = (ValueError, OSError, checkpoint.CheckpointError, workdir.WorkdirInUse,
            textfiles.CorpusError, FloatingPointError)


def message(e: BaseException) -> str:
  """The one line printed for an expected failure."""
  text = str(e).strip() or type(e).__name__
  if isinstance(e, OSError) and e.strerror:   # 'PATH: reason', not '[Errno N] reason: PATH'
    text = f'{e.filename}: {e.strerror}' if e.filename else e.strerror
  if isinstance(e, OSError) and e.errno == 28 and 'disk full' not in text:   # ENOSPC
    text = f'disk full: {text}'
  return 'error: ' + ' '.join(text.split('\n'))


def run(main) -> None:
  """absl's app.run(main), with expected failures reported as one line and exit status 2."""
  def wrapped(argv):
    try:
      return main(argv)
    except EXPECTED as e:
      if os.environ.get('ATTENTION_JAX_TRACEBACK'):
        raise
      sys.stdout.flush()
      print(message(e), file=sys.stderr, flush=True)
      os._exit(2)   # skips interpreter teardown (no asyncio "Event loop is closed" noise)
  app.run(wrapped)
