"""Batches: only the declared bucket shapes, well-formed rows, every example once per epoch
and once in evaluation (never truncated), exact iterator resume, deterministic shuffling,
gold alignments that point at the right symbol."""

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_jax import data
from attention_jax.data import batching

B = 16


@pytest.fixture(scope='module')
def reverse_task(tfds_dir):
  from experiments.configs import common  # pylint: disable=g-import-not-at-top
  d = common.base_config().data
  d.update(dict(name='reverse', data_dir=tfds_dir, num_train=300, num_valid=40, num_test=40,
                max_len=12, test_max_len=20, batch_size=B))
  return data.load_task(d)


def _check_batch(task, batch, split, shapes):
  s, t = batch['src'].shape[1], batch['tgt_in'].shape[1]
  assert (s, t) in shapes
  assert batch['src'].shape[0] == batch['tgt_in'].shape[0] == B
  assert batch['src'].dtype == batch['tgt_in'].dtype == batch['tgt_out'].dtype == np.int32
  assert batch['weight'].dtype == np.float32 and batch['index'].dtype == np.int32
  texts = task.texts(split)
  for r in range(B):
    src, tgt_in, tgt_out = batch['src'][r], batch['tgt_in'][r], batch['tgt_out'][r]
    if batch['weight'][r] == 0:
      assert batch['index'][r] == -1 and not src.any() and not tgt_in.any() and not tgt_out.any()
      continue
    assert batch['weight'][r] == 1
    n, m = int((src != data.PAD).sum()), int((tgt_out != data.PAD).sum())
    assert src[n - 1] == data.EOS and not src[n:].any() and data.EOS not in src[:n - 1]
    assert tgt_out[m - 1] == data.EOS and tgt_in[0] == data.BOS
    np.testing.assert_array_equal(tgt_in[1:m], tgt_out[:m - 1])
    assert not tgt_in[m:].any() and not tgt_out[m:].any()
    src_text, tgt_text = texts[batch['index'][r]]
    assert task.src_tok.decode(src) == src_text  # never truncated
    assert task.tgt_tok.decode(tgt_out) == tgt_text


def test_train_batches_use_only_bucket_shapes_and_cover_an_epoch(reverse_task):
  task = reverse_task
  assert 1 <= len(task.buckets.shapes) <= 4
  for s, t in task.buckets.shapes:
    assert (s % 8 == 0 or s == 128) and (t % 8 == 0 or t == 128)
  it = task.train_iterator(B, seed=3)
  seen = []
  for _ in range(it.batches_per_epoch):
    batch = next(it)
    _check_batch(task, batch, 'train', task.buckets.shapes)
    seen += batch['index'][batch['weight'] > 0].tolist()
  assert sorted(seen) == list(range(300))  # every example once per epoch
  assert it.get_state()['epoch'] == 0
  next(it)
  assert it.get_state() == {**it.get_state(), 'epoch': 1, 'position': 1}


def test_train_shuffling_is_deterministic_per_seed_and_epoch(reverse_task):
  def order(seed, n):
    it = reverse_task.train_iterator(B, seed=seed)
    return [next(it)['index'].tolist() for _ in range(n)]
  per_epoch = reverse_task.train_iterator(B).batches_per_epoch
  a = order(0, 2 * per_epoch)
  assert a == order(0, 2 * per_epoch)
  assert a != order(1, 2 * per_epoch)
  assert a[:per_epoch] != a[per_epoch:]  # a new epoch is reshuffled


@pytest.mark.parametrize('steps', [0, 3, 'epoch_end', 'epoch_end+2'])
def test_iterator_resume_continues_with_the_same_batch(reverse_task, steps):
  it = reverse_task.train_iterator(B, seed=5)
  n = {'epoch_end': it.batches_per_epoch, 'epoch_end+2': it.batches_per_epoch + 2}.get(steps,
                                                                                       steps)
  for _ in range(n):
    next(it)
  state = json.loads(json.dumps(it.get_state()))  # JSON-serialisable
  expected = [next(it) for _ in range(3)]
  resumed = reverse_task.train_iterator(B, seed=5)
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])


def test_a_resumed_iterator_keeps_the_bucket_shapes_it_was_saved_with(reverse_task):
  """Should make_buckets choose other shapes later (a new version, a config the run did not
  save), the run goes on with its own: the same batches, shapes included."""
  it = reverse_task.train_iterator(B, seed=5)
  for _ in range(2):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  assert state['buckets'] == [list(shape) for shape in reverse_task.buckets.shapes]
  expected = [next(it) for _ in range(it.batches_per_epoch)]   # into the next epoch
  enc, kept = reverse_task.encoded('train'), reverse_task.kept
  one = batching.Buckets(((32, 32),))                           # other shapes than the task's
  resumed = batching.TrainIterator(enc, kept, one, B, seed=5)
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])
  with pytest.raises(ValueError, match=r'fits none of the bucket shapes \(\(8, 8\),\)'):
    resumed.set_state({**state, 'buckets': [[8, 8]]})


