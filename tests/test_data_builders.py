"""The offline TFDS builders: each prepares in a temp dir, deterministically, without
TensorFlow, into disjoint splits of well-formed examples. A new entry of
attention_jax.data.BUILDERS is picked up here; it then needs a checker in CHECKS."""

import datetime
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from attention_jax import data
from attention_jax.data import builders

import helpers

SIZES = {'train': 300, 'validation': 40, 'test': 40}


def _check_dates(src, tgt, split, cfg):
  day = datetime.date.fromisoformat(tgt)
  assert builders.FIRST_DATE <= day <= builders.LAST_DATE
  assert str(day.year) in src or f'{day.year % 100:02d}' in src


def _check_symbols(target):
  def check(src, tgt, split, cfg):
    hi = cfg.test_max_len if split == 'test' else cfg.max_len
    assert cfg.min_len <= len(src) <= hi
    assert set(src) <= set(builders.SYMBOLS[:cfg.num_symbols])
    assert tgt == target(src)
  return check


def _check_addition(src, tgt, split, cfg):
  a, b = src.split('+')
  assert 1 <= len(a) <= 4 and 1 <= len(b) <= 4 and int(tgt) == int(a) + int(b)
  assert str(int(a)) == a and str(int(b)) == b  # no leading zeros


CHECKS = {'dates': _check_dates, 'copy': _check_symbols(lambda s: s),
          'reverse': _check_symbols(lambda s: s[::-1]),
          'sort': _check_symbols(lambda s: ''.join(sorted(s))), 'addition': _check_addition}


def _read(builder):
  sources = builder.as_data_source()
  return {split: [{k: v.decode() for k, v in sources[split][i].items()}
                  for i in range(len(sources[split]))] for split in SIZES}


def test_every_builder_has_a_check():
  assert set(CHECKS) == set(data.BUILDERS)


@pytest.mark.parametrize('name', sorted(data.BUILDERS))
def test_builder_prepares_well_formed_disjoint_splits(name, data_cfg, tfds_dir):
  cfg = data_cfg(name)
  builder = data.prepare(name, cfg)
  assert str(builder.data_dir).startswith(tfds_dir)
  assert builder.builder_config.name in str(builder.data_dir)
  examples = _read(builder)
  assert {s: len(v) for s, v in examples.items()} == SIZES
  sources = {}
  for split, exs in examples.items():
    for ex in exs:
      assert ex['src'] and ex['tgt'] and ex['src'] == ex['src'].strip()
      CHECKS[name](ex['src'], ex['tgt'], split, cfg)
    sources[split] = {ex['src'] for ex in exs}
    assert len(sources[split]) == len(exs), f'{split} has a duplicate source'
  assert not sources['train'] & sources['validation']
  assert not sources['train'] & sources['test']
  assert not sources['validation'] & sources['test']


@pytest.mark.parametrize('name', ['reverse', 'dates'])
def test_builder_is_deterministic_and_parameters_pick_the_directory(name, data_cfg, tmp_path):
  a = _read(data.prepare(name, data_cfg(name)))
  b = _read(data.prepare(name, data_cfg(name, data_dir=str(tmp_path))))
  assert a == b  # same config, fresh directory: the same examples in the same order
  other = data.prepare(name, data_cfg(name, data_dir=str(tmp_path), seed=1))
  assert other.builder_config.name.endswith('_seed1')
  assert _read(other)['train'] != a['train']
  assert sorted(os.listdir(tmp_path / f'aj_{name}')) == sorted(
      [data.prepare(name, data_cfg(name)).builder_config.name, other.builder_config.name])


def test_test_set_does_not_depend_on_train_size(data_cfg, tmp_path):
  small = _read(data.prepare('copy', data_cfg('copy', data_dir=str(tmp_path))))
  large = _read(data.prepare('copy', data_cfg('copy', data_dir=str(tmp_path), num_train=500)))
  assert small['test'] == large['test'] and small['validation'] == large['validation']


def test_symbol_test_split_is_longer(data_cfg):
  examples = _read(data.prepare('copy', data_cfg('copy', max_len=10, test_max_len=30)))
  assert max(len(e['src']) for e in examples['train']) <= 10
  assert max(len(e['src']) for e in examples['test']) > 10


def test_too_small_task_space_fails_clearly(data_cfg):
  with pytest.raises(ValueError, match='task space is too small'):
    data.prepare('copy', data_cfg('copy', min_len=1, max_len=1, test_max_len=1, num_symbols=3))


def test_bad_parameters_fail_clearly(data_cfg):
  with pytest.raises(ValueError, match='min_len'):
    data.prepare('reverse', data_cfg('reverse', min_len=5, max_len=3))
  with pytest.raises(ValueError, match='num_symbols'):
    data.prepare('reverse', data_cfg('reverse', num_symbols=100))
  with pytest.raises(ValueError, match='valid: dates'):
    data.prepare('nope', data_cfg('dates'))


