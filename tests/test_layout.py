"""The package's layering, checked on its imports (an AST scan of attention_jax/): no import
cycle among its modules and none among its folders, which import one another downward in the
order docs/layout.md draws; no import hidden inside a function to dodge a cycle; every
module importable on its own in a fresh interpreter and documented by its docstring; one owner
of a run directory's file names; one module per file name and one class per name."""

import ast
import glob
import os
import re
import pkgutil
import subprocess
import sys

import pytest

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
  assert 'attention_jax.decoding.inference' in edges['attention_jax.loaded.translator']
  assert find_cycle(edges) is None, f'import cycle: {" -> ".join(find_cycle(edges))}'


def test_no_function_local_imports_of_package_modules():
  _, local = graph()
  assert not local, f'function-local imports of package modules: {local}'


# ---- the folders: attention_jax/'s subpackages, the top-level modules one node '.' ----------
TOP = '.'   # registry.py, symbols.py, workdir.py, lazy.py, hold.py


def folder_of(name: str, path: str) -> str | None:
  """'models' for attention_jax.models.scores and the package attention_jax.models itself,
  TOP for a top-level module (attention_jax.symbols), None for attention_jax/__init__.py (the
  public API: it may import anything, and is no folder)."""
  parts = name.split('.')
  if len(parts) == 1:
    return None
  if len(parts) == 2 and not path.endswith('__init__.py'):
    return TOP
  return parts[1]


def lazy_imports(path: str, known) -> set[str]:
  """The package modules a module imports by name through lazy.exports(...) (on first use of
  one of its names): imports the AST scan of import statements does not see."""
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'exports'):
      found |= {c.value for c in ast.walk(node)
                if isinstance(c, ast.Constant) and c.value in known}
  return found


def folder_links(edges: dict[str, set[str]], folders: dict[str, str | None]
                 ) -> dict[tuple[str, str], list[str]]:
  """{(folder a, folder b): ['module of a -> module of b' of each import that makes a import
  b]}, for a != b (a module's imports within its own folder are no folder link)."""
  links: dict[tuple[str, str], list[str]] = {}
  for u, vs in edges.items():
    for v in sorted(vs):
      a, b = folders[u], folders[v]
      if a is not None and a != b:
        links.setdefault((a, b), []).append(f'{u} -> {v}')
  return links


def package_folder_links() -> dict[tuple[str, str], list[str]]:
  mods = modules()
  edges, _ = graph()
  for name, path in mods.items():
    edges[name] = edges[name] | (lazy_imports(path, mods) - {name})
  return folder_links(edges, {name: folder_of(name, path) for name, path in mods.items()})


def folder_cycle(links: dict[tuple[str, str], list[str]]) -> str | None:
  """None, or the message naming a cycle among the folders and the imports that make it."""
  graph_: dict[str, set[str]] = {}
  for a, b in links:
    graph_.setdefault(a, set()).add(b)
  cycle = find_cycle(graph_)
  if cycle is None:
    return None
  return (f'the folders import each other: {" -> ".join(cycle)}; through '
          + '; '.join(f'{a} -> {b}: {", ".join(links[a, b])}' for a, b in zip(cycle, cycle[1:])))


def test_a_cycle_among_folders_is_named_with_the_imports_that_make_it():
  """The check below can fail, and says where: folder a imports b, b imports c, c imports a."""
  edges = {'p.a.x': {'p.b.y', 'p.a.w'}, 'p.b.y': {'p.c.z'}, 'p.c.z': {'p.a.w'}, 'p.a.w': set()}
  folders = {m: m.split('.')[1] for m in edges}
  links = folder_links(edges, folders)
  assert set(links) == {('a', 'b'), ('b', 'c'), ('c', 'a')}
  assert folder_cycle(links) == ('the folders import each other: a -> b -> c -> a; through '
                                 'a -> b: p.a.x -> p.b.y; b -> c: p.b.y -> p.c.z; '
                                 'c -> a: p.c.z -> p.a.w')
  del edges['p.c.z']
  assert folder_cycle(folder_links(edges, folders)) is None


def test_no_two_folders_import_each_other_directly_or_through_a_cycle():
  links = package_folder_links()
  folders = {f for link in links for f in link}
  assert {TOP, 'models', 'state', 'decoding', 'loaded', 'training', 'analysis', 'sweeps'} <= folders, folders
  assert ('loaded', 'state') in links              # a link the scan must see
  cycle = folder_cycle(links)
  assert cycle is None, cycle


def drawn_order(doc: str) -> dict[str, int]:
  """{folder: its level} from the ```folders block of a page: a line per level, bottom
  first; a line may name several folders (peers: neither imports the other); '#' starts a
  comment. Raises ValueError for a page without the block, or a folder named twice."""
  block = re.search(r'^```folders\n(.*?)^```', doc, re.S | re.M)
  if not block:
    raise ValueError('no ```folders block')
  order: dict[str, int] = {}
  for line in block.group(1).splitlines():
    names = [n.rstrip('/') or n for n in line.split('#')[0].replace(',', ' ').split()]
    level = len(set(order.values()))
    for name in names:
      if name in order:
        raise ValueError(f'{name} is drawn twice')
      order[name] = level
  return order


def upward_links(links: dict[tuple[str, str], list[str]], order: dict[str, int]) -> list[str]:
  """Each folder link that does not go strictly down the drawn order, with its imports."""
  return [f'{a} -> {b} ({", ".join(imports_)})' for (a, b), imports_ in sorted(links.items())
          if order[b] >= order[a]]


