"""The package's layering: no import cycle among its modules, no import hidden inside a
function to dodge one, and every module importable on its own in a fresh interpreter."""

import ast
import glob
import os
import re
import pkgutil
import subprocess
import sys

import attention_jax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'attention_jax'


def modules() -> dict[str, str]:
  """{dotted module name: file path} of every module of the package (packages included)."""
  out = {PACKAGE: attention_jax.__file__}
  for info in pkgutil.walk_packages(attention_jax.__path__, PACKAGE + '.'):
    spec = info.module_finder.find_spec(info.name)
    out[info.name] = spec.origin
  return out


def imports(name: str, path: str, known) -> tuple[set[str], list[str]]:
  """(package modules `name` imports, 'line: module' of those imported inside a function)."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  is_pkg = path.endswith('__init__.py')
  found, local = set(), []

  def targets(node) -> list[str]:
    if isinstance(node, ast.Import):
      return [a.name for a in node.names]
    base = node.module or ''
    if node.level:   # relative: resolve against this module's package
      parts = name.split('.')[:len(name.split('.')) - node.level + (1 if is_pkg else 0)]
      base = '.'.join(parts + ([base] if base else []))
    subs = [f'{base}.{a.name}' for a in node.names]
    return [s for s in subs if s in known] or [base]

  def visit(node, in_function: bool):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.Import, ast.ImportFrom)):
        for t in targets(child):
          if t in known and t != name:
            found.add(t)
            if in_function:
              local.append(f'{child.lineno}: {t}')
      visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
  visit(tree, False)
  return found, local


def graph():
  mods = modules()
  edges, local = {}, {}
  for name, path in mods.items():
    edges[name], loc = imports(name, path, mods)
    if loc:
      local[name] = loc
  return edges, local


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
  """A cycle as [a, b, ..., a], or None (depth-first search)."""
  state, stack = {}, []

  def dfs(u):
    state[u] = 'open'
    stack.append(u)
    for v in sorted(edges.get(u, ())):
      if state.get(v) == 'open':
        return stack[stack.index(v):] + [v]
      if v not in state:
        found = dfs(v)
        if found:
          return found
    stack.pop()
    state[u] = 'done'
    return None

  for u in sorted(edges):
    if u not in state:
      found = dfs(u)
      if found:
        return found
  return None


def test_find_cycle_finds_cycles():
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': set()}) is None
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']


def test_no_import_cycle_among_the_package_modules():
  edges, _ = graph()
  assert len(edges) > 30
  assert 'attention_jax.decoding.inference' in edges['attention_jax.decoding.translator']
  assert find_cycle(edges) is None, f'import cycle: {" -> ".join(find_cycle(edges))}'


def test_no_function_local_imports_of_package_modules():
  _, local = graph()
  assert not local, f'function-local imports of package modules: {local}'


FRESH_IMPORTS = """
import importlib, sys, traceback
failed = {}
for name in sys.argv[1:]:
  for m in [m for m in sys.modules if m == 'attention_jax' or m.startswith('attention_jax.')]:
    del sys.modules[m]   # the package's modules fresh for each; third-party ones stay cached
  try:
    importlib.import_module(name)
  except Exception:
    failed[name] = traceback.format_exc()[-500:]
print(repr(failed))
"""


def test_every_module_imports_on_its_own_in_a_fresh_interpreter():
  """Each module is imported with none of the package's modules loaded before it (one
  interpreter: the third-party imports, jax's included, are paid once)."""
  names = sorted(modules())
  proc = subprocess.run([sys.executable, '-c', FRESH_IMPORTS, *names], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip().splitlines()[-1] == '{}', proc.stdout[-3000:]


# the model and its decoding: they read token ids, never the data package (TFDS, Babel)
MODEL_SIDE = ('decoding.greedy', 'decoding.beam', 'decoding.inference', 'symbols')


def test_the_model_and_decoding_do_not_depend_on_the_data_package():
  edges, _ = graph()
  models = [m[len(PACKAGE) + 1:] for m in edges if m.startswith(f'{PACKAGE}.models.')]
  assert len(models) > 10
  for name in (*models, *MODEL_SIDE):
    seen, todo = set(), [f'{PACKAGE}.{name}']
    while todo:
      u = todo.pop()
      for v in edges.get(u, ()):
        if v not in seen:
          seen.add(v)
          todo.append(v)
    data = sorted(m for m in seen if m.startswith(f'{PACKAGE}.data'))
    assert not data, f'{name} imports {data}'


# a run directory's file names: only workdir.py (its owner, workdir.Run) spells them
RUN_FILES = re.compile(r'\b(model_)?config\.json|\bresults\.json|\bwall_time\.json|\btrain\.log\b'
                       r'|(^|[^\w])sentences_(<|\{|$)|\.sentences\.jsonl|^_heatmaps$')
RUN_DIRS = ('tokenizers', 'checkpoints', 'tensorboard', 'heatmaps', 'latest', 'best')


def run_file_names(path: str) -> list[str]:
  """'line: text' of each string in the module (docstrings too) that names a run's file, and
  of each os.path.join of a run's directory."""
  tree, found = ast.parse(open(path, encoding='utf-8').read()), []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      if RUN_FILES.search(node.value):
        found.append(f'{node.lineno}: {node.value[:60]!r}')
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'join' and any(isinstance(a, ast.Constant) and a.value in RUN_DIRS
                                             for a in node.args)):
      found.append(f'{node.lineno}: os.path.join(..., {ast.unparse(node.args[-1])})')
  return found


