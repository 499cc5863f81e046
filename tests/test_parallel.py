"""Data parallelism on 8 simulated CPU devices: jit+shard_map, pmap and one device agree
after 5 steps on the same global batches (pmap on the RNN only), EMA of the parameters
included; decoding split over the devices returns what one device does (in a subprocess: the
device count is fixed when JAX starts). The RNN runs in every test session; the Transformer
and an image model (the same shard_map and decoding code over other models) and two processes
training one run (multi-host on one machine) are marked extended (CI runs them)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r'''
import functools, sys, jax, jax.numpy as jnp, numpy as np, ml_collections
import attention_jax as aj
from attention_jax import devices
from attention_jax.decoding import inference
from attention_jax.training import data_parallel, train
OBJ = train.objective.Objective()
assert jax.device_count() == 8, jax.devices()
assert devices.resolve('auto') == 'shard_map'
for decoder in sys.argv[1:]:   # bahdanau, transformer, cnn (luong differs only in the model)
  mc = aj.ModelConfig(src_vocab=12, tgt_vocab=10, emb_dim=8, enc_hidden=8, dec_hidden=16,
                      attn_dim=8, decoder=decoder, cell='lstm') if decoder == 'bahdanau' else \
      aj.ModelConfig(src_vocab=12, tgt_vocab=10, arch='transformer', d_model=16, heads=2,
                     ff_dim=32, transformer_layers=2) if decoder == 'transformer' else \
      aj.ModelConfig(src_vocab=1, tgt_vocab=10, encoder='cnn', cnn_layers=2, cnn_width=4,
                     image_dim=8, emb_dim=8, dec_hidden=16, attn_dim=8)   # image sources
  t = ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=1, decay='constant', steps=5,
                                     weight_decay=0.0, clip_norm=1.0))
  tx = train.make_optimizer(t)
  graphdef, state0 = train.init_state(mc, tx, 0, ema=True)   # the EMA follows on every path
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(5):                       # uneven padding: shards hold unequal token counts
    src = rng.integers(3, 12, (16, 7)).astype(np.int32); src[::3, 4:] = 0
    if decoder == 'cnn':                   # images [16, 8, 16], some padded to 8 x 8
      src = rng.random((16, 8, 16)).astype(np.float32); src[::3, :, 8:] = -1
    tgt = rng.integers(3, 10, (16, 6)).astype(np.int32); tgt[::2, 3:] = 0
    batches.append({'src': src, 'tgt_in': tgt, 'tgt_out': tgt,
                    'weight': np.ones(16, np.float32), 'index': np.arange(16, dtype=np.int32)})
  steps = {'single': jax.jit(functools.partial(train.train_step, graphdef, tx, OBJ, 0,
                                                ema_decay=0.9)),
           'shard_map': data_parallel.shard_map_train_step(graphdef, tx, OBJ, 0, ema_decay=0.9),
           'pmap': data_parallel.pmap_train_step(graphdef, tx, OBJ, 0, ema_decay=0.9)}
  if decoder != 'bahdanau':   # pmap's path does not depend on the model: tested once
    del steps['pmap']
  final = {}
  for name, step in steps.items():
    state = jax.tree.map(jnp.array, state0)
    for b in batches:
      state, metrics = step(state, b)
    final[name] = (state, metrics)
  for name in set(steps) - {'single'}:
    for a, b in zip(jax.tree.leaves(final[name][0]), jax.tree.leaves(final['single'][0])):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    for k in ('loss', 'tokens', 'correct', 'loss_sum'):
      np.testing.assert_allclose(float(final[name][1][k]), float(final['single'][1][k]),
                                 rtol=1e-5)
  print(decoder, 'agree', float(final['single'][1]['loss']))
  if decoder == 'cnn':
    continue
  # decoding split over the 8 devices (13 rows: padded to 16) returns what one device does
  params = final['single'][0]['params']
  for beam, nbest, factor in ((1, 0, None), (3, 2, 1.5)):
    one = inference.make_decoder(graphdef, beam, 0.6, nbest, devices=jax.local_devices()[:1])
    eight = inference.make_decoder(graphdef, beam, 0.6, nbest)
    src = batches[0]['src'][:13]
    a, b = one(params, src, 9, factor), eight(params, src, 9, factor)
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))   # tokens
    assert a[0].shape[0] == 13 and len(a) == len(b)
    for x, y in zip(a[1:], b[1:]):                                       # scores, weights
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    # compiled ahead (decoding/ahead.py): the same program, padded and cut alike
    spec = jax.ShapeDtypeStruct(src.shape, src.dtype)
    c = eight.lower(params, spec, 9, factor).compile()(params, src)
    for x, y in zip(b, c):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # new params (a new object) are placed on the devices anew, not the last ones reused
    other = jax.tree.map(lambda x: x * 1.5, params)
    for x, y in zip(one(other, src, 9, factor), eight(other, src, 9, factor)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    assert not np.array_equal(np.asarray(one(other, src, 9, factor)[-1]), np.asarray(a[-1]))
  print(decoder, 'decodes alike')
print('OK')
'''


def agree_on_8_devices(*models: str) -> None:
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu'}   # simulated devices: the host's, also beside a GPU
  env['XLA_FLAGS'] = (env.get('XLA_FLAGS', '') +
                      ' --xla_force_host_platform_device_count=8').strip()
  proc = subprocess.run([sys.executable, '-c', SCRIPT, *models], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0 and 'OK' in proc.stdout, proc.stdout + proc.stderr[-3000:]
  assert all(f'{m} agree' in proc.stdout for m in models), proc.stdout


def test_shard_map_pmap_and_single_device_agree_after_5_steps():
  agree_on_8_devices('bahdanau')


@pytest.mark.extended   # ~1 min: after the suite, in CI
def test_shard_map_and_single_device_agree_for_a_transformer_and_an_image_model():
  agree_on_8_devices('transformer', 'cnn')


@pytest.mark.extended   # three interpreters started (5 s): after the suite, in CI
def test_cpu_devices_split_the_cpu_unless_the_user_did():
  """devices.cpu_devices(n) before JAX starts: n CPU devices (0: one per core the process may
  use); JAX_NUM_CPU_DEVICES set by the user wins (-> None); a bad n is named."""
  probe = ('import os, jax; from attention_jax import devices; '
           'print(devices.cpu_devices(int(os.environ["N"])), len(jax.devices("cpu")), '
           'len(os.sched_getaffinity(0)))')
  env = {k: v for k, v in os.environ.items() if k != 'JAX_NUM_CPU_DEVICES'}
  env['XLA_FLAGS'] = ' '.join(f for f in env.get('XLA_FLAGS', '').split()
                              if 'host_platform_device_count' not in f)
  for n, extra, want in ((3, {}, '3 3'), (0, {}, None), (3, {'JAX_NUM_CPU_DEVICES': '2'},
                                                         'None 2')):
    out = subprocess.run([sys.executable, '-c', probe], cwd=ROOT, capture_output=True,
                         text=True, env={**env, 'N': str(n), **extra}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got, devices, cores = out.stdout.split()
    assert f'{got} {devices}' == (want or f'{cores} {cores}')
  from attention_jax import devices
  with pytest.raises(ValueError, match='non-negative integer.*-1'):
    devices.cpu_devices(-1)


def test_unknown_parallel_mode_is_named():
  from attention_jax import devices
  with pytest.raises(ValueError, match="'ring'.*shard_map"):
    devices.resolve('ring')


@pytest.mark.extended   # ~40 s: after the suite, in CI (.ci/run)
def test_two_local_processes_train_together(tmp_path):
  """Multi-host on one machine: two processes (one CPU device each) joined through a
  loopback coordinator train a smoke run; only process 0 logs and writes results. The
  tests' XLA flags are kept (at full optimisation the first step compiled for 90 s of the
  test's 127), a forced device count is not."""
  import socket
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  flags = ' '.join(f for f in os.environ.get('XLA_FLAGS', '').split()
                   if 'host_platform_device_count' not in f)
  env = {**{k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', 'JAX_NUM_CPU_DEVICES')},
         'XLA_FLAGS': flags, 'JAX_PLATFORMS': 'cpu'}
  common = [sys.executable, '-m', 'experiments.main',
            '--config=experiments/configs/dates.py:smoke', f'--workdir={tmp_path / "run"}',
            f'--config.data.data_dir={tmp_path / "tfds"}', f'--coordinator=127.0.0.1:{port}',
            '--num_processes=2']
  procs = [subprocess.Popen(common + [f'--process_id={i}'], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in (1, 0)]
  outs = [p.communicate(timeout=600)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), outs[1][-3000:] + outs[0][-3000:]
  lead, other = outs[1], outs[0]
  assert '[shard_map: 2 process(es), 2 cpu device(s)]' in lead
  assert 'step      8/8' in lead and 'step      8/8' not in other
  assert (tmp_path / 'run' / 'results.json').exists()
