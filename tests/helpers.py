"""Shared by the end-to-end tests: an experiment's `smoke` config on a test TFDS dir, a
training in a subprocess at XLA's full optimisation, a tiny sweep file and its command line,
holding a process at a point, a run straight through to compare interrupted ones with
(uninterrupted, differences_from), and command lines run as forks of a server that imported
the package once (run_module, run_modules)."""

import atexit
import contextlib
import csv
import io
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# NumPy references of scores registered at test time (tests/throwaway_score.py), by name
EXTRA_NUMPY_REFERENCES = {}


def smoke(module, data_dir, **overrides):
  """module.get_config('smoke') with data in data_dir and 'section.field' overrides."""
  c = module.get_config('smoke')
  c.data.data_dir = data_dir
  for key, value in overrides.items():   # 'seed' or 'section.field'
    *section, field = key.split('.')
    (c[section[0]] if section else c)[field] = value
  return c


def covering(big, *small, ids=None) -> list:
  """pytest params of the product big x small[0] x ...: the default suite runs a walk that
  pairs each value of `big` with the combinations of the `small` axes in turn (every value
  of every axis, and every combination of the small axes, in at least one case); the rest of
  the product is marked `extended` (CI runs it after the suite: .ci/run). A value that is a
  tuple fills several arguments. ids: one string per value of `big` (else pytest's own)."""
  combos = list(itertools.product(*small))
  walk = {(i % len(big), i % len(combos)) for i in range(max(len(big), len(combos)))}
  spread = lambda v: v if isinstance(v, tuple) else (v,)
  return [pytest.param(*spread(b), *(x for v in combo for x in spread(v)),
                       marks=() if (i, j) in walk else pytest.mark.extended,
                       id=None if ids is None else '-'.join(
                           [ids[i], *(str(x) for v in combo for x in spread(v))]))
          for i, b in enumerate(big) for j, combo in enumerate(combos)]


def without_dac_override():
  """preexec_fn of a child that must meet permission bits as a user does (as root, CI):
  drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its bounding set before exec."""
  import ctypes  # pylint: disable=g-import-not-at-top
  libc = ctypes.CDLL(None, use_errno=True)
  for cap in (1, 2):   # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (linux/capability.h)
    if libc.prctl(24, cap, 0, 0, 0) != 0:   # PR_CAPBSET_DROP
      raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')


def metrics(results: dict) -> dict:
  """A run's results (summary['results']: split -> report) as results.json holds them, without
  the heatmaps' file paths, which name the workdir: what two runs of one config must share."""
  return {split: {k: v for k, v in report.items() if k != 'heatmaps'}
          for split, report in json.loads(json.dumps(results)).items()}


