"""Every file of experiments/configs trains: its `smoke` config (files found, not listed: a
new one is trained with no edit here) runs 2 train steps, an evaluation and a checkpoint on
its own data, the real TFDS translation set under tfds.testing.mock_data and the text-file
task on a small corpus written here; every test sentence falls in a length band, only a
task with gold alignments reports alignment accuracy, and G2P reports WER and PER. A config
file whose model or data no longer builds fails here, not in a user's first run. About 4
minutes on 2 cores, so marked `configs`: deselected from `bash launch.sh test`; CI runs it
after the suite (.ci/run)."""

import contextlib
import glob
import os
import runpy

import numpy as np
import pytest

from attention_jax.training import train

import helpers

pytestmark = pytest.mark.configs

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'experiments', 'configs')
CONFIG_FILES = sorted(p for p in glob.glob(os.path.join(CONFIGS, '*.py'))
                      if not p.endswith(('__init__.py', 'common.py')))


@pytest.mark.parametrize('path', CONFIG_FILES, ids=os.path.basename)
def test_every_config_files_smoke_variant_trains_two_steps(path, tmp_path):
  cfg = runpy.run_path(path)['get_config']('smoke')
  cfg.data.data_dir = str(tmp_path / 'tfds')
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2, log_every=1)
  cfg.eval.heatmaps = 0
  data = contextlib.nullcontext()
  if cfg.data.name == 'textfiles':
    cfg.data.update(textfiles_dir=helpers.corpus(tmp_path / 'corpus'), tokenizer='word')
  elif cfg.data.name == 'tfds':                      # the real loading code, mocked examples
    tfds = pytest.importorskip('tensorflow_datasets')
    pytest.importorskip('tensorflow')                # tfds.testing needs it (the test extra)
    cfg.data.vocab_size = 64
    data = tfds.testing.mock_data(num_examples=8)
  with data:
    summary = train.train_and_evaluate(cfg, str(tmp_path / 'run'))
  assert summary['step'] == 2, path
  for split, figures in summary['results'].items():
    assert np.isfinite(figures['loss']), (path, split, figures)
  test, name = summary['results']['test'], os.path.basename(path)
  # the length bands hold every test sentence; alignment accuracy is reported for reverse,
  # whose task knows its gold alignment, and not for addition, whose task does not
  assert sum(r['sentences'] for r in test['by_length']) == test['sentences'], path
  if name == 'reverse.py':
    assert 0.0 <= test['alignment_accuracy'] <= 100.0
  elif name == 'addition.py':
    assert 'alignment_accuracy' not in test
  elif name == 'textfiles.py':
    assert test['sentences'] == 8          # the corpus' test file (helpers.corpus)
  elif name == 'cmudict.py':               # G2P: word and phoneme error rates, per band too
    assert test['sentences'] == 32
    assert 0 <= test['wer'] <= 100 and 0 <= test['per'] < np.inf   # PER passes 100 on junk
    assert {r['bucket'] for r in test['by_length']} <= {'1-3', '4-7', '8-11', '12-15', '16-19'}
    assert all('wer' in r and 'per' in r for r in test['by_length'])
