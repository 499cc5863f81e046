"""docs/tutorial.md runs: every command of its ```bash blocks and every ```python block, in
order, each exits 0, and what the tutorial says they write is there. A command of the
tutorial that breaks (a renamed flag, a moved file, a changed output) fails this test.

The tutorial's commands run as written, except for what makes them a test:
- each config file `experiments/configs/X.py[:arg]` gets the `smoke` argument (`X.py:smoke`,
  `X.py:arg,smoke`: tiny data and model, 8 steps), and its data go to a data dir of the test
  (`--config.data.data_dir`);
- `--config.train.steps=N` is dropped (the smoke config's 8 steps stay) and the smoke runs
  draw the heatmaps the real ones draw (`--config.eval.heatmaps=3`: smoke configs draw none);
- `runs/` becomes the test's temp folder, in commands and Python alike.
```text blocks are outputs shown, not run. Extended tier (CI runs it after the suite, .ci/run):
about 3 minutes on 2 cores."""

import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT

TUTORIAL = os.path.join(ROOT, 'docs', 'tutorial.md')


def blocks(text: str) -> list[tuple[str, int, str]]:
  """(language, line of the block's first line, code) of every ```bash and ```python block,
  in order; a bash block gives one item per command (lines ending in `\\` joined)."""
  found, lines, i = [], text.splitlines(), 0
  while i < len(lines):
    m = re.match(r'```(\w*)\s*$', lines[i].strip())
    i += 1
    if not m:
      continue
    start, body = i + 1, []
    while i < len(lines) and lines[i].strip() != '```':
      body.append(lines[i])
      i += 1
    i += 1
    if m.group(1) == 'python':
      found.append(('python', start, '\n'.join(body) + '\n'))
    elif m.group(1) == 'bash':
      command, first = '', None
      for n, line in enumerate(body, start):
        if not command and (not line.strip() or line.strip().startswith('#')):
          continue
        first = first or n
        command += line.rstrip()[:-1] + ' ' if line.rstrip().endswith('\\') else line
        if not line.rstrip().endswith('\\'):
          found.append(('bash', first, ' '.join(command.split())))
          command, first = '', None
  return found


def as_test(code: str, tmp: str, data_dir: str, language: str) -> str:
  """The tutorial's code as the test runs it (the module docstring's rules)."""
  code = re.sub(r'(?<![\w/.-])runs/', tmp + '/runs/', code)
  if language != 'bash':
    return code
  def smoke(m):
    arg = m.group(2)
    return f'{m.group(1)}:{arg[1:] + "," if arg else ""}smoke'
  code, configs = re.subn(r'(experiments/configs/\w+\.py)(:[\w,]+)?', smoke, code)
  code = re.sub(r'\s--config\.train\.steps=\d+', '', code)
  if configs and ' train ' in f' {code} ':
    code += ' --config.eval.heatmaps=3'
  if configs:
    code += f' --config.data.data_dir={data_dir}'
  return code


def files_named(text: str) -> list[str]:
  """The files under runs/tutorial/ that the tutorial names (with an extension; the
  placeholder seed_<k> and the glob seed_* aside)."""
  paths = re.findall(r'runs/tutorial/[\w./-]+\.(?:png|jsonl|json|md|src|ref)(?![\w.])', text)
  return sorted({p for p in paths if '<' not in p and '*' not in p})


def test_the_blocks_are_read_in_order_with_continued_lines_joined():
  text = ('intro\n```bash\n# a comment\nbash launch.sh train experiments/configs/dates.py \\\n'
          '    --workdir=runs/x\nprintf "a\\n" > runs/x/a.src\n```\n```text\nout\n```\n'
          '```python\nimport attention_jax as aj\n```\n')
  assert blocks(text) == [
      ('bash', 4, 'bash launch.sh train experiments/configs/dates.py --workdir=runs/x'),
      ('bash', 6, 'printf "a\\n" > runs/x/a.src'),
      ('python', 12, 'import attention_jax as aj\n')]
  cmd = as_test('bash launch.sh train experiments/configs/dates.py --workdir=runs/x '
                '--config.train.steps=600', '/t', '/d', 'bash')
  assert cmd == ('bash launch.sh train experiments/configs/dates.py:smoke --workdir=/t/runs/x '
                 '--config.eval.heatmaps=3 --config.data.data_dir=/d')
  assert as_test('x.py:vit', '/t', '/d', 'bash') == 'x.py:vit'   # not a config file
  assert 'experiments/configs/image_dates.py:vit,smoke' in as_test(
      'bash launch.sh data-info experiments/configs/image_dates.py:vit', '/t', '/d', 'bash')


@pytest.mark.extended   # about 3 minutes of smoke runs: after the suite, in CI (.ci/run)
def test_every_command_of_the_tutorial_runs_on_the_smoke_configs(tmp_path):
  with open(TUTORIAL, encoding='utf-8') as f:
    text = f.read()
  steps = blocks(text)
  assert sum(lang == 'bash' for lang, _, _ in steps) >= 8 and any(
      lang == 'python' for lang, _, _ in steps), 'the tutorial lost its commands?'
  tmp, data_dir = str(tmp_path), str(tmp_path / 'tfds')
  env = {**os.environ, 'PYTHONPATH': ROOT + os.pathsep + os.environ.get('PYTHONPATH', '')}
  outputs = {}
  for n, (language, line, code) in enumerate(steps):
    code = as_test(code, tmp, data_dir, language)
    if language == 'bash':
      args = ['bash', '-c', 'set -o pipefail; ' + code]
    else:
      script = tmp_path / f'block_{n}.py'
      script.write_text(code)
      args = [sys.executable, str(script)]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (
        f'docs/tutorial.md:{line} failed (exit {proc.returncode}): {code}\n'
        f'{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}')
    outputs[line] = proc.stdout + proc.stderr

  runs = tmp_path / 'runs' / 'tutorial'
  for variant in ('additive', 'location'):
    for seed in (1, 2):   # a population of 2 writes two runs
      assert (runs / variant / f'seed_{seed}' / 'results.json').is_file(), (variant, seed)
  missing = [p for p in files_named(text) if not os.path.isfile(os.path.join(tmp, p))]
  assert not missing, f'files the tutorial names that its commands did not write: {missing}'
  compared = [out for out in outputs.values() if 'Mean ± standard deviation over seeds' in out]
  assert compared, 'no compare output'
  for out in compared:   # means with 95% intervals, and the difference against the baseline
    assert re.search(r'\d ± \d+\.\d+ \[-?\d+\.\d+, -?\d+\.\d+\]', out), out[:3000]
    assert re.search(r'difference.*95% CI, seeds', out), out[:3000]
  python_out = outputs[max(line for lang, line, _ in steps if lang == 'python')]
  assert re.search(r"\['[^']*', '[^']*'\]", python_out), python_out   # translations printed