def test_drawn_order_reads_levels_bottom_first_and_catches_an_upward_import():
  doc = 'text\n```folders\n.        # the bottom\ndata, models\ndecoding/\n```\nmore\n'
  order = drawn_order(doc)
  assert order == {'.': 0, 'data': 1, 'models': 1, 'decoding': 2}
  links = {('decoding', 'models'): ['x'], ('models', '.'): ['y']}
  assert upward_links(links, order) == []
  links.update({('models', 'data'): ['p.models.m -> p.data.d'], ('.', 'decoding'): ['z']})
  assert upward_links(links, order) == ['. -> decoding (z)',
                                        'models -> data (p.models.m -> p.data.d)']
  with pytest.raises(ValueError, match='drawn twice'):
    drawn_order('```folders\ndata\nmodels data\n```\n')


def test_every_folder_imports_only_folders_below_it_in_the_order_docs_layout_draws():
  """docs/layout.md draws the folders' order (its ```folders block, bottom first): it names
  every folder once, and every import from one folder into another goes down that order."""
  with open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8') as f:
    order = drawn_order(f.read())
  actual = {folder_of(name, path) for name, path in modules().items()} - {None}
  assert set(order) == actual, (f'docs/layout.md draws {sorted(set(order) - actual)} that do '
                                f'not exist, and not {sorted(actual - set(order))}')
  wrong = upward_links(package_folder_links(), order)
  assert not wrong, f'imports up (or across) the order of docs/layout.md: {wrong}'


def test_the_seams_analysis_above_training_loaded_runs_above_the_decoding_kernels():
  """The after-the-fact analysis stands above training (which never imports it), the loaded
  run above the decoding kernels, and the kernels import nothing of implicit attention."""
  with open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8') as f:
    order = drawn_order(f.read())
  assert order['analysis'] > order['training'] > order['evaluation'], order
  assert order['loaded'] > order['decoding'] > order['implicit'], order
  links = package_folder_links()
  assert ('decoding', 'implicit') not in links, links[('decoding', 'implicit')]
  assert not [a for a, b in links if b == 'analysis'], 'a folder imports analysis/'
  assert ('analysis', 'loaded') in links and ('loaded', 'decoding') in links   # seen by the scan


def test_every_module_says_what_it_is_for_in_its_docstring():
  missing = []
  for name, path in modules().items():
    doc = ast.get_docstring(ast.parse(open(path, encoding='utf-8').read())) or ''
    if len(doc.split()) < 4:
      missing.append(name)
  assert not missing, f'modules without a docstring that says what they are for: {missing}'


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


# the dates task's examples (inputs and outputs in docstrings) are the only dates in the code:
# when a comment says what was measured or tried, and when, that belongs in the docs' "What
# was tried" tables or in git
EXAMPLE_DATES = {'2026-11-22', '1999-11-03'}


def test_no_code_comment_or_docstring_carries_a_date():
  found = []
  for path in glob.glob(os.path.join(ROOT, PACKAGE, '**', '*.py'), recursive=True):
    with open(path, encoding='utf-8') as f:
      for n, line in enumerate(f, 1):
        for date in re.findall(r'\b20\d\d-\d\d(?:-\d\d)?\b', line):
          if date not in EXAMPLE_DATES:
            found.append(f'{os.path.relpath(path, ROOT)}:{n}: {date}')
  assert not found, found


def _branches(path: str, test) -> list[str]:
  """'line: source' of each comparison in the module at `path` for which test(node) holds."""
  src = open(os.path.join(ROOT, PACKAGE, path), encoding='utf-8').read()
  return [f'{n.lineno}: {ast.unparse(n)}' for n in ast.walk(ast.parse(src))
          if isinstance(n, ast.Compare) and test(n)]


def test_the_parts_own_their_branches_no_arch_names_in_the_model_config_no_method_classes_in_attribution():
  """An arch says its own describe / variant / cache and memory widths / encoder rules
  (models/model.py asks ARCHS[arch]); an attribution method says what one sentence holds
  (Method.held, Method.bytes_per_row): a new arch or method edits neither module."""
  def arch_name(n):   # <anything>.arch == / != 'a string'
    sides = [n.left, *n.comparators]
    return (any(isinstance(s, ast.Attribute) and s.attr == 'arch' for s in sides)
            and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides))
  assert not _branches('models/model.py', arch_name)

  def class_identity(n):   # cls is SomeMethod
    return any(isinstance(op, (ast.Is, ast.IsNot)) for op in n.ops) and any(
        isinstance(s, ast.Name) and s.id == 'cls' for s in [n.left, *n.comparators])
  assert not _branches('implicit/attribution.py', class_identity)
  # the scan sees such branches
  assert _branches('models/transformer.py', lambda n: True)


# the source modality's own code: the source kinds, a loaded run's inputs per kind, and the
# encoders that declare what they read
MODALITY = {'models/sources.py', 'loaded/inputs.py', 'models/images.py', 'models/rnn_encoder.py',
            'models/encoders.py'}


def test_only_the_modality_s_own_code_branches_on_tokens_against_images():
  """Everything else asks the source kind (models/sources.py) or a loaded run's inputs
  (loaded/inputs.py) instead of comparing with 'tokens' or 'images' (25 such comparisons in
  11 modules before the seam)."""
  def names_a_kind(n):
    return any(isinstance(s, ast.Constant) and s.value in ('tokens', 'images')
               for s in [n.left, *n.comparators])
  found = {}
  for path in glob.glob(os.path.join(ROOT, PACKAGE, '**', '*.py'), recursive=True):
    rel = os.path.relpath(path, os.path.join(ROOT, PACKAGE))
    if rel not in MODALITY and (hits := _branches(rel, names_a_kind)):
      found[rel] = hits
  assert not found, found
  assert _branches('models/sources.py', lambda n: True)   # the scan reads the seam itself