def corpus(directory) -> str:
  """train / valid / test .src and .tgt files of short lines (the textfiles task's format):
  64, 8 and 8 lines of 1-4 words, targets in capitals -> the directory."""
  os.makedirs(directory)
  rng = np.random.default_rng(0)
  words = ['alpha', 'beta', 'gamma', 'delta', 'eps']
  for split, n in (('train', 64), ('valid', 8), ('test', 8)):
    src = [' '.join(rng.choice(words, rng.integers(1, 5))) for _ in range(n)]
    for side, lines in (('src', src), ('tgt', [s.upper() for s in src])):
      with open(os.path.join(directory, f'{split}.{side}'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
  return str(directory)


def optimised_env() -> dict:
  """os.environ without the tests' XLA flags (conftest.TEST_XLA_FLAGS): for a subprocess
  whose run time is its computation, not its compilations (a 600-step Transformer trained in
  30 s instead of 82 s)."""
  flags = ' '.join(f for f in os.environ.get('XLA_FLAGS', '').split()
                   if not f.startswith(('--xla_backend_optimization_level',
                                        '--xla_cpu_use_fusion_emitters')))
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  return {**env, 'XLA_FLAGS': flags} if flags else env


def train_optimised(config: str, workdir, **overrides) -> dict:
  """`python -m experiments.main --config=config --workdir=workdir --config.<key>=<value>...`
  at XLA's full optimisation -> its results.json."""
  proc = subprocess.run(
      [sys.executable, '-m', 'experiments.main', f'--config={config}', f'--workdir={workdir}',
       *(f'--config.{k}={v}' for k, v in overrides.items())],
      cwd=ROOT, capture_output=True, text=True, timeout=600, env=optimised_env())
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(workdir, 'results.json')) as f:
    return json.load(f)


def assert_buckets_change_no_output(t, texts, chunk_size: int = 4,
                                    settings=({}, {'beam': 3, 'nbest': 2}), growth=None):
  """t.decode(texts) with its length buckets and padded rows (api.Translator's
  default, shapes.py) gives what decoding each chunk at its own length gives (bucket_growth
  None): the same tokens, scores and weights (to float rounding), for each decoding setting
  (default: greedy and beam-3 2-best).
  chunk_size is lowered, and the rows padded to a power of two (rows_per_octave 1), so that
  chunks get padding rows; the texts must include one whose
  bucket is longer than its multiple of 8 (checked: else this compares nothing). growth: the
  buckets' growth instead of the Translator's (a larger one pads shorter texts further: fewer
  and shorter programs to compile)."""
  bucketed, size, per_octave = t.bucket_growth, t.chunk_size, t.rows_per_octave
  growth = bucketed if growth is None else growth
  t.chunk_size, t.rows_per_octave = chunk_size, 1
  try:
    with warnings.catch_warnings():   # sources beyond the training lengths (RuntimeWarning)
      warnings.simplefilter('ignore', RuntimeWarning)
      for kw in settings:
        t.bucket_growth, t.shapes_used = None, set()
        plain = t.decode(texts, **kw)
        plain_shapes = {s[3:] for s in t.shapes_used}
        t.bucket_growth, t.shapes_used = growth, set()
        padded = t.decode(texts, **kw)
        padded_shapes = {s[3:] for s in t.shapes_used}
        # a source padded beyond its multiple of 8: a length plain decoding never used
        assert {s for _, s in padded_shapes} - {s for _, s in plain_shapes}, (
            plain_shapes, padded_shapes)
        assert all(r & (r - 1) == 0 for r, _ in padded_shapes), padded_shapes
        for a, b in zip(plain, padded):
          assert a.outputs == b.outputs and len(a.ids) == len(b.ids)
          for x, y in zip(a.ids, b.ids):
            np.testing.assert_array_equal(x, y)
          np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)
          for x, y in zip(a.weights, b.weights):
            np.testing.assert_allclose(x, y, atol=1e-5)
  finally:
    t.bucket_growth, t.chunk_size, t.rows_per_octave = bucketed, size, per_octave


# a sweep file of two variants and one that fails once it runs: its config passes the sweep's
# checks, but no training example fits its data.max_src_len
TINY_SWEEP = """
from experiments.configs import dates

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'}),
          ('broken', {'data.max_src_len': 2}),
          ('general', {'model.score': 'general', 'model.decoder': 'luong'})]
"""

# long enough to be held and killed after a checkpoint (step 50 of 25-step checkpoints:
# tests/test_sweep.py, tests/test_ray_sweep.py) and resume for one more; the same for every
# executor
SWEEP_STEPS = 75
SWEEP_TRAIN = [f'--config.train.steps={SWEEP_STEPS}', '--config.train.checkpoint_every=25',
               f'--config.train.eval_every={SWEEP_STEPS}', '--config.train.log_every=25',
               '--config.eval.heatmaps=0']


def sweep_cmd(path, root, data_dir, *flags, seeds=2):
  """The command line of a smoke sweep of the sweep file `path` (SWEEP_TRAIN budget)."""
  return [sys.executable, '-m', 'experiments.sweep', f'--sweep={path}:smoke', f'--root={root}',
          f'--seeds={seeds}', *flags, '--', f'--config.data.data_dir={data_dir}', *SWEEP_TRAIN]