def test_run_file_names_are_spelled_by_the_run_directory_owner_only():
  assert run_file_names(os.path.join(ROOT, PACKAGE, 'workdir.py'))   # the check can fail
  spelled = {name: hits for name, path in modules().items()
             if not name.endswith('.workdir') and (hits := run_file_names(path))}
  for path in sorted(glob.glob(os.path.join(ROOT, 'experiments', '**', '*.py'), recursive=True)):
    if hits := run_file_names(path):
      spelled[os.path.relpath(path, ROOT)] = hits
  assert not spelled, f'use attention_jax.workdir.Run for these: {spelled}'


def tree_paths(doc: str) -> set[str]:
  """The paths of docs/layout.md's first tree (its first ``` block), from the indentation (two
  spaces a level; a line indented further continues a description): 'attention_jax/',
  'attention_jax/models/scores.py', 'attention_jax/data/', ..."""
  block = re.search(r'```\n(.*?)```', doc, re.S).group(1)
  paths, stack = set(), []                     # stack: (indent, folder)
  for line in block.splitlines():
    m = re.match(r'^( *)(\S+)', line)
    if not m or not (m.group(2).endswith('/') or m.group(2).endswith('.py')):
      continue
    indent, entry = len(m.group(1)), m.group(2)
    if indent > (stack[-1][0] + 2 if stack else 0):
      continue                                 # a description's next line
    while stack and stack[-1][0] >= indent:
      stack.pop()
    path = ''.join(folder for _, folder in stack) + entry
    paths.add(path)
    if entry.endswith('/'):
      stack.append((indent, entry))
  return paths


def test_tree_paths_follow_the_indentation():
  doc = '```\na/\n  b.py   text\n         more.py text\n  c/     text\n    d.py\n  e.py\nf/\n```'
  assert tree_paths(doc) == {'a/', 'a/b.py', 'a/c/', 'a/c/d.py', 'a/e.py', 'f/'}


def test_docs_layout_names_every_module_where_it_lives_and_its_layer_chains_hold():
  """docs/layout.md's tree names every module of the package in its folder (and no module
  that does not exist), and each arrow `a <- b` of its `layers` block holds: b imports a,
  directly or through other modules."""
  with open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8') as f:
    doc = f.read()
  edges, _ = graph()
  listed = {p for p in tree_paths(doc) if p.startswith(f'{PACKAGE}/') and p.endswith('.py')}
  files = {os.path.relpath(path, ROOT) for name, path in modules().items()
           if not path.endswith('__init__.py') and not name.startswith(f'{PACKAGE}.data.')}
  assert len(files) > 40
  assert not files - listed, f'docs/layout.md does not name {sorted(files - listed)}'
  assert not listed - files, f'docs/layout.md names modules that do not exist: {sorted(listed - files)}'
  subpackages = {os.path.relpath(os.path.dirname(path), ROOT) + '/'
                 for path in modules().values() if path.endswith('__init__.py')}
  assert subpackages - {f'{PACKAGE}/'} <= tree_paths(doc), 'a subpackage is missing'

  def reaches(b: str, a: str) -> bool:
    seen, todo = set(), [f'{PACKAGE}.{b}']
    while todo:
      for v in edges.get(todo.pop(), ()):
        if v not in seen:
          seen.add(v)
          todo.append(v)
    return f'{PACKAGE}.{a}' in seen

  chains = re.search(r'```layers\n(.*?)```', doc, re.S).group(1).strip().splitlines()
  assert len(chains) >= 3
  wrong = [f'{a} <- {b}' for chain in chains
           for a, b in zip(chain.split(' <- '), chain.split(' <- ')[1:])
           if not reaches(b.strip(), a.strip())]
  assert not wrong, f'docs/layout.md claims imports that do not exist: {wrong}'
  assert not reaches('models.model', 'training.train')      # the check can fail


def test_each_subpackage_says_what_lives_in_it_and_names_its_modules():
  """Every subpackage has a docstring of a paragraph that names each of its modules."""
  mods = modules()
  for name, path in mods.items():
    if not path.endswith('__init__.py') or name == PACKAGE:
      continue
    doc = ast.get_docstring(ast.parse(open(path, encoding='utf-8').read())) or ''
    assert len(doc) > 100, f'{name} has no docstring that says what lives in it'
    if name == f'{PACKAGE}.data':
      continue
    inside = [m.rsplit('.', 1)[1] for m in mods if m.startswith(name + '.')]
    unnamed = [m for m in inside if not re.search(rf'\b{m}\b', doc)]
    assert not unnamed, f'{name} docstring does not name {unnamed}'


def test_no_two_modules_of_the_package_share_a_name():
  """One name per idea: no two modules (in any folder of the package) of one file name."""
  where: dict[str, list[str]] = {}
  for name, path in modules().items():
    if not path.endswith('__init__.py'):
      where.setdefault(os.path.basename(path), []).append(name)
  shared = {base: mods for base, mods in where.items() if len(mods) > 1}
  assert not shared, f'modules of one name in several folders: {shared}'


def test_no_two_public_classes_of_the_package_share_a_name():
  """One name per idea: a class name (not starting with _) is defined in one module only."""
  where: dict[str, list[str]] = {}
  for name, path in modules().items():
    for node in ast.parse(open(path, encoding='utf-8').read()).body:
      if isinstance(node, ast.ClassDef) and not node.name.startswith('_'):
        where.setdefault(node.name, []).append(name)
  assert len(where) > 40
  shared = {cls: mods for cls, mods in where.items() if len(mods) > 1}
  assert not shared, f'classes of one name in several modules: {shared}'
