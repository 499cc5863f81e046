"""Sweeps: every variant runs into its own workdir, a failing variant does not stop the
others, a re-run skips finished variants, and the report is written."""

import os
import subprocess
import sys

import pytest

from attention_jax import multihead, sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SWEEP = '''
from experiments.configs import dates

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'}),
          ('broken', {'model.attn_dim': -3}),
          ('general', {'model.score': 'general', 'model.decoder': 'luong'})]
'''


def run_sweep(path, root, data_dir):
  args = [sys.executable, '-m', 'experiments.sweep', f'--sweep={path}:smoke', f'--root={root}',
          '--', f'--config.data.data_dir={data_dir}']
  return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_sweep_runs_reports_and_skips_finished_variants(tmp_path):
  path = tmp_path / 'tiny_sweep.py'
  path.write_text(SWEEP)
  root, data_dir = tmp_path / 'runs', tmp_path / 'tfds'
  first = run_sweep(path, root, data_dir)
  out = first.stdout + first.stderr
  assert first.returncode == 1, out               # one variant failed: the sweep says so
  assert '[broken] FAILED' in out and 'model.attn_dim must be a positive integer' in (
      root / 'tiny_sweep_smoke' / 'broken' / 'train.log').read_text()
  sweep_dir = root / 'tiny_sweep_smoke'
  for v in ('additive', 'general'):
    assert (sweep_dir / v / 'results.json').exists(), out
  for f in ('summary.md', 'summary.csv', 'bars.png', 'bleu_by_length.png'):
    assert (sweep_dir / f).exists(), f
  assert '| additive | 1 |' in (sweep_dir / 'summary.md').read_text()

  second = run_sweep(path, root, data_dir)
  out2 = second.stdout + second.stderr
  assert '[additive] finished earlier (results.json exists), skipping' in out2
  assert '[general] finished earlier (results.json exists), skipping' in out2
  assert '[broken] starting' in out2            # failed variants are tried again


def test_transformer_scores_sweep_arguments():
  """Its variants are the 7 content scores; a task and 'smoke' combine; a bad argument fails
  before any variant runs, naming the valid ones."""
  path = os.path.join(ROOT, 'experiments', 'configs', 'transformer_scores.py')
  name, variants = sweep.load_sweep(f'{path}:reverse,smoke', root='/tmp/x')
  assert name == 'transformer_scores_reverse_smoke'
  assert [v.name for v in variants] == multihead.content_scores()
  with pytest.raises(ValueError, match="unknown config argument 'bogus'; valid: a task"):
    sweep.load_sweep(f'{path}:bogus')
  assert sweep.select(variants, ['scaled_*']) == [v for v in variants if v.name.startswith(
      'scaled_')]
  with pytest.raises(ValueError, match="--only pattern 'nope' matches no variant; variants: "
                                       'additive'):
    sweep.select(variants, ['nope'])