def hold_env(file, at: str = 'train_step', **where) -> dict:
  """os.environ plus ATTENTION_JAX_HOLD (attention_jax/hold.py): the process that reaches
  point `at` with `where` (e.g. step=50, workdir=W) writes `file` and waits there until the
  test removes it or stops the process. Tests interrupt runs at such a point, never by
  racing the machine's speed."""
  spec = {'at': at, 'file': str(file), **{k: str(v) if k == 'workdir' else v
                                          for k, v in where.items()}}
  return {**os.environ, 'ATTENTION_JAX_HOLD': json.dumps(spec)}



@contextlib.contextmanager
def sigint_handled():
  """While it is active, the processes a test starts get SIGINT as a terminal's Ctrl-C finds
  them: a handled signal is reset to its default in an exec'd child, an ignored one stays
  ignored, and a suite started in the background (a shell's `&`, as CI may) starts with SIGINT
  ignored. (Not a preexec_fn: that forks a process JAX has started threads in.)"""
  before = signal.getsignal(signal.SIGINT)
  signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, before)

def wait_held(file, proc, patience: float = 1800) -> dict:
  """Waits for the event: `file` written by a held process (hold_env); returns what it says
  (pid, point). Fails at once if `proc` ends first; `patience` only guards against a hang."""
  deadline = time.time() + patience
  while not os.path.exists(file):
    if proc.poll() is not None:
      said = proc.stdout.read()[-3000:] if proc.stdout else ''
      raise AssertionError(f'the process ended (exit {proc.returncode}) before it held: {said}')
    assert time.time() < deadline, f'nothing held in {patience:.0f} s'
    time.sleep(0.05)
  with open(file) as f:
    return json.load(f)



# ---- a run interrupted and resumed against one straight through --------------------------------
# (tests/test_fault_injection.py, the signal tests of tests/test_reliability.py; the random
# stress script tests/fault_injection.py with its own budget)
def fault_cmd(workdir, data_dir, steps: int = 30, checkpoint_every: int = 5,
              eval_every: int = 15) -> list[str]:
  """`python -m experiments.main` on dates:smoke, a checkpoint every `checkpoint_every` steps
  (the 2 newest kept), a validation (and maybe a best checkpoint) every `eval_every`."""
  return [sys.executable, '-m', 'experiments.main', '--config=experiments/configs/dates.py:smoke',
          f'--config.data.data_dir={data_dir}', f'--config.train.steps={steps}',
          f'--config.train.checkpoint_every={checkpoint_every}',
          f'--config.train.eval_every={eval_every}', '--config.train.log_every=1',
          '--config.train.keep_checkpoints=2', f'--workdir={workdir}']


def fault_env(env: dict | None = None) -> dict:
  """`env` (default os.environ) on the CPU, its output unbuffered (what a killed process
  printed is read to its last line)."""
  return {**(os.environ if env is None else env), 'JAX_PLATFORMS': 'cpu',
          'PYTHONUNBUFFERED': '1'}


def final_state(workdir) -> list:
  """[(path, array)] of the newest latest checkpoint of a dates:smoke run: parameters,
  optimiser state, step."""
  import jax  # pylint: disable=g-import-not-at-top
  import attention_jax as aj  # pylint: disable=g-import-not-at-top
  from attention_jax.state import checkpoint as ckpt_lib# pylint: disable=g-import-not-at-top
  from attention_jax.training import train  # pylint: disable=g-import-not-at-top
  from experiments.configs import dates  # pylint: disable=g-import-not-at-top
  with open(os.path.join(workdir, 'model_config.json')) as f:
    mc = aj.ModelConfig.from_dict(json.load(f))
  template = train.init_state(mc, train.make_optimizer(dates.get_config('smoke').train), 0)[1]
  ckpts = ckpt_lib.Checkpoints(str(workdir), create=False)
  try:
    state = ckpt_lib.restore(ckpts.latest, ckpts.latest.latest_step(), template)[0]
  finally:
    ckpts.close()
  return [(jax.tree_util.keystr(p), np.asarray(x))
          for p, x in jax.tree_util.tree_flatten_with_path(state)[0]]


