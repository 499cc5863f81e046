"""Every command's help: `bash launch.sh --help` lists the commands, and `bash launch.sh CMD
--help` prints the command's usage and exits 0, without its required flags or files. The
commands are taken from launch.sh itself, so a new command is covered when it is added."""

import os
import re
import subprocess

import pytest

from helpers import ROOT

LAUNCH = os.path.join(ROOT, 'launch.sh')


def commands() -> list[str]:
  """The command names of launch.sh's `case "$cmd"` (the labels of its branches)."""
  with open(LAUNCH) as f:
    return re.findall(r'^  ([a-z][a-z-]*)\)$', f.read(), re.M)


def launch(*args) -> subprocess.Popen:
  return subprocess.Popen(['bash', LAUNCH, *args], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def test_launch_help_lists_every_command():
  names = commands()
  assert {'main', 'test', 'train', 'sweep', 'evaluate', 'translate', 'data-info'} <= set(names)
  for flag in ('--help', 'help'):
    proc = launch(flag)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    for name in names:
      if name != 'main':   # the default: `bash launch.sh` with no command
        assert f'bash launch.sh {name}' in out, (name, out)
  proc = launch('bogus')
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 2 and "unknown command 'bogus'" in err and 'bash launch.sh train' in err


@pytest.mark.extended   # every command started at once (about 15 interpreters, 25 s): after the suite, in CI
def test_every_command_s_help_prints_its_usage_and_exits_0():
  procs = {name: launch(name, '--help') for name in commands()}   # all at once
  for name, proc in procs.items():
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (name, err[-2000:])
    assert re.search(r'usage|python -m|bash launch.sh', out, re.I), (name, out[:500])
  proc = launch('train', '--helpfull')
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0 and '--config' in out, err[-2000:]


def test_alignment_study_refuses_a_flag_as_its_root_in_one_line(tmp_path):
  """The study's one argument is a directory: a flag (a mistyped --help) is refused, not made
  into a directory named after it (CI once saw `mkdir: unrecognized option '--help/...'`); an
  unknown variant in ONLY is refused, naming the valid ones, before anything is made."""
  for args, only, said in (
      (['--bogus'], '', "unknown flag '--bogus'"),
      ([str(tmp_path / 'a'), str(tmp_path / 'b')], '', 'one ROOT directory expected'),
      ([str(tmp_path / 'r')], 'general bogus',
       "ONLY names 'bogus', not a variant of experiments/configs/greek_english.py; valid: "
       'additive guided ')):
    proc = subprocess.Popen(['bash', LAUNCH, 'alignment-study', *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, 'ONLY': only})
    out, err = proc.communicate(timeout=120)
    lines = [l for l in err.splitlines() if not l.startswith('[launch]')]   # (a venv set up)
    assert proc.returncode == 2 and said in err and len(lines) == 1, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