def test_date_formats_cover_locales_and_styles_and_are_unambiguous():
  formats = builders.date_formats()
  assert {loc for loc, *_ in formats} >= {'en', 'de', 'fr', 'es'}
  for loc in ('en', 'de', 'fr'):
    assert {s for l, s, *_ in formats if l == loc} >= set(builders.CLDR_STYLES)
  day = datetime.date(2026, 11, 22)
  texts = {(loc, style): fn(day) for loc, style, _, fn in formats}
  assert texts['de', 'full'] == 'Sonntag, 22. November 2026'  # CLDR via Babel
  assert texts['en', 'ordinal_of'] == '22nd of November 2026'
  assert texts['en', 'short'] == '11/22/26'
  # A source string never stands for two dates (the full range is checked the same way by
  # the generator itself; here a sample with every day-of-month and month).
  rng = np.random.default_rng(0)
  seen = {}
  span = (builders.LAST_DATE - builders.FIRST_DATE).days
  for offset in rng.integers(span, size=1500):
    d = builders.FIRST_DATE + datetime.timedelta(days=int(offset))
    for _, _, two_digit, fn in formats:
      if two_digit and not builders.TWO_DIGIT_YEARS[0] <= d.year <= builders.TWO_DIGIT_YEARS[1]:
        continue
      assert seen.setdefault(fn(d), d) == d, fn(d)


def test_dates_use_many_formats(data_cfg):
  builder = data.prepare('dates', data_cfg('dates'))
  train = builder.as_data_source()['train']
  locales = {train[i]['locale'].decode() for i in range(len(train))}
  styles = {train[i]['style'].decode() for i in range(len(train))}
  assert locales == {'en', 'de', 'fr', 'es'}
  assert styles >= set(builders.CLDR_STYLES) | {'ordinal_of', 'mm/dd/yy'}


@pytest.mark.parametrize('name', ['copy', 'reverse', 'sort'])
def test_gold_alignment_points_at_the_same_symbol(name):
  src = np.array([5, 7, 5, 6, 9, 5])
  tgt = {'copy': src, 'reverse': src[::-1], 'sort': np.sort(src, kind='stable')}[name]
  gold = data.gold_alignment(name, src, tgt)
  assert gold.dtype == np.int32 and gold.shape == (len(tgt) + 1,)
  np.testing.assert_array_equal(src[gold[:-1]], tgt)
  assert gold[-1] == len(src)  # EOS -> the source EOS
  assert sorted(gold[:-1].tolist()) == list(range(len(src)))  # a permutation
  if name == 'reverse':
    np.testing.assert_array_equal(gold[:-1], np.arange(len(src))[::-1])


def test_no_gold_alignment_for_dates_and_addition():
  assert data.gold_alignment('dates', [4, 5], [6]) is None
  assert data.gold_alignment('addition', [4, 5], [6]) is None


def test_runtime_path_does_not_import_tensorflow(tfds_dir):
  code = f"""
import sys
from experiments.configs import common
from attention_jax import data
d = common.base_config().data
d.update(dict(name='reverse', data_dir={tfds_dir!r}, num_train=50, num_valid=5, num_test=5,
              max_len=8, test_max_len=8))
task = data.load_task(d)
next(iter(task.train_iterator(8)))
list(task.eval_batches('test', 8))
assert 'tensorflow' not in sys.modules, 'tensorflow was imported'
print('ok')
"""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {**os.environ, 'PYTHONPATH': root + os.pathsep + os.environ.get('PYTHONPATH', '')}
  out = subprocess.run([sys.executable, '-c', code], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 0 and 'ok' in out.stdout, out.stderr[-3000:]


PREPARE = """
import sys
from experiments.configs import common
from attention_jax import data
d = common.base_config().data
d.update(dict(name='copy', data_dir=sys.argv[1], num_train=2000, num_valid=5, num_test=5,
              max_len=8, test_max_len=8))
print(len(data.prepare('copy', d).as_data_source()['train']))
"""


def flock_waiters() -> set[int]:
  """The pids blocked waiting for a flock (/proc/locks' `->` lines)."""
  with open('/proc/locks', encoding='utf-8') as f:
    return {int(line.split()[5]) for line in f if '-> FLOCK' in line}


@pytest.mark.scenario
@pytest.mark.skipif(not os.path.exists('/proc/locks'), reason='needs Linux /proc/locks')
def test_concurrent_prepares_of_one_data_set_all_succeed(tmp_path):
  """A sweep's runs start together: each may find the data set missing; all must get it
  (unlocked, all but one failed renaming their copy into place). Forced to overlap (hold.py):
  the first is held while it generates the data (point 'data_generate', inside its lock);
  each next one is started then, and waited for until it is held generating too (no lock)
  or waits for the lock (/proc/locks); then all are released at once."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  data_dir = tmp_path / 'tfds'
  procs, held = [], [tmp_path / f'held_{k}' for k in range(3)]
  try:
    for k, file in enumerate(held):
      env = {**helpers.hold_env(file, at='data_generate'),
             'PYTHONPATH': root + os.pathsep + os.environ.get('PYTHONPATH', '')}
      proc = subprocess.Popen([sys.executable, '-c', PREPARE, str(data_dir)], cwd=root, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
      procs.append(proc)
      deadline = time.time() + 300   # a hang guard only
      while not (file.exists() or (k and proc.pid in flock_waiters())):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.time() < deadline, 'neither held nor waiting for the lock'
        time.sleep(0.02)
    while any(p.poll() is None for p in procs):   # released, and any that holds later too
      for file in held:
        file.unlink(missing_ok=True)
      assert time.time() < deadline + 300, 'the prepares did not finish'
      time.sleep(0.02)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p in procs:
    out, err = p.communicate()
    assert p.returncode == 0 and out.split()[-1:] == ['2000'], err[-2000:]