def test_iterator_state_from_another_config_is_rejected(reverse_task):
  state = reverse_task.train_iterator(B, seed=5).get_state()
  with pytest.raises(ValueError, match='seed'):
    reverse_task.train_iterator(B, seed=6).set_state(state)
  with pytest.raises(ValueError, match='batch_size'):
    reverse_task.train_iterator(2 * B, seed=5).set_state(state)


def test_batch_size_must_divide_by_devices(reverse_task):
  with pytest.raises(ValueError, match='not divisible by the device count 3'):
    reverse_task.train_iterator(16, seed=0, num_devices=3)
  with pytest.raises(ValueError, match='not divisible'):
    reverse_task.eval_batches('test', 10, num_devices=4)
  reverse_task.train_iterator(16, seed=0, num_devices=8)


@pytest.mark.parametrize('split', ['validation', 'test'])
def test_eval_batches_every_example_once_in_a_fixed_order(reverse_task, split):
  task = reverse_task
  shapes = task.eval_shapes(split)
  batches = list(task.eval_batches(split, B))
  indices = []
  for batch in batches:
    _check_batch(task, batch, split, shapes)
    indices += batch['index'][batch['weight'] > 0].tolist()
  assert sorted(indices) == list(range(len(task.texts(split))))
  again = [b['index'].tolist() for b in task.eval_batches(split, B)]
  assert again == [b['index'].tolist() for b in batches]
  if split == 'test':  # test lengths (up to 20) exceed the training buckets: one extra shape
    assert len(shapes) == len(task.buckets.shapes) + 1
    assert shapes[-1] == (24, 24)


def test_too_long_training_examples_are_dropped_but_evaluated(data_cfg):
  task = data.load_task(data_cfg('reverse', max_src_len=8, max_tgt_len=8, num_buckets=2))
  n_long = sum(len(s) + 1 > 8 for s, _ in task.texts('train'))
  assert task.num_dropped == n_long > 0
  assert all(s <= 8 and t <= 8 for s, t in task.buckets.shapes)
  it = task.train_iterator(B)
  seen = set()
  for _ in range(it.batches_per_epoch):
    seen |= set(next(it)['index'].tolist())
  assert seen - {-1} == set(task.kept.tolist())
  for batch in task.eval_batches('validation', B):  # long ones too, in an overflow shape
    _check_batch(task, batch, 'validation', task.eval_shapes('validation'))
  assert task.eval_shapes('validation')[-1][0] > 8


def test_batch_alignment_points_at_the_same_symbol(reverse_task, data_cfg):
  for task in (reverse_task, data.load_task(data_cfg('sort'))):
    batch = next(iter(task.train_iterator(B)))
    gold = task.batch_alignment(batch)
    assert gold.shape == batch['tgt_out'].shape and gold.dtype == np.int32
    real = batch['tgt_out'] != data.PAD
    assert ((gold >= 0) == real).all()
    rows, cols = np.nonzero(real)
    np.testing.assert_array_equal(batch['src'][rows, gold[rows, cols]],
                                  batch['tgt_out'][rows, cols])
  dates = data.load_task(data_cfg('dates'))
  assert dates.batch_alignment(next(iter(dates.train_iterator(B)))) is None
  assert dates.gold_alignment([5], [6]) is None


def test_tokenizers_saved_with_a_checkpoint_rebuild_the_same_task(reverse_task, data_cfg,
                                                                  tmp_path):
  data.save_tokenizers(reverse_task, str(tmp_path))
  src_tok, tgt_tok = data.load_tokenizers(str(tmp_path))
  assert (tmp_path / 'src' / 'tokenizer.json').exists()
  task = data.load_task(data_cfg('reverse'), tokenizers=(src_tok, tgt_tok))
  a, b = next(iter(task.train_iterator(B))), next(iter(reverse_task.train_iterator(B)))
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])


