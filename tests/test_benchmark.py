"""The benchmark script: it runs end to end on a tiny config and writes the JSON it promises,
and its FLOP count sees through loops. Speed itself is never asserted."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_jax.implicit import attribution
from attention_jax.symbols import EOS
from experiments import benchmark
from experiments.bench import attribution as bench_attribution
from experiments.bench import end_to_end

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flop_count_multiplies_scan_bodies_by_their_length():
  x, w = jnp.ones((8, 16)), jnp.ones((16, 16))

  def loop(x, w):
    return jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=10)[0]

  dot, other = benchmark.count_flops(jax.make_jaxpr(loop)(x, w))
  assert dot == 10 * 2 * 8 * 16 * 16
  assert other >= 10 * 8 * 16          # at least the tanh of every step
  grad_dot, _ = benchmark.count_flops(jax.make_jaxpr(jax.grad(
      lambda x, w: loop(x, w).sum(), argnums=1))(x, w))
  assert grad_dot == 3 * dot           # forward, and two matmuls per step backward


def test_flop_count_multiplies_a_shard_map_body_by_its_devices():
  """A data-parallel step's body has one device's shapes: 4 devices do 4x its work."""
  mesh = jax.sharding.AbstractMesh((4,), ('d',), axis_types=(jax.sharding.AxisType.Auto,))
  P = jax.sharding.PartitionSpec
  split = jax.shard_map(lambda a, b: a @ b, mesh=mesh, in_specs=(P('d'), P()),
                        out_specs=P('d'))
  a, b = jax.ShapeDtypeStruct((8, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)
  dot, _ = benchmark.count_flops(jax.make_jaxpr(split)(a, b))
  assert dot == 2 * 8 * 4 * 3


def test_synthetic_batch_matches_the_package_format():
  shape = benchmark.CONFIGS['tiny']
  b = benchmark.make_batch(shape, seed=0)
  assert b['src'].shape == b['tgt_in'].shape == (shape.batch, shape.padded)
  lengths = (b['tgt_out'] != 0).sum(1) - 1      # without EOS
  assert lengths.min() >= shape.min_len and lengths.max() <= shape.max_len
  assert (b['weight'] == 1).all()


def test_unknown_names_fail_with_the_valid_ones():
  with pytest.raises(ValueError, match='valid: .*additive'):
    benchmark.run(['tiny'], ['nope'], ['luong'])


# the command in a process of its own (15 s): after the suite, in CI. The transformer's row
# is not run by CI: the same code with another model, a minute of compiling 3+3 layers on 2
# cores (its naming is checked without compiling in the next test)
@pytest.mark.parametrize('decoder', [pytest.param('luong', marks=pytest.mark.extended),
                                     pytest.param('transformer', marks=pytest.mark.slow)])
def test_command_line_writes_the_json(tmp_path, decoder):
  """bench on the tiny shape, one decoder: the table row and the JSON's fields (not the
  speed). The Transformer's row (its score: the cross-attention's) is the same code with
  another model and 3+3 layers to compile (a minute here): not run by CI; its naming is
  checked without compiling in the next test."""
  out = tmp_path / 'bench.json'
  proc = subprocess.run(
      [sys.executable, '-m', 'experiments.benchmark', '--quick', '--configs=tiny',
       '--scores=general', f'--decoders={decoder}', '--pairs=all', '--windows=1',
       '--matmul_n=256',
       f'--out={out}'],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env={**os.environ, 'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f'| tiny | general | {decoder} |' in proc.stdout   # a Transformer: its cross-attention's
  with open(out) as f:
    data = json.load(f)
  assert data['matmul']['flops_per_s'] > 0 and data['matmul']['n'] == 256
  assert data['configs']['tiny']['padded_len'] == benchmark.CONFIGS['tiny'].padded
  lm = data['configs']['tiny']['loop_matmul']
  assert lm['train_flops_per_s'] > 0 and lm['beam_flops_per_s'] > 0
  assert lm['beam_rows'] == 5 * lm['train_rows'] == 5 * benchmark.CONFIGS['tiny'].batch
  rows = {(r['config'], r['score'], r['decoder']): r for r in data['results']}
  assert sorted(rows) == [('tiny', 'general', decoder)]
  for r in rows.values():
    for key in ('compile_s', 'step_s', 'tokens_per_s', 'sentences_per_s', 'flops_per_step',
                'flops_per_s', 'matmul_ratio'):
      assert math.isfinite(r[key]) and r[key] > 0, key
    assert r['target_tokens_per_batch'] <= benchmark.CONFIGS['tiny'].batch * \
        (benchmark.CONFIGS['tiny'].max_len + 1)
    for mode in ('greedy', 'beam5'):
      assert r[mode]['sentences_per_s'] > 0 and r[mode]['compile_s'] > 0
      assert r[mode]['first_call_s'] > 0
    assert r['memory']['maxrss_mb'] > 0
  assert any('compile_s' in t['what'] for t in data['targets'])


def test_the_transformer_skips_scores_without_a_per_head_form(monkeypatch):
  """location and none compare no query with keys: the Transformer has no row for them."""
  calls = []
  monkeypatch.setattr(benchmark, 'bench_variant',
                      lambda shape, score, decoder, settings: calls.append((score, decoder))
                      or {'score': score, 'decoder': decoder, 'compile_s': 1.0})
  monkeypatch.setattr(benchmark, 'loop_matmuls', lambda shape: {})
  monkeypatch.setattr(benchmark, 'matmul_flops_per_s', lambda n: 1.0)
  monkeypatch.setattr(benchmark, 'format_loop_matmuls', lambda *a: '')
  monkeypatch.setattr(benchmark, 'format_row', lambda r: '')
  benchmark.run(['tiny'], ['general', 'location', 'none'], ['luong', 'transformer'],
                log=lambda s: None)
  assert calls == [('general', 'luong'), ('location', 'luong'), ('none', 'luong'),
                   ('general', 'transformer')]


# not run by CI: our side benchmarked for real, twice (3 minutes on 2 cores) to check JSON
# fields whose choice test_peer_settings_choose_the_equal_resource_comparisons checks (CI)
@pytest.mark.slow
def test_peer_runs_at_equal_resources_both_ways(monkeypatch):
  """--peer: one core each (ours re-run pinned to CPU 0 in a child process, for real) and the
  whole machine each (ours re-run on the cores as devices, for real); both ratios per variant
  land in the JSON, the RNN's against OpenNMT-py's RNN and the Transformer's against
  OpenNMT-py's Transformer. OpenNMT-py is faked (it is not a dependency): the fields are
  checked, not the speed."""
  calls = []

  def fake_train(venv, shape, score, steps, seed, workdir, threads=1, cpus=None,
                 input_feeding=True, arch='rnn'):
    calls.append(('train', arch, threads, cpus))
    assert (shape.batch, input_feeding) == (4, False)   # the run's settings reach the peer
    speed = {'rnn': 100.0, 'transformer': 300.0}[arch] * threads
    return {'arch': arch, 'attention': 'x', 'tokens_per_s': speed, 'threads': threads,
            'cpus': cpus, 'checkpoint': 'ckpt'}

  def fake_beam(venv, checkpoint, src, length, workdir, threads=1, cpus=None, **kw):
    calls.append(('beam', threads, cpus))
    return {'sentences_per_s': 10.0 * threads, 'sentences': len(src), 'mean_output_len': 1.0}

  monkeypatch.setattr(benchmark, 'peer_tokens_per_s', fake_train)
  monkeypatch.setattr(benchmark, 'peer_beam_sentences_per_s', fake_beam)
  settings = dataclasses.replace(benchmark.QUICK, batch=4, input_feeding=False)
  # QUICK's pairs: the RNN with general, the Transformer with scaled_dot
  out = benchmark.run(['tiny'], ['general', 'scaled_dot'], ['luong', 'transformer'], settings,
                      peer_venv='/fake', log=lambda s: None)
  assert [(r['decoder'], r['score']) for r in out['results']] == [
      ('luong', 'general'), ('transformer', 'scaled_dot')]
  cores = len(os.sched_getaffinity(0))
  assert calls == [('train', 'rnn', 1, '0'), ('beam', 1, '0'),
                   ('train', 'transformer', 1, '0'), ('beam', 1, '0'),
                   ('train', 'rnn', cores, None), ('beam', cores, None),
                   ('train', 'transformer', cores, None), ('beam', cores, None)]
  e = out['equal_resources']
  assert (e['one_core']['cores'], e['one_core']['peer_threads']) == (1, 1)
  assert (e['all_cores']['cores'], e['all_cores']['peer_threads']) == (cores, cores)
  # the whole machine: ours re-run with the cores as JAX devices (as many as divide the
  # batch), and as measured in this process (one device) beside it
  devices = benchmark.cpu_devices(cores, [4])
  assert e['all_cores']['devices'] == devices and e['one_core']['devices'] == 1
  assert [r['devices'] for r in e['all_cores']['ours']] == [devices, devices]
  assert [r['devices'] for r in e['all_cores']['ours_here']] == [1, 1]
  assert [x['decoder'] for x in e['all_cores']['ratios_here']] == ['luong', 'transformer']
  # the one-core child ran with the same batch and decoder (tokens/s and sentences/s agree)
  for child in e['one_core']['ours']:
    assert (child['batch'], child['input_feeding']) == (4, False)
  assert (e['one_core']['batch'], e['one_core']['input_feeding']) == ({'tiny': 4}, False)
  for setting in ('one_core', 'all_cores'):
    rnn, tr = e[setting]['ratios']
    ours = {r['decoder']: r for r in e[setting]['ours']}
    peer = {p['arch']: p for p in e[setting]['peer']}
    assert (rnn['config'], rnn['score'], rnn['decoder'], rnn['peer_arch']) == (
        'tiny', 'general', 'luong', 'rnn')
    assert (tr['config'], tr['score'], tr['decoder'], tr['peer_arch']) == (
        'tiny', 'scaled_dot', 'transformer', 'transformer')
    for x, arch in ((rnn, 'rnn'), (tr, 'transformer')):
      assert x['train_ratio'] == pytest.approx(
          ours[x['decoder']]['tokens_per_s'] / peer[arch]['tokens_per_s'])
      assert x['beam5_ratio'] == pytest.approx(
          ours[x['decoder']]['beam5_sentences_per_s'] / peer[arch]['beam5']['sentences_per_s'])
  table = benchmark.format_table(out)
  assert 'equal resources, one_core' in table and '| tiny | scaled_dot (transformer' in table
  # issue 32's targets: the Transformer's two ratios, in both settings
  transformer_targets = [t for t in out['targets'] if 'transformer vs OpenNMT-py' in t['what']]
  assert len(transformer_targets) == 4


def test_cpu_devices_are_the_most_that_divide_every_batch():
  assert benchmark.cpu_devices(2, [64, 32]) == 2
  assert benchmark.cpu_devices(6, [64, 32]) == 4
  assert benchmark.cpu_devices(8, [64, 24]) == 8
  assert benchmark.cpu_devices(3, [5]) == 1


def test_profile_names_where_the_step_time_goes():
  """experiments/profile_step.py on the tiny config: the traced operations are matched to
  the compiled HLO, the decoder's time loop runs once per target position, and the
  operations inside loops and the matrix products are each part of the traced total."""
  from experiments import profile_step
  p = profile_step.profile('tiny', 'general', 'luong', steps=2)
  assert p['step_ms'] > 0 and p['leaf_ms'] > 0
  assert 0 < p['in_loop_ms'] < p['leaf_ms'] and 0 < p['matmul_ms'] < p['leaf_ms']
  assert p['loops'] and all(o['opcode'] == 'while' for o in p['loops'])
  padded = benchmark.CONFIGS['tiny'].padded
  # the decoder step's operations run once per time step (forward and backward loops)
  assert any(o['per_step'] == padded and o['op_name'].endswith('dot_general')
             for o in p['ops'])
  assert all(o['shape'] and o['opcode'] for o in p['ops'])
  text = profile_step.report(p, top=5)
  assert 'ms per call' in text and text.count('\n| ') == 5 + 1


@pytest.mark.extended   # a second profile (6 s): after the suite, in CI
def test_profile_of_beam_search_runs_its_loop_once_per_output_position():
  from experiments import profile_step
  p = profile_step.profile('tiny', 'scaled_dot', 'transformer', steps=1, what='beam5')
  assert p['what'] == 'beam5' and p['leaf_ms'] > 0
  assert any(o['per_step'] == benchmark.CONFIGS['tiny'].padded for o in p['ops'])


def test_hlo_index_reads_shapes_tuples_and_op_names():
  from experiments import profile_step
  hlo = ('  %dot.4 = f32[64,256]{1,0} dot(%a, %b), lhs_contracting_dims={1}, '
         'metadata={op_name="jit(f)/dot_general" stack_frame_id=3}\n'
         '  %while.2 = (s32[], f32[8]{0}) while(%tuple), condition=%c, body=%b\n'
         '  ROOT %add.1 = f32[8]{0} add(%x, %y)\n')
  idx = profile_step.hlo_index(hlo)
  assert idx['dot.4'] == {'shape': 'f32[64,256]{1,0}', 'opcode': 'dot',
                          'op_name': 'jit(f)/dot_general'}
  assert idx['while.2']['opcode'] == 'while' and idx['while.2']['shape'].startswith('(s32[]')
  assert idx['add.1'] == {'shape': 'f32[8]{0}', 'opcode': 'add', 'op_name': ''}


def test_attribution_rows_cover_every_sentence_in_chunks_within_the_memory_budget():
  opts = attribution.Options(steps=32)
  batches = list(bench_attribution.chunks(300, 1, 100, 'integrated_gradients', opts, 64))
  assert sum(len(src) for src, _, _ in batches) == 300
  for src, tgt_in, tgt_out in batches:
    s = src.shape[1]
    assert s % 8 == 0 and tgt_out.shape == tgt_in.shape == src.shape
    assert len(src) <= attribution.rows_per_chunk('integrated_gradients', opts, s, s, 64)
    for x, y, y_in in zip(src, tgt_out, tgt_in):
      n = int((x != 0).sum())                          # the symbols and EOS
      assert 1 < n <= s and x[n - 1] == EOS and (x[n:] == 0).all()
      np.testing.assert_array_equal(y[:n - 1], x[:n - 1][::-1])
      np.testing.assert_array_equal(y_in[1:n], y[:n - 1])
  row = {'method': 'gradient', 'sentences': 1000, 'seconds': 50.0, 'sentences_per_s': 20.0,
         'compile_and_first_pass_s': 9.0, 'target_s': 60.0, 'met': True}
  table = bench_attribution.format_rows([row])
  assert '| gradient | 1000 | 50.0 | 20.0 | 9.0 | - | < 60 s: met |' in table
  row = {**row, 'method': 'integrated_gradients', 'sentences': 200, 'target_s': 180.0,
         'met': False, 'rule': 'refine', 'steps': 257, 'tol': 0.01,
         'completeness_mean': 0.0029, 'completeness_max': 0.0173}
  assert ('| integrated_gradients (refine, 257 steps, tol 0.01) | 200 | 50.0 | 20.0 | 9.0 | '
          '0.29% / 1.73% | < 180 s at <= 1%: MISSED |') in bench_attribution.format_rows([row])


@pytest.mark.extended   # fresh processes timed (20 s): after the suite, in CI
def test_end_to_end_rows_time_fresh_processes_cold_then_warm(monkeypatch):
  """bench --end_to_end: each row times our fresh translate process with an empty cache, then
  again with the cache it filled (the second reads its programs: cache hits), and OpenNMT-py's
  (faked here: it is not a dependency) on the same file; the fields, not the speed."""
  calls = []

  def fake_model(venv, arch, work, shape='char'):
    calls.append(('model', arch, shape))
    return f'{work}/{arch}.pt'

  def fake_peer(venv, checkpoint, source, beam, cores, work):
    with open(source, encoding='utf-8') as f:
      calls.append(('translate', beam, cores, [len(line.split()) for line in f]))
    return {'wall_s': 2.0 * (len(calls) - 1), 'output_tokens': 10}   # 2 s, then 4 s

  monkeypatch.setattr(end_to_end, 'peer_model', fake_model)
  monkeypatch.setattr(end_to_end, 'peer', fake_peer)
  saved = []
  rows = end_to_end.compare(['rnn'], [1], [2], 6, '/fake', log=lambda s: None,
                            lengths=(3, 12), shape='tiny', saved=lambda r: saved.append(list(r)),
                            noahead=True, repeats=2)
  assert saved == [rows]   # each row saved as it finishes
  (row,) = rows
  assert (row['arch'], row['beam'], row['cores'], row['sentences']) == ('rnn', 1, 2, 6)
  for k in ('cold', 'warm'):
    r = row[k]
    assert r['exit_s'] > r['wall_s'] > r['translate_s'] > 0 and r['programs'] >= 1 and r['shapes']
    assert row[f'{k}_ratio'] == pytest.approx(2.0 / r['wall_s'])
    # two interleaved rounds: the median run (of two, the faster) and each round's ratio
    assert len(row[f'{k}_all_s']) == 2 and r['wall_s'] == min(row[f'{k}_all_s'])
    assert row[f'{k}_ratios'] == pytest.approx([2.0 / row[f'{k}_all_s'][0],
                                                4.0 / row[f'{k}_all_s'][1]])
  assert row['repeats'] == 2 and row['onmt_all_s'] == [2.0, 4.0]
  assert '(medians of 2 interleaved rounds: cold ' in end_to_end.format_row(row)
  assert row['cold']['cache_hits'] == 0 < row['warm']['cache_hits']
  assert row['cold']['cache_budget'] == row['warm']['cache_budget'] > 0   # CPU: rows in cache
  assert row['cold']['output_tokens'] == row['warm']['output_tokens'] > 0
  assert row['warm']['second_translate_s'] > 0 and 'second_translate_s' not in row['cold']
  assert calls[0] == ('model', 'rnn', 'tiny')
  assert calls[1][:3] == calls[2][:3] == ('translate', 1, 2)
  assert calls[1][3] == [len(s) for s in end_to_end.source_lines(6, (3, 12))]
  assert end_to_end.format_row(row).startswith('rnn         beam 1 2 core(s)')
  # --e2e_noahead: one more cold process, each shape compiled on first use: the same output
  assert row['cold_noahead']['cache_hits'] == 0 and row['cold_noahead']['programs'] >= 1
  assert row['cold_noahead']['output_tokens'] == row['cold']['output_tokens']
  assert 'cold without compiling ahead' in end_to_end.format_row(row)
  # as translate does: one device per core the (unpinned) process may use
  cores = len(os.sched_getaffinity(0))
  assert row['devices'] == cores == row['cold']['devices'] == row['warm']['devices']
  # --e2e_devices=1: one device (each output runs to its limit: the same output)
  (one,) = end_to_end.compare(['rnn'], [1], [2], 6, None, log=lambda s: None, lengths=(3, 12),
                              shape='tiny', devices=1)
  assert one['devices'] == 1 == one['cold']['devices'] == one['warm']['devices']
  assert one['cold']['output_tokens'] == row['cold']['output_tokens']
  assert 'onmt' not in one
  assert end_to_end.format_row(one).startswith('rnn         beam 1 2 core(s): ours cold')
  assert ('as 2 devices' in end_to_end.format_row(row)) == (cores == 2)


def test_a_benchmark_names_the_cpu_its_vector_extensions_and_any_isa_cap(monkeypatch):
  """machine_info (every bench JSON's 'machine'): the CPU model, the extensions that decide
  the kernels (AVX2, AVX-512, AMX) as /proc/cpuinfo lists them, and the caps a run set on
  XLA (--xla_cpu_max_isa) or on the peer's PyTorch / oneDNN / MKL."""
  from experiments.bench import measure  # pylint: disable=g-import-not-at-top
  avx2_only = ('processor\t: 0\nmodel name\t: AMD EPYC 7B12\n'
               'flags\t\t: fpu sse2 avx fma avx2 bmi2\n\nprocessor\t: 1\nflags\t\t: avx512f\n')
  assert measure.cpu_isa(avx2_only) == ['avx2', 'fma']          # the first CPU's flags
  assert measure.cpu_isa('flags : avx2 fma avx512f avx512_bf16 amx_tile amx_bf16') == [
      'avx2', 'fma', 'avx512f', 'avx512_bf16', 'amx_tile', 'amx_bf16']
  assert measure.cpu_isa('') == []
  jax.devices()   # XLA reads XLA_FLAGS when its backend starts: started before the env changes
  monkeypatch.setenv('XLA_FLAGS', '--xla_backend_optimization_level=0 --xla_cpu_max_isa=AVX2')
  monkeypatch.setenv('DNNL_MAX_CPU_ISA', 'AVX2')
  m = measure.machine_info()
  assert m['isa_caps'] == {'DNNL_MAX_CPU_ISA': 'AVX2', 'xla_cpu_max_isa': 'AVX2'}
  assert m['cpu'] and m['cpu_count'] == os.cpu_count()
  if os.path.exists('/proc/cpuinfo'):
    with open('/proc/cpuinfo') as f:
      assert m['cpu_isa'] == measure.cpu_isa(f.read())


@pytest.mark.extended   # a benchmark run of our side (8 s): after the suite, in CI
def test_peer_settings_choose_the_equal_resource_comparisons(monkeypatch):
  """--peer_settings=one_core: only the one-core comparison runs (the targets of issue 87 are
  one core each); an unknown setting fails before any work, naming the valid ones."""
  with pytest.raises(ValueError, match='unknown or no peer setting.*one_core, all_cores'):
    benchmark.run(['tiny'], ['general'], ['luong'], benchmark.QUICK, peer_venv='/fake',
                  peer_settings=('two_cores',), log=lambda s: None)
  saved, calls = {}, []
  monkeypatch.setattr(benchmark, 'ours_in_child', lambda *a, cpus=None, **kw: (
      calls.append(('ours', cpus)), [dict(r, devices=1) for r in saved['out']['results']])[1])
  monkeypatch.setattr(benchmark, 'peer_tokens_per_s', lambda venv, shape, score, steps, seed,
                      workdir, threads=1, cpus=None, input_feeding=True, arch='rnn': (
      calls.append(('train', threads, cpus)),
      {'arch': arch, 'attention': 'x', 'tokens_per_s': 100.0, 'checkpoint': 'c'})[1])
  monkeypatch.setattr(benchmark, 'peer_beam_sentences_per_s', lambda *a, threads=1,
                      cpus=None, **kw: (calls.append(('beam', threads, cpus)),
                                        {'sentences_per_s': 10.0})[1])
  settings = dataclasses.replace(benchmark.QUICK, batch=4)
  out = benchmark.run(['tiny'], ['general'], ['luong'], settings, peer_venv='/fake',
                      peer_settings=('one_core',), log=lambda s: None,
                      save=lambda o: saved.update(out=o))
  assert list(out['equal_resources']) == ['one_core']
  assert calls == [('ours', '0'), ('train', 1, '0'), ('beam', 1, '0')]
  assert [p['tokens_per_s'] for p in out['peer']] == [100.0]


def test_op_categories_put_ours_and_the_peers_operations_side_by_side():
  """Each side's operations map to one kind of work by name; what no operation covers is the
  time outside them (loop control, dispatch); the table's totals are the calls' times."""
  from experiments.bench import op_categories as oc
  ours = {'traced_ms': 10.0, 'ops': [
      {'opcode': 'dot', 'op_name': 'jit(f)/dot_general', 'ms': 4.0},
      {'opcode': 'fusion', 'op_name': 'jit(f)/while/body/dot_general', 'ms': 1.0},
      {'opcode': 'fusion', 'op_name': 'jit(f)/jit(log_softmax)/reduce_max', 'ms': 0.5},
      {'opcode': 'custom-call', 'op_name': 'jit(f)/top_k', 'ms': 0.5},
      {'opcode': 'gather', 'op_name': 'jit(f)/gather', 'ms': 1.0},
      {'opcode': 'fusion', 'op_name': 'jit(f)/take_along_axis', 'ms': 0.25},
      {'opcode': 'dynamic-update-slice', 'op_name': 'jit(f)/scatter', 'ms': 0.25},
      {'opcode': 'fusion', 'op_name': 'jit(f)/tanh', 'ms': 0.5},
      {'opcode': 'copy', 'op_name': '', 'ms': 0.5}]}
  a = oc.ours_by_category(ours)
  assert a['matrix products'] == 5.0 and a['softmax, log-softmax'] == 0.5
  assert a['top-k, sort'] == 0.5 and a['gathers (reordering, lookups)'] == 1.25
  assert a['cache and history writes'] == 0.25 and a['elementwise'] == 0.5
  assert a['copies, concatenation, layout'] == 0.5 and a[oc.OUTSIDE] == pytest.approx(1.5)
  assert sum(a.values()) == pytest.approx(10.0)
  peer = {'wall_ms': 20.0, 'ops': [
      {'name': 'aten::addmm', 'ms': 6.0}, {'name': 'aten::_log_softmax', 'ms': 1.0},
      {'name': 'aten::topk', 'ms': 1.0}, {'name': 'aten::index_select', 'ms': 2.0},
      {'name': 'aten::mul_', 'ms': 1.0}, {'name': 'aten::tanh', 'ms': 0.5},
      {'name': 'aten::cat', 'ms': 1.5}, {'name': 'Optimizer.step#Adam.step', 'ms': 1.0}]}
  b = oc.peer_by_category(peer)
  assert b['matrix products'] == 6.0 and b['elementwise'] == 1.5 and b['other'] == 1.0
  assert b['gathers (reordering, lookups)'] == 2.0 and b[oc.OUTSIDE] == pytest.approx(6.0)
  text = oc.table(a, b)
  assert '| matrix products | 5.0 | 50% | 6.0 | 30% | 0.83 |' in text
  assert '| **all** | **10.0** | | **20.0** | | **0.50** |' in text
  # huge outside times never go negative: the operations' sum can exceed a call's wall time
  assert oc.peer_by_category({'wall_ms': 1.0, 'ops': peer['ops']})[oc.OUTSIDE] == 0.0


def test_peer_training_reads_onmt_trains_log_and_says_why_it_failed(tmp_path):
  """peer_tokens_per_s runs `<venv>/bin/onmt_train -config <its JSON>` on the given threads and
  takes the median of the report windows after the first; a failing or silent onmt_train
  raises with the log's last lines (a fake onmt_train here: the real one is the bench's)."""
  from experiments.bench import peer, workload   # pylint: disable=g-import-not-at-top
  venv = tmp_path / 'venv'
  (venv / 'bin').mkdir(parents=True)
  fake = venv / 'bin' / 'onmt_train'
  fake.write_text('#!/bin/sh\n'
                  'test "$1" = -config && test -f "$2" || exit 3\n'
                  'echo "threads $OMP_NUM_THREADS"\n'
                  'for r in 900 3000 3400 3200; do echo "Step 1; acc: 1; 100/ $r tok/s;"; done\n')
  fake.chmod(0o755)
  shape = workload.CONFIGS['tiny']
  out = peer.peer_tokens_per_s(str(venv), shape, 'general', 4, 0, str(tmp_path), threads=1)
  assert out['report_windows'] == [900.0, 3000.0, 3400.0, 3200.0]
  assert out['tokens_per_s'] == 3200.0 and out['attention'] == 'general'
  fake.write_text('#!/bin/sh\necho "threads $OMP_NUM_THREADS"\necho "out of memory" >&2\nexit 7\n')
  with pytest.raises(RuntimeError, match=r'(?s)onmt_train failed \(exit 7\).*out of memory'):
    peer.peer_tokens_per_s(str(venv), shape, 'general', 4, 0, str(tmp_path))
  fake.write_text('#!/bin/sh\necho "threads $OMP_NUM_THREADS"\n')
  with pytest.raises(RuntimeError, match=r'(?s)logged no tok/s.*threads 1'):
    peer.peer_tokens_per_s(str(venv), shape, 'general', 4, 0, str(tmp_path))