def differences_from(reference, workdir) -> list[str]:
  """What differs between two finished runs: results.json's metrics and best step, and every
  array of the final train state bit for bit ([] if nothing)."""
  with open(os.path.join(reference, 'results.json')) as f:
    a = json.load(f)
  with open(os.path.join(workdir, 'results.json')) as f:
    b = json.load(f)
  diffs = [f'results.json {k}: {a[k]!r} != {b[k]!r}' for k in ('step', 'best_step', 'results')
           if a[k] != b[k]]
  sa, sb = final_state(reference), final_state(workdir)
  if [p for p, _ in sa] != [p for p, _ in sb]:
    return diffs + ['the final states hold other arrays']
  return diffs + [f'final state {p}' for (p, x), (_, y) in zip(sa, sb)
                  if x.dtype != y.dtype or not np.array_equal(x, y)]


def uninterrupted(tmp_path_factory) -> tuple[str, str]:
  """(workdir, data dir) of fault_cmd run straight through: run once per test session (under
  pytest-xdist by the first worker to ask, under a file lock; the others read it)."""
  import filelock  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    base = base.parent                      # the temp dir all workers of this session share
  tmp = base / 'uninterrupted'
  workdir, data_dir = tmp / 'run', tmp / 'tfds'
  with filelock.FileLock(str(base / 'uninterrupted.lock')):
    if not (workdir / 'results.json').exists():
      proc = subprocess.run(fault_cmd(workdir, data_dir), cwd=ROOT, env=fault_env(),
                            capture_output=True, text=True, timeout=900)
      assert proc.returncode == 0, proc.stderr[-3000:]
  return str(workdir), str(data_dir)



# Command lines that are the behaviour under test (`python -m experiments.X ...`: its exit
# status, its output, its files) but not its interpreter's start: run in a fork of one server
# per test process and environment, which imported what the entry points import
# (attention_jax.training.train, attention_jax.loaded.translator: jax, flax, orbax, tfds; about
# 4 s of CPU per process otherwise)
# and nothing more: no JAX backend, no thread (a fork is safe). The child runs its module as
# `python -m` does (runpy, as __main__, its flags defined afresh) with its stdin, stdout and
# stderr on files, then the interpreter's exit handlers. Not for processes a test signals,
# holds or times.
PRELOAD = ('attention_jax.training.train', 'attention_jax.loaded.translator', 'experiments.cli')
_SERVER = r"""
import atexit, json, os, runpy, sys, traceback
for name in json.loads(sys.argv[1]):
  __import__(name)
requests, replies = os.fdopen(os.dup(0), 'r'), os.fdopen(os.dup(1), 'w')
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.dup2(2, 1)

def child(module, args, stdin, out, err, cwd, env):
  requests.close()
  replies.close()
  os.environ.clear()
  os.environ.update(env)
  os.dup2(os.open(stdin or os.devnull, os.O_RDONLY), 0)
  os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
  os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
  os.chdir(cwd)
  code = 0
  try:
    sys.argv = [module, *args]
    runpy.run_module(module, run_name='__main__', alter_sys=True)
  except SystemExit as e:                        # as the interpreter ends on it
    code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    if not isinstance(e.code, (int, type(None))):
      print(e.code, file=sys.stderr)
  except BaseException:                          # pylint: disable=broad-except
    traceback.print_exc()
    code = 1
  try:
    atexit._run_exitfuncs()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

for line in requests:
  pids = []
  for run in json.loads(line):
    pid = os.fork()
    if not pid:
      child(**run)
    pids.append(pid)
  replies.write(json.dumps([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]) + '\n')
  replies.flush()
"""
_servers: dict = {}