def test_assigning_tokenizers_reencodes_the_data(data_cfg):
  task = data.load_task(data_cfg('reverse'))
  old_shapes = task.buckets.shapes
  task.src_tok = data.train_tokenizer('char', ['abc'])  # all other letters become UNK
  texts = task.texts('train')
  for i in (0, 1, 2):
    assert task.encoded('train').src[i].tolist() == task.src_tok.encode(texts[i][0])
  batch = next(iter(task.train_iterator(B)))
  i = batch['index'][0]
  assert task.src_tok.decode(batch['src'][0]) == ''.join(
      c if c in 'abc' else '⁇' for c in texts[i][0])
  assert task.buckets.shapes == old_shapes  # same lengths, same buckets


def test_load_task_is_deterministic_and_rejects_unknown_names(data_cfg):
  a, b = data.load_task(data_cfg('addition')), data.load_task(data_cfg('addition'))
  assert a.texts('train') == b.texts('train') and a.buckets == b.buckets
  assert a.src_tok.symbols == b.src_tok.symbols
  with pytest.raises(ValueError, match='valid: dates, copy'):
    data.load_task(data_cfg('nope'))
  with pytest.raises(ValueError, match='unknown split'):
    a.texts('dev')


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), st.integers(1, 200)), min_size=1, max_size=60),
       st.integers(1, 6), st.integers(8, 160), st.integers(8, 160), st.sampled_from([1, 3, 8]))
def test_make_buckets_properties(lengths, num_buckets, max_s, max_t, multiple):
  src = np.array([min(s, max_s) for s, _ in lengths])
  tgt = np.array([min(t, max_t) for _, t in lengths])
  buckets = batching.make_buckets(src, tgt, num_buckets=num_buckets, max_src_len=max_s,
                                  max_tgt_len=max_t, multiple=multiple)
  shapes = np.array(buckets.shapes)
  assert 1 <= len(shapes) <= num_buckets
  assert (np.diff(shapes, axis=0) > 0).any(axis=1).all()   # increasing, no shape twice
  assert (np.diff(shapes, axis=0) >= 0).all()
  for side, cap in ((0, max_s), (1, max_t)):
    assert ((shapes[:, side] % multiple == 0) | (shapes[:, side] == cap)).all()
    assert (shapes[:, side] <= cap).all()
  assert (buckets.assign(src, tgt) >= 0).all()  # the last bucket fits every example


def _padded(shapes, src, tgt):
  return int(np.asarray(shapes)[batching.Buckets(shapes).assign(src, tgt)].sum())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=40),
       st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_make_buckets_pads_least_of_all_chains_of_shapes(lengths, num_buckets, multiple):
  """Against every chain of at most num_buckets shapes increasing in both sides, their
  lengths any multiples of `multiple` up to the longest example's (by brute force)."""
  src, tgt = np.array(lengths).T
  got = batching.make_buckets(src, tgt, num_buckets=num_buckets, max_src_len=12,
                              max_tgt_len=12, multiple=multiple)
  top = (batching.round_up(src.max(), multiple), batching.round_up(tgt.max(), multiple))
  grid = [(a, b) for a in range(multiple, top[0] + 1, multiple)
          for b in range(multiple, top[1] + 1, multiple) if (a, b) != top]
  best = _padded((top,), src, tgt)
  for k in range(1, num_buckets):
    for chain in itertools.combinations(sorted(grid), k):
      shapes = chain + (top,)
      if all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(shapes, shapes[1:])):
        best = min(best, _padded(shapes, src, tgt))
  assert _padded(got.shapes, src, tgt) == best


def test_make_buckets_on_words_pads_less_with_a_finer_multiple():
  """CMUdict-like lengths (words of 2-16 letters, pronunciations a little shorter): finer
  multiples and more shapes keep more positions real; the chosen shapes are as good as any
  of the old heuristics' (quantiles)."""
  rng = np.random.default_rng(0)
  src = np.clip(rng.poisson(8, 5000), 1, 30) + 1
  tgt = np.clip(src - 1 + rng.integers(-2, 2, 5000), 1, 30) + 1
  real = src.sum() + tgt.sum()
  share = {(m, k): real / _padded(batching.make_buckets(
      src, tgt, num_buckets=k, max_src_len=40, max_tgt_len=40, multiple=m).shapes, src, tgt)
           for m in (8, 2) for k in (4, 8)}
  assert share[8, 4] <= share[8, 8] and share[8, 4] < share[2, 4] < share[2, 8]
  assert share[2, 8] > 0.85 > share[8, 4]
  q = np.arange(1, 5) / 4
  quantiles = tuple(sorted(set(zip(
      (batching.round_up(x) for x in np.quantile(src, q, method='higher')),
      (batching.round_up(x) for x in np.quantile(tgt, q, method='higher'))))))
  assert real / _padded(quantiles, src, tgt) <= share[8, 4]
