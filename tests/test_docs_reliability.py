"""docs/reliability.md's guarantees table names, for each fault, the tests that show what
happens: each named test must exist and be run by CI (not marked `slow`); and the guards
that keep the promise (its `guard` column): each named guard is in tests/guards.toml, each
guard there is named by a row, and a row without one says why (a cell starting with —). A name is a
backticked `file.py` (some test of it), `file.py::test_name` (that test),
`file.py::test_name_prefix...` (a test whose name starts so), or `::test_...` (in the file
named before it in the same cell); files are under tests/. A row must name at least one
test_*.py (a script such as tests/fault_injection.py may be named beside it)."""

import ast
import os
import re

import remove_guards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, 'docs', 'reliability.md')
NAME = re.compile(r'^(?:(?:tests/)?(?P<file>[\w/]+\.py))?(?:::(?P<test>\w+)(?P<prefix>\.\.\.)?)?$')


def table_rows(text: str) -> list[tuple[str, str, str]]:
  """(fault, test cell, guard cell) of every row of the table whose header is
  | fault | what happens | test | guard |."""
  lines = text.splitlines()
  start = next(i for i, l in enumerate(lines) if re.fullmatch(
      r'\|\s*fault\s*\|\s*what happens\s*\|\s*test\s*\|\s*guard\s*\|', l.strip()))
  rows = []
  for line in lines[start + 2:]:
    if not line.startswith('|'):
      break
    cells = [c.strip() for c in line.strip().strip('|').split(' | ')]
    rows.append((cells[0], cells[-2], cells[-1]))
  return rows


def named(cell: str) -> list[tuple[str, str | None, bool]]:
  """(file, test name or None, whether the name is a prefix) of each test a cell names."""
  out, last = [], None
  for item in re.findall(r'`([^`]+)`', cell):
    m = NAME.match(item)
    if not m or not (m['file'] or m['test']):
      continue
    file = m['file'] or last
    assert file, f'{item!r} names a test but no file before it'
    last = file
    out.append((file, m['test'], bool(m['prefix'])))
  return out


def ci_tests(path: str) -> tuple[set[str], set[str]]:
  """(names of the module-level test functions of a file, those marked slow)."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  tests, slow = set(), set()
  module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == 'pytestmark'
                                                      for t in n.targets)
                    and 'mark.slow' in ast.unparse(n.value) for n in tree.body)
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name.startswith('test'):
      tests.add(node.name)
      if module_slow or any(ast.unparse(d).startswith('pytest.mark.slow')
                            for d in node.decorator_list):
        slow.add(node.name)
  return tests, slow


def problems(text: str, tests_dir: str = os.path.join(ROOT, 'tests')) -> list[str]:
  """What is wrong with the tests the table names ([] if nothing); files under tests_dir."""
  found = []
  for fault, cell, _ in table_rows(text):
    names = named(cell)
    if not any(os.path.basename(f).startswith('test_') for f, _, _ in names):
      found.append(f'row {fault!r}: names no test_*.py file ({cell!r})')
    for file, test, prefix in names:
      path = os.path.join(tests_dir, file)
      if not os.path.isfile(path):
        found.append(f'row {fault!r}: no file tests/{file}')
        continue
      if not os.path.basename(file).startswith('test_'):
        continue   # a script beside the tests (tests/fault_injection.py)
      tests, slow = ci_tests(path)
      match = {t for t in tests if (t.startswith(test) if prefix else t == test)} if test \
          else tests
      if not match:
        found.append(f'row {fault!r}: no test {test}{"..." if prefix else ""} in tests/{file}')
      elif not match - slow:
        found.append(f'row {fault!r}: {file}::{test or "*"} is marked slow (CI does not run it)')
  return found


def guard_problems(text: str, guards: list[dict]) -> list[str]:
  """What is wrong with the table's guard column against the guard list ([] if nothing)."""
  found, named_here = [], set()
  known = {g['name'] for g in guards}
  for fault, _, cell in table_rows(text):
    names = re.findall(r'`([^`]+)`', cell)
    if not names and not cell.startswith('— ('):
      found.append(f'row {fault!r}: names no guard, nor why not (a cell "— (reason)")')
    for name in names:
      named_here.add(name)
      if name not in known:
        found.append(f'row {fault!r}: no guard {name!r} in tests/guards.toml')
  found += [f'guard {n!r} of tests/guards.toml: no row of the table names it'
            for n in sorted(known - named_here)]
  return found


def test_every_test_the_reliability_table_names_exists_and_ci_runs_it():
  with open(DOC, encoding='utf-8') as f:
    text = f.read()
  assert len(table_rows(text)) >= 30
  assert problems(text) == []


def test_every_row_names_its_guards_and_every_guard_has_its_row():
  with open(DOC, encoding='utf-8') as f:
    text = f.read()
  assert guard_problems(text, remove_guards.load()) == []


ROW = '| fault | what happens | test | guard |\n|---|---|---|---|\n| x | y | {} | {} |\n'


def test_the_check_finds_a_made_up_name_a_missing_file_and_a_slow_test(tmp_path):
  row = lambda cell: ROW.format(cell, '`g`')
  assert problems(row('`test_guards.py::test_an_unusable_workdir_...`')) == []
  assert problems(row('`test_guards.py::test_no_such_thing_...`'))
  assert problems(row('`test_guards.py::test_an_unusable_workdir`'))   # not a prefix
  assert problems(row('`test_nowhere.py`'))
  assert problems(row('`tests/fault_injection.py`'))   # no test_*.py in the row
  (tmp_path / 'test_x.py').write_text('import pytest\n\n@pytest.mark.slow\ndef test_long():\n'
                                      '  pass\n')
  assert 'marked slow' in problems(row('`test_x.py::test_long`'), str(tmp_path))[0]


def test_the_guard_check_finds_an_unknown_guard_an_unnamed_one_and_a_row_without_a_reason():
  guards = [{'name': 'a'}, {'name': 'b'}]
  assert guard_problems(ROW.format('t', '`a`, `b`'), guards) == []
  assert guard_problems(ROW.format('t', '`a`, `c`'), guards) == [
      "row 'x': no guard 'c' in tests/guards.toml",
      "guard 'b' of tests/guards.toml: no row of the table names it"]
  assert guard_problems(ROW.format('t', '—'), guards)[0].startswith("row 'x': names no guard")
  assert guard_problems(ROW.format('t', '— (its test takes an hour)'), []) == []
