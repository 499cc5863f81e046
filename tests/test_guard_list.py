"""The guard list (tests/guards.toml) and the script that removes each guard
(tests/remove_guards.py): the list holds the guards docs/reliability.md promises, each edit
applies and each named test exists (here, in a second); in CI's extended tier, each guard
removed in a copy of the tree fails its named test."""

import os
import subprocess
import sys

import pytest

import remove_guards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'tests', 'remove_guards.py')


def test_the_list_holds_at_least_20_guards_whose_edits_apply_and_whose_tests_exist():
  guards = remove_guards.load()
  assert len(guards) >= 20
  assert remove_guards.problems(guards) == []


def test_a_guard_whose_test_is_gone_or_whose_edit_no_longer_applies_is_named(tmp_path):
  """The script fails naming the guard (exit 1) when its test was removed or renamed, or its
  `find` is no longer in its file (or twice)."""
  g = next(g for g in remove_guards.load() if g['name'] == 'workdir-lock')
  gone = {**g, 'tests': [g['tests'][0].replace('::test_', '::test_no_longer_')]}
  stale = {**g, 'name': 'stale', 'find': g['find'] + '  # edited since'}
  twice = {**g, 'name': 'twice', 'find': '\n'}
  name = gone['tests'][0].split('::')[1]
  assert remove_guards.problems([gone, stale, twice]) == [
      f'guard workdir-lock: no test {name} in tests/test_guards.py',
      f'guard stale: its edit no longer applies: `find` occurs 0 times in {g["file"]} (once '
      f'expected): {stale["find"]!r}',
      f'guard twice: its edit no longer applies: `find` occurs '
      f'{open(os.path.join(ROOT, g["file"])).read().count(chr(10))} times in {g["file"]} (once '
      "expected): '\\n'"]
  listed = tmp_path / 'guards.toml'
  listed.write_text(f'[[guard]]\nname = "workdir-lock"\nfile = "{g["file"]}"\n'
                    f'find = {g["find"]!r}\nreplace = "      pass"\ntests = ["{gone["tests"][0]}"]\n')
  proc = subprocess.run([sys.executable, SCRIPT, f'--list={listed}'], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert proc.stdout.splitlines() == [
      f'guard workdir-lock: no test {name} in tests/test_guards.py',
      f'FAILED: 1 problem(s) in {os.path.relpath(str(listed), ROOT)}']


@pytest.mark.extended   # a guard the named test does not see: one pytest process (10 s)
def test_a_guard_that_survives_its_removal_fails_the_script_naming_it(tmp_path):
  listed = tmp_path / 'guards.toml'
  listed.write_text(   # the lock removed, and a test that takes no lock
      '[[guard]]\nname = "unnoticed"\nfile = "attention_jax/workdir.py"\n'
      'find = "      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"\nreplace = "      pass"\n'
      'tests = ["tests/test_tiers.py::test_tuple_values_fill_several_arguments_and_ids_name_the_case"]\n')
  proc = subprocess.run([sys.executable, SCRIPT, f'--list={listed}', '--baseline=none'], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert 'guard unnoticed (attention_jax/workdir.py): SURVIVED' in proc.stdout, proc.stdout
  assert proc.stdout.splitlines()[-1].startswith(
      'FAILED: 1 guard(s) survived their removal (unnoticed)'), proc.stdout


@pytest.mark.extended   # one pytest process per guard: minutes
def test_every_guard_removed_fails_a_named_test():
  """(The named tests on the unchanged tree: the canary only; CI's tiers run them all.)"""
  proc = subprocess.run([sys.executable, SCRIPT, '--baseline=canary'], cwd=ROOT,
                        capture_output=True, text=True, timeout=3600)
  print(proc.stdout)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1].startswith('every guard removed fails a test')