def _server(env: dict) -> subprocess.Popen:
  """The server of `env` (pytest's PYTEST_CURRENT_TEST aside: the child gets it as it is)."""
  key = tuple(sorted((k, v) for k, v in env.items() if k != 'PYTEST_CURRENT_TEST'))
  server = _servers.get(key)
  if server is None or server.poll() is not None:
    server = _servers[key] = subprocess.Popen(
        [sys.executable, '-c', _SERVER, json.dumps(PRELOAD)], cwd=ROOT, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    atexit.register(server.stdin.close)          # the server ends at its input's end
  return server


def run_modules(module: str, argvs, stdin: bytes | None = None, text: bool = True,
                timeout: float = 300) -> list[subprocess.CompletedProcess]:
  """`python -m module *argv` for each argv of `argvs`, all at once (forks of a server of
  this process's environment: above), each with `stdin` -> their CompletedProcess (returncode,
  stdout, stderr: text, or bytes with text=False)."""
  with tempfile.TemporaryDirectory(prefix='aj_cli_') as tmp:
    stdin_path = None
    if stdin is not None:
      stdin_path = os.path.join(tmp, 'stdin')
      with open(stdin_path, 'wb') as f:
        f.write(stdin.encode() if isinstance(stdin, str) else stdin)
    runs = [dict(module=module, args=[str(a) for a in argv], stdin=stdin_path,
                 out=os.path.join(tmp, f'{i}.out'), err=os.path.join(tmp, f'{i}.err'),
                 cwd=ROOT, env=dict(os.environ)) for i, argv in enumerate(argvs)]
    server = _server(dict(os.environ))
    server.stdin.write(json.dumps(runs) + '\n')
    server.stdin.flush()
    if not select.select([server.stdout], [], [], timeout)[0]:
      os.killpg(server.pid, signal.SIGKILL)      # the server and its children
      raise subprocess.TimeoutExpired([module], timeout)
    reply = server.stdout.readline()
    assert reply, f'the fork server of {module} ended (exit {server.wait()})'
    done = []
    for run, code in zip(runs, json.loads(reply)):
      with open(run['out'], 'rb') as f_out, open(run['err'], 'rb') as f_err:
        out, err = f_out.read(), f_err.read()
      if text:
        out, err = out.decode(), err.decode()
      done.append(subprocess.CompletedProcess([module, *run['args']], code, out, err))
    return done


def run_module(module: str, *args, stdin: bytes | None = None, text: bool = True,
               timeout: float = 300) -> subprocess.CompletedProcess:
  """`python -m module *args` (run_modules) -> its CompletedProcess."""
  return run_modules(module, [args], stdin=stdin, text=text, timeout=timeout)[0]


def bible_wheel(path, verses: int = 64, seed: int = 0) -> str:
  """A small wheel in the real layout of bible-alignments 0.4.2 (attention_jax/data/bible.py):
  `verses` Greek verses of made-up words, each with its English (a fixed word-for-word lexicon,
  two words swapped in every verse, so alignments are not the diagonal) and manual alignment
  records. Verse 1 of every chapter ends its English with punctuation (exclude=y,
  skip_space_after on the word before it); its last English word has no link; the second verse
  has no record at all (no gold); one record links a Greek word to the next verse's English
  (left out). Returns the wheel's path."""
  rng = np.random.RandomState(seed)
  greek = ['logos', 'theos', 'kai', 'ho', 'en', 'arche', 'pneuma', 'kosmos', 'agape', 'zoe']
  english = ['word', 'god', 'and', 'the', 'in', 'beginning', 'spirit', 'world', 'love', 'life']
  src_rows, tgt_rows, records = [], [], []
  for v in range(verses):
    verse = f'43{1 + v // 20:03d}{1 + v % 20:03d}'
    n = int(rng.randint(3, 9))
    words = rng.randint(len(greek), size=n)
    order = list(range(n))
    order[0], order[1] = order[1], order[0]
    for w in range(n):
      src_rows.append([f'n{verse}{w + 1:03d}', greek[words[w]]])
    ids = []
    for k, w in enumerate(order):
      tid = f'{verse}{k + 1:03d}'
      ids.append((tid, w))
      tgt_rows.append([tid, verse, english[words[w]], '', '', '', ''])
    punct = v % 20 == 0
    if punct:   # 'word.' : skip_space_after on the word, exclude=y on the full stop
      tgt_rows[-1][3] = 'y'
      tgt_rows.append([f'{verse}{n + 1:03d}', verse, '.', '', 'y', '', ''])
    if v % 20 == 1:
      continue   # no record: a verse without gold
    for tid, w in ids[:-1] if punct else ids:
      records.append({'source': [f'n{verse}{w + 1:03d}'], 'target': [tid],
                      'meta': {'id': f'{verse}.{w:03d}', 'process': 'manual',
                               'status': 'created'}})
    if v == 2:   # a link into the next verse: left out
      records[-1]['target'].append('43001004001')

  def tsv(header, rows):
    out = io.StringIO()
    w = csv.writer(out, delimiter='\t', quoting=csv.QUOTE_NONE, lineterminator='\n')
    w.writerow(header)
    w.writerows(rows)
    return out.getvalue()

  src_header = ['id', 'altId', 'text', 'strongs', 'gloss', 'gloss2', 'lemma', 'pos', 'morph']
  path = os.fspath(path)
  with zipfile.ZipFile(path, 'w') as z:
    z.writestr('data/sources/SBLGNT.tsv', tsv(src_header, [
        [i, f'{t}-1', t, 'G0001', t, t, t, 'noun', 'N-NSM'] for i, t in src_rows]))
    z.writestr('data/eng/targets/BSB/nt_BSB.tsv', tsv(
        ['id', 'source_verse', 'text', 'skip_space_after', 'exclude', 'id_range_end',
         'source_verse_range_end'], tgt_rows))
    z.writestr('data/eng/alignments/BSB/SBLGNT-BSB-manual.json', json.dumps(
        {'documents': [], 'meta': {}, 'roles': ['source', 'target'], 'type': 'translation',
         'records': records}))
    z.writestr('bible_alignments/__init__.py', '')
  return path


def bible_run(tmp, task: str, steps: int = 30, word_alignment: str = 'auto',
              **model) -> tuple[str, object, dict]:
  """A smoke run of greek_english.py on a small wheel's verses (bible_wheel, 160 verses),
  registered as task `task` -> (its workdir, its config, its summary). `model`: config.model
  overrides. Its maps need not mean anything, only be the model's."""
  from attention_jax import data as data_lib  # pylint: disable=g-import-not-at-top
  from attention_jax.data import bible, data_fields, loaders  # pylint: disable=g-import-not-at-top
  from attention_jax.training import train  # pylint: disable=g-import-not-at-top
  from experiments.configs import greek_english  # pylint: disable=g-import-not-at-top
  wheel = bible_wheel(tmp / 'tiny.whl', verses=160)
  digest = bible.sha256(wheel)
  if task not in loaders.LOADERS:
    data_lib.register_task(task, lambda d: loaders._read_builder(   # pylint: disable=protected-access
        bible.prepare(d, wheel=wheel, expected_sha256=digest)), fields=data_fields.GreekEnglish)
  cfg = greek_english.get_config('smoke')
  cfg.data.update(name=task, data_dir=str(tmp / 'tfds'), vocab_size=40, tgt_vocab_size=40)
  cfg.model.update(**model)
  cfg.train.update(steps=steps, eval_every=steps, checkpoint_every=steps, log_every=10)
  cfg.eval.word_alignment = word_alignment
  summary = train.train_and_evaluate(cfg, str(tmp / 'run'))
  return str(tmp / 'run'), cfg, summary
