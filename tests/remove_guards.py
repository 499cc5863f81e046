"""Remove each guard that docs/reliability.md promises, and check that a test then fails.

  .venv/bin/python tests/remove_guards.py [--only NAME,NAME] [--check] [--baseline=canary]

tests/guards.toml lists the guards: each is a small edit of the source (`find`, a short piece
of code found exactly once in `file`, replaced by `replace`) that removes one guarantee, and
the tests that must then fail. The script copies the tree (the files git tracks or would
track) to a temporary directory and, one guard at a time, applies the edit there, runs the
named tests in one pytest process (-n 0, -x, every tier: the marks are not filtered) and puts
the file back. A guard whose tests all pass without it protects nothing: the script names it
(SURVIVED) and exits 1. It exits 1 too, naming the guard, when an edit no longer applies
(`find` absent or found twice), a named test does not exist, or the named tests fail on the
unchanged tree (the baseline run: one pytest process for all of them first; a test that fails
anyway proves nothing when it fails on the edit). --check does the static part only (edits
apply, tests exist), in a second. CI runs it in its extended tier (tests/test_guard_list.py)
with --baseline=canary: the suite there runs every named test on the unchanged tree anyway.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, 'tests', 'guards.toml')
FIELDS = {'name', 'file', 'find', 'replace', 'tests'}
NODE = re.compile(r'^(?P<file>tests/[\w/]+\.py)::(?P<name>\w+)(?P<param>\[.*\])?$')


def load(path: str = LIST) -> list[dict]:
  """The guards of the list at `path` (a list of dicts with FIELDS)."""
  with open(path, 'rb') as f:
    return tomllib.load(f)['guard']


def test_names(path: str) -> set[str]:
  """The module-level test functions of a test file (and Class::method for test classes)."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  names = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith('test'):
      names.add(node.name)
  return names


def problems(guards: list[dict], root: str = ROOT) -> list[str]:
  """What is wrong with the list itself, read against the tree at `root` ([] if nothing): a
  field missing, a name used twice, an edit that does not apply once, a test that does not
  exist. Each problem names its guard."""
  found, seen = [], set()
  for i, g in enumerate(guards):
    name = g.get('name', f'#{i + 1}')
    missing = FIELDS - set(g)
    if missing:
      found.append(f'guard {name}: no {", ".join(sorted(missing))}')
      continue
    if name in seen:
      found.append(f'guard {name}: named twice')
    seen.add(name)
    path = os.path.join(root, g['file'])
    if g['file'].startswith('tests/'):
      found.append(f'guard {name}: edits {g["file"]}: a guard is in the code, not in the tests')
    elif not os.path.isfile(path):
      found.append(f'guard {name}: no file {g["file"]}')
    else:
      with open(path, encoding='utf-8') as f:
        count = f.read().count(g['find'])
      if count != 1:
        found.append(f'guard {name}: its edit no longer applies: `find` occurs {count} times '
                     f'in {g["file"]} (once expected): {g["find"]!r}')
      elif g['find'] == g['replace']:
        found.append(f'guard {name}: `replace` equals `find` (nothing removed)')
    if not g['tests']:
      found.append(f'guard {name}: names no test')
    for test in g['tests']:
      m = NODE.match(test)
      if not m:
        found.append(f'guard {name}: {test!r} is not a test id (tests/FILE.py::test_name)')
        continue
      file = os.path.join(root, m['file'])
      if not os.path.isfile(file):
        found.append(f'guard {name}: no file {m["file"]} (test {test})')
      elif m['name'] not in test_names(file):
        found.append(f'guard {name}: no test {m["name"]} in {m["file"]}')
  return found


def copy_tree(dst: str) -> None:
  """The files git tracks or would track (not ignored) -> dst; the whole tree but the usual
  build and cache folders where git is not there."""
  try:
    listed = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others',
                             '--exclude-standard'], cwd=ROOT, capture_output=True, check=True)
    files = [f for f in listed.stdout.decode().split('\0') if f]
  except (OSError, subprocess.CalledProcessError):
    shutil.copytree(ROOT, dst, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns(
        '.git', '.venv', '__pycache__', 'site', '*.egg-info', '.pytest_cache'))
    return
  for f in files:
    src = os.path.join(ROOT, f)
    if not os.path.lexists(src) or os.path.isdir(src):   # deleted here; a submodule
      continue
    os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
    shutil.copy2(src, os.path.join(dst, f), follow_symlinks=False)


