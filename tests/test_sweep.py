"""Sweeps: every variant runs into its own workdir, a failing variant does not stop the
others, a re-run skips finished variants, and the report is written; with seeds, every
variant runs under seeds 1..N, the seeds give other parameters on the same test sentences,
and raising N runs only the new seeds."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from attention_jax import api, multihead, records, stats, sweep
from helpers import TINY_SWEEP as SWEEP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sweep(path, root, data_dir, *flags):
  args = [sys.executable, '-m', 'experiments.sweep', f'--sweep={path}:smoke', f'--root={root}',
          *flags, '--', f'--config.data.data_dir={data_dir}']
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


SEED_SWEEP = """
from experiments.configs import dates

SEEDS = 5    # --seeds wins

def get_config(arg=None):
  return dates.get_config(arg)

def get_sweep(arg=None):
  return [('additive', {'model.score': 'additive'})]
"""


def test_seeds_give_other_parameters_on_the_same_test_set(tmp_path):
  path = tmp_path / 'seed_sweep.py'
  path.write_text(SEED_SWEEP)
  root, data_dir = tmp_path / 'runs', tmp_path / 'tfds'
  first = run_sweep(path, root, data_dir, '--seeds=2')
  assert first.returncode == 0, first.stdout + first.stderr
  variant = root / 'seed_sweep_smoke' / 'additive'
  assert sorted(os.listdir(variant)) == ['seed_1', 'seed_2']
  loaded = [api.load(str(variant / f'seed_{k}')) for k in (1, 2)]
  assert [json.loads((variant / f'seed_{k}' / 'config.json').read_text())['seed']
          for k in (1, 2)] == [1, 2]
  leaves = [jax.tree.leaves(t.params) for t in loaded]
  assert any(not np.array_equal(a, b) for a, b in zip(*leaves))     # another init / training
  heads = [records.read(records.path(str(variant / f'seed_{k}'), 'test')) for k in (1, 2)]
  assert heads[0][0]['fingerprint'] == heads[1][0]['fingerprint']   # the same test sentences
  assert [r['id'] for r in heads[0][1]] == [r['id'] for r in heads[1][1]]
  for k, (header, recs) in zip((1, 2), heads):   # the records reproduce the run's results
    res = json.loads((variant / f'seed_{k}' / 'results.json').read_text())['results']['test']
    assert header['sentences'] == res['sentences']
    for m in ('bleu', 'chrf', 'exact_match'):
      assert stats.corpus_score(records.stats(recs, m), m, header['bleu_tokenize']) == (
          pytest.approx(res[m], abs=1e-9))

  second = run_sweep(path, root, data_dir, '--seeds=3')
  out = second.stdout + second.stderr
  assert second.returncode == 0, out
  assert '[additive/seed_1] finished earlier' in out and '[additive/seed_2] finished earlier' in out
  assert '[additive/seed_3] starting: model.score=additive seed=3' in out
  assert 'sweep seed_sweep_smoke: 1 finished, 2 skipped, 0 failed' in out
  assert '| additive | 3 |' in (root / 'seed_sweep_smoke' / 'summary.md').read_text()


def test_seeds_from_the_sweep_file_and_a_single_seed_run_in_the_way(tmp_path):
  path = tmp_path / 'seed_sweep.py'
  path.write_text(SEED_SWEEP)
  _, runs = sweep.load_sweep(str(path), root=str(tmp_path))
  assert [v.label for v in runs] == [f'additive/seed_{k}' for k in range(1, 6)]
  assert sweep.command(str(path), runs[2])[-2:] == [
      '--config.seed=3', f'--workdir={tmp_path}/seed_sweep/additive/seed_3']
  assert len(sweep.load_sweep(str(path), root=str(tmp_path), seeds=2)[1]) == 2
  os.makedirs(tmp_path / 'seed_sweep' / 'additive')
  (tmp_path / 'seed_sweep' / 'additive' / 'config.json').write_text('{}')
  with pytest.raises(ValueError, match='holds a single-seed run of variant .additive.'):
    sweep.load_sweep(str(path), root=str(tmp_path))
  with pytest.raises(ValueError, match='seeds must be a whole number >= 1, got 0'):
    sweep.load_sweep(str(path), root=str(tmp_path / 'x'), seeds=0)