def _forget_bytecode(path: str) -> None:
  """Removes the cached bytecode of a source file (a file edited and put back within one
  second, at the same size, would otherwise be read from its stale .pyc)."""
  folder = os.path.join(os.path.dirname(path), '__pycache__')
  stem = os.path.splitext(os.path.basename(path))[0]
  if os.path.isdir(folder):
    for name in os.listdir(folder):
      if name.startswith(stem + '.'):
        os.remove(os.path.join(folder, name))


# Each pytest process is a fork of one server per copied tree, which imported the libraries
# the tests import (JAX, Flax, Orbax, TFDS, ...: seconds of each process's start) after the
# tests' conftest.py (its settings of JAX's environment come first), and nothing of the
# project's own code: each fork imports the edited sources afresh. (JAX is safe to fork before
# its backend starts, as tests/helpers.py's command server does.)
PRELOAD = ('numpy', 'jax', 'jax.numpy', 'flax.nnx', 'optax', 'orbax.checkpoint',
           'tensorflow_datasets', 'grain', 'ml_collections', 'sacrebleu', 'matplotlib.pyplot',
           'absl.app', 'pytest', 'hypothesis')
_SERVER = r"""
import importlib, json, os, sys
tree = sys.argv[1]
os.chdir(tree)
sys.path[:0] = [tree, os.path.join(tree, 'tests')]
import conftest   # the tests' settings of JAX's environment, before JAX is imported
for name in json.loads(sys.argv[2]):
  try:
    importlib.import_module(name)
  except ImportError:
    pass
import pytest
requests, replies = os.fdopen(os.dup(0), 'r'), os.fdopen(os.dup(1), 'w')
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.dup2(2, 1)
for line in requests:
  argv, out = json.loads(line)
  pid = os.fork()
  if not pid:
    requests.close()
    replies.close()
    os.setsid()   # a process group of its own, to kill with what its tests started
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 1
    try:
      code = int(pytest.main(argv))
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(code)
  replies.write(json.dumps(pid) + '\n')
  replies.flush()
  replies.write(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])) + '\n')
  replies.flush()
"""


class Pytest:
  """pytest runs in `tree` (every tier), each a fork of one server (above)."""

  def __init__(self, tree: str):
    self.tree = tree
    env = {**os.environ, 'PYTHONPATH': tree + os.pathsep + os.environ.get('PYTHONPATH', '')}
    env.pop('PYTEST_XDIST_WORKER', None)       # (when a test of the suite runs this script)
    env.pop('PYTEST_CURRENT_TEST', None)
    # JAX reads its settings from the environment as it is imported: the cache here is the
    # script's (conftest.py would make one per process, and remove it at its end)
    self.cache = None
    if 'JAX_COMPILATION_CACHE_DIR' not in env:
      self.cache = env['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='guards_jit_')
      env.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
    self.server = subprocess.Popen(
        [sys.executable, '-c', _SERVER, tree, json.dumps(PRELOAD)], cwd=tree, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def run(self, tests: list[str], timeout: float, stop_at_first: bool = True
          ) -> tuple[int | None, str, float]:
    """Runs `tests` in one pytest process -> (exit status, None if it ran past `timeout`; its
    output; seconds)."""
    argv = ['-p', 'no:cacheprovider', '-n', '0', '-q', '--no-header', '-o', 'addopts=', '-rfE',
            *(['-x'] if stop_at_first else []), *tests]
    out = os.path.join(self.tree, '.pytest_output')
    t0 = time.time()
    self.server.stdin.write(json.dumps([argv, out]) + '\n')
    self.server.stdin.flush()
    line = self.server.stdout.readline()
    if not line:
      raise RuntimeError(f'the pytest server ended (exit {self.server.wait()})')
    pid, rc = json.loads(line), None
    if select.select([self.server.stdout], [], [], timeout)[0]:
      rc = json.loads(self.server.stdout.readline())
    else:
      os.killpg(pid, signal.SIGKILL)         # pytest and what its tests started
      self.server.stdout.readline()
    with open(out, encoding='utf-8', errors='replace') as f:
      return rc, f.read(), time.time() - t0

  def close(self) -> None:
    self.server.stdin.close()
    self.server.wait()
    if self.cache:
      shutil.rmtree(self.cache, ignore_errors=True)


def failed(out: str) -> list[str]:
  """The test ids pytest's summary says failed or errored."""
  return [m.split(' - ')[0] for m in re.findall(r'^(?:FAILED|ERROR) (.+)$', out, re.M)]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--only', default='', help='comma-separated guard names (default: all)')
  ap.add_argument('--list', default=LIST, help='the guard list (default: tests/guards.toml)')
  ap.add_argument('--check', action='store_true',
                  help='only check that the edits apply and the tests exist')
  ap.add_argument('--baseline', choices=('all', 'canary', 'none'), default='all',
                  help='first run, on the unchanged tree, every named test (all), those of the '
                  'first guard only (canary: the copy works; where the suite runs the rest '
                  'anyway, as CI does), or none')
  ap.add_argument('--timeout', type=float, default=600, help='seconds per pytest process')
  ap.add_argument('--keep', action='store_true', help='keep the copied tree')
  args = ap.parse_args()
  guards = load(args.list)
  if args.only:
    wanted = set(args.only.split(','))
    unknown = wanted - {g.get('name') for g in guards}
    if unknown:
      print(f'error: no guard named {", ".join(sorted(unknown))} in {args.list}')
      return 2
    guards = [g for g in guards if g['name'] in wanted]
  bad = problems(guards)
  for line in bad:
    print(line)
  if bad:
    print(f'FAILED: {len(bad)} problem(s) in {os.path.relpath(args.list, ROOT)}')
    return 1
  print(f'{len(guards)} guards, {len({t for g in guards for t in g["tests"]})} tests', flush=True)
  if args.check:
    return 0

  tree = tempfile.mkdtemp(prefix='remove_guards_')
  t0, runner = time.time(), None
  try:
    copy_tree(tree)
    subprocess.run([sys.executable, '-m', 'compileall', '-q', '-j', '0', 'attention_jax',
                    'experiments', 'tests'], cwd=tree, capture_output=True, check=False)
    runner = Pytest(tree)
    if args.baseline != 'none':
      tests = list(dict.fromkeys(t for g in (guards if args.baseline == 'all' else guards[:1])
                                 for t in g['tests']))
      rc, out, seconds = runner.run(tests, args.timeout * 2, stop_at_first=False)
      bad_tests = set(failed(out))
      if rc != 0:
        for g in guards:
          why = sorted(set(g['tests']) & bad_tests)
          if why or rc not in (0, 1):
            print(f'guard {g["name"]}: its tests do not pass on the unchanged tree '
                  f'({", ".join(why) or f"pytest exit {rc}"})')
        print(out[-3000:])
        print(f'FAILED: the named tests fail without any edit ({seconds:.0f} s)')
        return 1
      print(f'baseline ({args.baseline}): the {len(tests)} tests pass on the unchanged tree '
            f'({seconds:.0f} s)', flush=True)
    survived, errors = [], []
    for g in guards:
      path = os.path.join(tree, g['file'])
      with open(path, encoding='utf-8') as f:
        original = f.read()
      try:
        with open(path, 'w', encoding='utf-8') as f:
          f.write(original.replace(g['find'], g['replace']))
        _forget_bytecode(path)
        rc, out, seconds = runner.run(g['tests'], args.timeout)
      finally:
        with open(path, 'w', encoding='utf-8') as f:
          f.write(original)
        _forget_bytecode(path)
      where = f'{g["file"]}'
      if rc == 1 and failed(out):
        print(f'guard {g["name"]} ({where}): removed, {failed(out)[0]} fails ({seconds:.0f} s)',
              flush=True)
      elif rc == 0:
        survived.append(g['name'])
        print(f'guard {g["name"]} ({where}): SURVIVED: removed, {", ".join(g["tests"])} '
              f'still pass ({seconds:.0f} s)', flush=True)
      else:
        errors.append(g['name'])
        said = 'ran past its time' if rc is None else f'pytest exit {rc}'
        print(f'guard {g["name"]} ({where}): the tests did not run ({said}):\n'
              + out[-2000:], flush=True)
    total = time.time() - t0
    if survived or errors:
      print(f'FAILED: {len(survived)} guard(s) survived their removal '
            f'({", ".join(survived) or "none"}); {len(errors)} could not be tested '
            f'({", ".join(errors) or "none"}); {total:.0f} s')
      return 1
    print(f'every guard removed fails a test: {len(guards)} of {len(guards)} ({total:.0f} s)')
    return 0
  finally:
    if runner is not None:
      runner.close()
    if args.keep:
      print(f'tree kept in {tree}')
    else:
      shutil.rmtree(tree, ignore_errors=True)


if __name__ == '__main__':
  sys.exit(main())
