"""Using a trained run as NMT toolkits are used: the translate command (file and stdin, n-best,
attention files, bad input), beam search and n-best from Python, evaluation of any text files.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

import attention_jax as aj
from attention_jax import data
from attention_jax import devices
from attention_jax.decoding import ahead, compile_cache, inference, shapes
from attention_jax.decoding import greedy
from attention_jax.loaded import translator as translator_lib
from attention_jax.models.model import ModelConfig
from attention_jax.training import train
from experiments import translate as translate_cmd
from experiments.configs import dates

import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ['22. November 2026', '', 'Nov 3, 1999', 'Sunday, 1 March 1987', '   ', '5/3/26',
         'mardi 3 novembre 2026']


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  c = dates.get_config('smoke')
  c.data.data_dir = str(tmp_path_factory.mktemp('tfds'))
  c.train.steps = 30   # a little past random, so beams and greedy paths differ in places
  workdir = str(tmp_path_factory.mktemp('dates_translate'))
  train.train_and_evaluate(c, workdir)
  return workdir


@pytest.fixture(scope='module')
def translator(run):
  return aj.load(run)


def command(workdir, *flags, stdin=b''):
  """`python -m experiments.translate --workdir=workdir *flags` (forked: helpers.run_module)
  -> its CompletedProcess, output in bytes."""
  return helpers.run_module('experiments.translate', f'--workdir={workdir}', *flags,
                            stdin=stdin, text=False)


def test_command_on_a_file_and_on_stdin_equals_translate(run, translator, tmp_path):
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(TEXTS) + '\n', encoding='utf-8')
  out = tmp_path / 'out.txt'
  by_file = command(run, f'--input={src}', f'--output={out}', '--beam=3', '--batch=2')
  assert by_file.returncode == 0, by_file.stderr.decode()
  assert b'sentences/s' in by_file.stderr
  by_stdin = command(run, '--beam=3', stdin=src.read_bytes())
  assert by_stdin.returncode == 0, by_stdin.stderr.decode()
  expected = translator.translate(TEXTS, beam=3)
  assert out.read_text(encoding='utf-8').split('\n')[:-1] == expected
  assert by_stdin.stdout.decode('utf-8').split('\n')[:-1] == expected
  assert expected[1] == '' and expected[4] == ''          # empty lines kept, in place


def test_nbest_lines_are_distinct_sorted_and_led_by_the_beam_output(run, translator):
  proc = command(run, '--beam=4', '--nbest=3', stdin='\n'.join(TEXTS).encode())
  assert proc.returncode == 0, proc.stderr.decode()
  lines = proc.stdout.decode('utf-8').split('\n')[:-1]
  assert len(lines) == 3 * len(TEXTS)
  best = translator.translate(TEXTS, beam=4)
  for i, text in enumerate(TEXTS):
    rows = [line.split('\t') for line in lines[3 * i:3 * i + 3]]
    outs, scores = [r[0] for r in rows], [float(r[1]) for r in rows]
    if not text.strip():
      assert outs == ['', '', ''] and scores == [0, 0, 0]
      continue
    assert len(set(outs)) == 3
    assert scores == sorted(scores, reverse=True)
    assert outs[0] == best[i]
  py = translator.translate(TEXTS[:1], beam=4, nbest=3)[0]
  assert [o for o, _ in py] == [line.split('\t')[0] for line in lines[:3]]


def test_beam_1_equals_greedy(run, translator):
  decode = inference.make_decoder(translator.graphdef, beam=1)   # greedy.greedy
  texts = [t for t in TEXTS if t.strip()]
  src = translator._encode(texts)
  tokens, _ = decode(translator.params, src,
                     greedy.max_output_len(src.shape[1], translator._factor),
                     translator._factor)                            # each row's own limit
  expected = [translator.tgt_tok.decode(row.tolist()) for row in np.asarray(tokens)]
  assert translator.translate(texts, beam=1) == expected
  assert translator.translate(texts) == expected
  out, weights, src_tokens, tgt_tokens = translator.attend(texts[0], beam=1)
  assert out == expected[0] and weights.shape == (len(tgt_tokens), len(src_tokens))
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)


def test_attention_files(run, tmp_path):
  jsonl, npz = tmp_path / 'a.jsonl', tmp_path / 'a.npz'
  data = '\n'.join(TEXTS[:3]).encode()
  assert command(run, f'--attention={jsonl}', stdin=data).returncode == 0
  assert command(run, f'--attention={npz}', '--beam=2', stdin=data).returncode == 0
  rows = [json.loads(line) for line in jsonl.read_text(encoding='utf-8').splitlines()]
  assert [r['line'] for r in rows] == [1, 2, 3] and rows[1]['weights'] == []
  w = np.array(rows[0]['weights'])
  assert w.shape == (len(rows[0]['tgt_tokens']), len(rows[0]['src_tokens']))
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-4)
  with np.load(npz) as z:
    assert z['weights_1'].shape == (len(z['tgt_tokens_1']), len(z['src_tokens_1']))
    assert list(z['src_tokens_1'])[-1] == '</s>'


def test_bad_bytes_give_one_error_line_naming_the_line(run, tmp_path):
  out = tmp_path / 'out.txt'
  proc = command(run, f'--output={out}', stdin=b'Nov 3, 1999\nok\nbad \xff byte\n')
  assert proc.returncode == 2
  err = proc.stderr.decode().strip().splitlines()
  assert err[-1] == 'error: stdin line 3 is not valid UTF-8: byte 0xff at column 5', err
  assert not out.exists()                           # nothing translated or written
  assert translate_cmd.read_lines(b'\xef\xbb\xbfa\r\nb\n', 'x') == ['a', 'b']
  missing = command(run, f'--input={tmp_path / "nope.txt"}')
  assert missing.returncode == 2 and b'error: ' in missing.stderr and b'nope.txt' in missing.stderr


def test_read_lines_names_the_first_line_that_is_not_utf8():
  with pytest.raises(translate_cmd.InputError, match=r'^stdin line 3 is not valid UTF-8: byte '
                                                     r'0xff at column 5$'):
    translate_cmd.read_lines(b'Nov 3, 1999\nok\nbad \xff byte\n\xfe\n', 'stdin')


def test_an_output_is_the_old_file_until_its_writer_closes_it_whole(tmp_path, monkeypatch):
  """Two writers of one output at once (the second as another process: its own pid), their
  writes interleaved: a reader sees the old file until one closes, then that one's lines
  whole; the last to close wins, whole; no temp file is left."""
  path = tmp_path / 'out.txt'
  path.write_text('old\n', encoding='utf-8')
  a = translate_cmd.Output(str(path))
  with monkeypatch.context() as m:
    pid = os.getpid()
    m.setattr(os, 'getpid', lambda: pid + 1)
    b = translate_cmd.Output(str(path))
  for out, line in ((a, 'a1'), (b, 'b1'), (a, 'a2'), (b, 'b2')):
    out.file.write(line + '\n')
    out.file.flush()
  assert path.read_text(encoding='utf-8') == 'old\n'
  a.close()
  assert path.read_text(encoding='utf-8') == 'a1\na2\n'
  b.close()
  assert path.read_text(encoding='utf-8') == 'b1\nb2\n'
  assert os.listdir(tmp_path) == ['out.txt']


def test_an_over_long_line_is_named_by_its_line_number_and_nothing_is_written(run, tmp_path,
                                                                              translator):
  out = tmp_path / 'out.txt'
  proc = command(run, f'--output={out}', '--batch=1',
                 stdin=b'Nov 3, 1999\n\n' + b'1' * 100_000 + b'\nok\n')
  assert proc.returncode == 2
  assert proc.stderr.decode().strip().splitlines()[-1].startswith(
      'error: stdin line 3 has 100,000 characters, far beyond the limit'), proc.stderr
  assert not out.exists() and os.listdir(tmp_path) == []      # no temp file left either
  with pytest.raises(ValueError, match='texts\\[2\\] has 600 tokens'):   # the caller's index
    translator.translate(['', 'ok', '1' * 600])


def test_an_output_over_the_input_or_on_a_directory_is_refused_before_any_work(run, tmp_path):
  src = tmp_path / 'in.txt'
  src.write_text('Nov 3, 1999\n', encoding='utf-8')
  cases = [([f'--input={src}', f'--output={src}'], '--input and --output name the same file'),
           ([f'--output={tmp_path}'], f'{tmp_path}: is a directory, not an output file'),
           ([f'--output={tmp_path}/a.jsonl', f'--attention={tmp_path}/a.jsonl'],
            '--output and --attention name the same file')]
  procs = helpers.run_modules('experiments.translate',
                              [[f'--workdir={run}', *flags] for flags, _ in cases])
  for (flags, needle), proc in zip(cases, procs):
    err = proc.stderr
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith('error: ') and (
        needle in lines[0]), (flags, err)
  assert src.read_text(encoding='utf-8') == 'Nov 3, 1999\n'
  assert sorted(os.listdir(tmp_path)) == ['in.txt']


MANY = [t for _ in range(100) for t in TEXTS]   # 700 lines


@pytest.mark.scenario
def test_two_writers_of_one_output_never_mix(run, translator, tmp_path):
  """Two commands writing one --output, forced to overlap (hold.py): the first is held after
  writing its first chunk while the second translates all of its input and finishes; the
  file is then the second's output, whole; released, the first finishes, and the file is the
  first's, whole (writing in place, it used to hold NUL bytes and a fraction of the lines)."""
  out, inputs = tmp_path / 'out.txt', (MANY, MANY[::-1])   # other inputs, one output
  for k, lines in enumerate(inputs):
    (tmp_path / f'in{k}.txt').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  argv = lambda k: [f'--workdir={run}', f'--input={tmp_path / f"in{k}.txt"}', f'--output={out}',
                    '--batch=64']
  held = tmp_path.parent / f'{tmp_path.name}_held'   # (outside the folder the test lists)
  first = subprocess.Popen([sys.executable, '-m', 'experiments.translate', *argv(0)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=helpers.hold_env(held, at='translate_chunk', chunk=1))
  try:
    helpers.wait_held(held, first)
    second = helpers.run_module('experiments.translate', *argv(1))
    assert second.returncode == 0, second.stderr
    assert out.read_text(encoding='utf-8').split('\n')[:-1] == translator.translate(inputs[1])
    held.unlink()
    said = first.communicate(timeout=600)[0]
  finally:
    if first.poll() is None:
      first.kill()
      first.wait()
  assert first.returncode == 0, said
  assert out.read_text(encoding='utf-8').split('\n')[:-1] == translator.translate(inputs[0])
  assert sorted(os.listdir(tmp_path)) == ['in0.txt', 'in1.txt', 'out.txt']


@pytest.mark.scenario
@pytest.mark.parametrize('sig,status,last', [('SIGTERM', 143, 'stopped by SIGTERM'),
                                             ('SIGINT', 130, 'interrupted (Ctrl-C)')])
def test_sigterm_and_sigint_keep_the_whole_chunks_translated(run, translator, tmp_path, sig,
                                                             status, last):
  src, out = tmp_path / 'in.txt', tmp_path / 'out.txt'
  lines = MANY * 10
  src.write_text('\n'.join(lines) + '\n', encoding='utf-8')
  held = tmp_path / 'held'   # it holds after its 3rd chunk (hold.py) until the signal
  with helpers.sigint_handled():
    proc = subprocess.Popen([sys.executable, '-m', 'experiments.translate', f'--workdir={run}',
                             f'--input={src}', f'--output={out}', '--batch=70'], cwd=ROOT,
                            stderr=subprocess.PIPE,
                            env=helpers.hold_env(held, at='translate_chunk', chunk=3))
  helpers.wait_held(held, proc)
  proc.send_signal(getattr(signal, sig))
  err = proc.communicate(timeout=600)[1].decode()
  assert proc.returncode == status, err
  kept = out.read_text(encoding='utf-8').split('\n')[:-1]
  assert len(kept) == 3 * 70, len(kept)
  assert f'stopped: {len(kept)} of {len(lines)} lines translated and kept in {out}' in err
  assert err.strip().splitlines()[-1] == last and 'Traceback' not in err, err
  assert kept == translator.translate(lines[:len(kept)])
  assert sorted(os.listdir(tmp_path)) == ['held', 'in.txt', 'out.txt']   # no temp file left


def test_evaluate_files_equals_evaluating_the_split(run, tmp_path):
  with open(os.path.join(run, 'config.json')) as f:
    cfg = json.load(f)
  task = data.load_task(ml_collections.ConfigDict(cfg['data']), seed=cfg['seed'])
  pairs = task.texts('test')
  (tmp_path / 'test.src').write_text(''.join(s + '\n' for s, _ in pairs), encoding='utf-8')
  (tmp_path / 'test.ref').write_text(''.join(t + '\n' for _, t in pairs), encoding='utf-8')
  by_split = aj.evaluate_run(run, split='test', beam=3, num_heatmaps=1, verbose=False)
  by_files = aj.evaluate_run(run, src=str(tmp_path / 'test.src'),
                             ref=str(tmp_path / 'test.ref'), beam=3, num_heatmaps=1,
                             verbose=False)
  for k in ('loss', 'token_accuracy', 'exact_match', 'bleu', 'chrf', 'sentences'):
    assert by_files[k] == pytest.approx(by_split[k]), k
  assert by_files['by_length'] == by_split['by_length']
  assert os.path.exists(by_files['bleu_by_length_plot'])
  assert os.path.exists(os.path.join(run, 'eval_test_src_beam3_a0.6.json'))
  proc = helpers.run_module('experiments.evaluate', f'--workdir={run}',
                            f'--src={tmp_path / "test.src"}', f'--ref={tmp_path / "test.ref"}',
                            '--beam=3', '--length_edges=0,5,10')
  assert proc.returncode == 0, proc.stderr
  labels = re.findall(r'^\| (\d+)-(\d+) \|', proc.stdout, re.M)   # buckets of 5 tokens
  assert labels and all(int(hi) - int(lo) == 4 for lo, hi in labels), proc.stdout
  assert 'exact_match' in proc.stdout and 'sacrebleu signature' in proc.stdout


def test_evaluate_files_with_several_references_reports_wer_per(run, translator, tmp_path):
  """Tab-separated references, built around the run's own outputs h1, h2, h3 so that the
  figures are known by hand: line 1 equals its second reference only (right, 0 edits over
  len(h1)); line 2's closest reference is 'h2 z' (wrong, 1 edit over len(h2) + 1; 'a b c' is
  further); line 3's only reference 'q' (wrong, len(h3) edits over 1). WER 2/3, PER (0 + 1 +
  len(h3)) / (len(h1) + len(h2) + 2), in phones (whitespace tokens). Were the extra references
  ignored, line 1 would be wrong too."""
  candidates = [t for t in TEXTS + ['3 Nov 1999', '1 March 1987', '12/24/99'] if t.strip()]
  pairs = [(s, h.split()) for s, h in zip(candidates, translator.translate(candidates))
           if h.split() and not {'a', 'b', 'c', 'q', 'x', 'y', 'z'} & set(h.split())]
  assert len(pairs) >= 3, pairs          # (outputs of the run: three that are not empty)
  sources, (h1, h2, h3) = [s for s, _ in pairs[:3]], [h for _, h in pairs[:3]]
  (tmp_path / 's.txt').write_text(''.join(s + '\n' for s in sources), encoding='utf-8')
  (tmp_path / 'r.txt').write_text(f'x y\t{" ".join(h1)}\n{" ".join(h2)} z\ta b c\nq\n',
                                  encoding='utf-8')
  report = aj.evaluate_run(run, src=str(tmp_path / 's.txt'), ref=str(tmp_path / 'r.txt'),
                           beam=1, num_heatmaps=0, verbose=False)
  assert report['sentences'] == 3
  assert report['wer'] == pytest.approx(100 * 2 / 3)
  assert report['per'] == pytest.approx(100 * (0 + 1 + len(h3)) / (len(h1) + len(h2) + 1 + 1))
  assert os.path.exists(report['wer_by_length_plot'])


def test_huge_inputs_fail_fast_before_anything_is_allocated(translator, monkeypatch):
  def no_encoding(texts):
    raise AssertionError('a batch was built for an input beyond the limit')
  monkeypatch.setattr(translator, '_encode', no_encoding)
  with pytest.raises(ValueError, match='t.max_input_len'):
    translator.translate(['x' * 1_000_000])
  with pytest.raises(ValueError, match=f'has 600 tokens; the limit is {translator.max_input_len}'):
    translator.translate(['ok', '1' * 600])


def test_evaluate_defaults_to_the_runs_eval_beam_size_and_alpha(run, tmp_path):
  import shutil
  workdir = str(tmp_path / 'copy')
  shutil.copytree(run, workdir)
  path = os.path.join(workdir, 'config.json')
  cfg = json.load(open(path))
  cfg['eval']['beam_size'], cfg['eval']['alpha'] = 2, 0.3
  json.dump(cfg, open(path, 'w'))
  report = aj.evaluate_run(workdir, split='test', num_heatmaps=0, verbose=False)
  assert (report['beam'], report['alpha']) == (2, 0.3)
  assert aj.evaluate_run(workdir, split='test', beam=1, num_heatmaps=0,
                         verbose=False)['beam'] == 1


def test_saliency_explains_the_output_attend_gives(translator):
  """Translator.saliency: the output and explicit weights of attend (teacher-forced = decoded),
  the log-probabilities of the greedy score, a reference teacher-forced, bad input in one line."""
  t, text = translator, 'Nov 3, 1999'
  out, weights, src_tokens, tgt_tokens = t.attend(text)
  s = t.saliency(text)
  assert (s.output, s.src_tokens, s.tgt_tokens, s.method) == (out, src_tokens, tgt_tokens,
                                                              'gradient')
  assert s.scores.shape == weights.shape == (len(tgt_tokens), len(src_tokens))
  np.testing.assert_allclose(s.weights, weights, atol=1e-5)
  assert s.log_probs.sum() == pytest.approx(t.decode([text])[0].scores[0], abs=1e-3)
  assert (s.scores >= 0).all() and s.scores.max() > 0
  ig = t.saliency(text, method='integrated_gradients', reference='1999-11-03', steps=8)
  assert ig.output == '1999-11-03' and ig.scores.shape == (11, len(src_tokens))
  er = t.saliency(text, method='erasure', erase='unk')   # no gradient: S + 1 forward passes
  assert (er.output, er.scores.shape) == (out, weights.shape) and np.abs(er.scores).max() > 0
  np.testing.assert_allclose(er.log_probs, s.log_probs, atol=1e-5)
  assert t.saliency('  ').scores.shape == (0, 0)
  with pytest.raises(ValueError, match=r"'gradcam' needs images sources .* reads tokens"):
    t.saliency(text, method='gradcam')
  with pytest.raises(TypeError, match=r"unknown option\(s\) \['step'\]; valid: steps"):
    t.saliency(text, step=8)
  with pytest.raises(ValueError, match=r"erase 'mean' is not for tokens sources; valid for "
                                       r'tokens: zero, pad, unk'):
    t.saliency(text, method='erasure', erase='mean')
  with pytest.raises(ValueError, match=r'saliency\(text\) has 5,000 tokens; the limit is 512'):
    t.saliency('1' * 5000)


# ---- a bounded set of compiled shapes, and the persistent compilation cache ---------------
LONG = 'Sunday, 1 March 1987, or Nov 3, 1999, or 22. November 2026'   # 58 chars: bucket 72


@pytest.mark.parametrize('cores', [1, 2])
def test_length_buckets_and_padded_rows_change_no_output(translator, cores):
  """Whatever the bucket growth (one core's, several cores'), the same tokens, scores and
  weights as decoding each chunk at its own length."""
  helpers.assert_buckets_change_no_output(translator, TEXTS + [LONG, LONG[:41], 'x' * 33],
                                          growth=shapes.growth(cores))


# a file of many lengths: 1 to 58 characters, and the lines of TEXTS
RAGGED = [LONG[:k] for k in range(1, len(LONG) + 1)] + TEXTS


def test_a_file_of_many_lengths_compiles_few_shapes_and_the_same_outputs_at_any_growth(
    translator):
  """translate() of a file of some 60 source lengths: whatever the bucket growth, the outputs
  of decoding each chunk at its own length, in at most one shape per length bucket of its
  longest line, and one more (shapes.py), far fewer than its lengths."""
  t = translator
  growth, t.bucket_growth, t.shapes_used = t.bucket_growth, None, set()
  try:
    want = t.translate(RAGGED)
    lengths = {len(t.src_tok.encode(x)) + 1 for x in RAGGED if x.strip()}
    for g in sorted({shapes.growth(1), shapes.growth(2), 1.5}):
      t.bucket_growth, t.shapes_used = g, set()
      assert t.translate(RAGGED) == want, g
      bound = len(shapes.buckets(max(lengths), g)) + 1
      assert len(t.shapes_used) <= bound < len(lengths) / 3, (g, sorted(t.shapes_used))
  finally:
    t.bucket_growth = growth


def test_translate_decodes_without_weights_and_outputs_what_decode_does(translator):
  """translate() (and the command without --attention) decodes with_weights=False: the same
  outputs and scores as decode() with weights, each output's weights [T_i, 0]."""
  texts = TEXTS + [LONG]
  for kw in ({}, {'beam': 3, 'nbest': 2}):
    full = translator.decode(texts, **kw)
    bare = translator.decode(texts, with_weights=False, **kw)
    for a, b in zip(full, bare):
      assert a.outputs == b.outputs and a.tgt_tokens == b.tgt_tokens
      np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-5)   # (a GPU: 2e-6)
      assert [w.shape for w in b.weights] == [(w.shape[0], 0) for w in a.weights]
    assert any(w.size for h in full for w in h.weights)
  assert translator.translate(texts) == [h.outputs[0] for h in translator.decode(texts)]


@pytest.mark.extended   # 6 s: in CI; the suite's: test_parallel's decoder compiled ahead
def test_compiling_ahead_changes_no_output_and_compiles_each_shape_once(translator):
  """Translator.compile_ahead (ahead.py: a file's shapes compiled in a background thread):
  the same tokens, scores and weights as compiling each shape on first call; one program per
  shape, in the order the chunks use them, none again for a second decode."""
  texts = TEXTS + [LONG, LONG[:41], 'x' * 33]
  size, translator.chunk_size = translator.chunk_size, 2
  try:
    for kw in ({}, {'beam': 3, 'nbest': 2}):
      translator.compile_ahead, translator.shapes_used = False, set()
      plain = translator.decode(texts, **kw)
      # a new jit function: nothing of the plain decode's in memory (aj.load counts programs)
      translator.compile_ahead, translator._programs, translator._decoders = True, {}, {}
      before = compile_cache.counts['programs']
      ahead_out = translator.decode(texts, **kw)
      programs, = translator._programs.values()
      used = [s[3:] for s in sorted(translator.shapes_used)]
      assert sorted((r, n) for r, n, _, _ in programs.shapes) == used
      assert len(used) >= 3 and compile_cache.counts['programs'] - before >= len(used)
      before = compile_cache.counts['programs']
      again = translator.decode(texts, **kw)
      assert compile_cache.counts['programs'] == before and len(programs.shapes) == len(used)
      for a, b, c in zip(plain, ahead_out, again):
        assert a.outputs == b.outputs == c.outputs
        np.testing.assert_array_equal(a.scores, b.scores)
        for x, y in zip(a.weights, b.weights):
          np.testing.assert_array_equal(x, y)
  finally:
    translator.chunk_size, translator.compile_ahead = size, True


def test_compiling_ahead_cancels_what_a_stopped_decode_queued_and_reports_errors():
  """ahead.Programs: a stopped decode drops the shapes not yet started (the one compiling
  finishes); a shape that fails to compile raises in the caller's thread; a function without
  .lower is refused by name."""
  started, release, lowered = threading.Event(), threading.Event(), []

  class Fn:   # a jax.jit stand-in whose first compile waits for `release`
    def lower(self, params, src, max_len, factor):
      lowered.append(src.shape)
      started.set()
      assert release.wait(600), 'never released (a bound against a hang)'
      if src.shape[0] == 3:
        raise ValueError('cannot compile 3 rows')
      return self

    def compile(self):
      return lambda params, src: src.shape

  programs = ahead.Programs(Fn())
  programs.schedule(None, [(1, 8, 26, 2.0), (2, 8, 26, 2.0), (4, 8, 26, 2.0)])
  assert started.wait(60)
  programs.cancel()                       # (1, 8) is compiling; (2, 8) and (4, 8) never start
  release.set()
  assert programs.shapes == [(1, 8, 26, 2.0)]
  assert programs.get(None, (1, 8, 26, 2.0))(None, np.zeros((1, 8))) == (1, 8)
  with pytest.raises(ValueError, match='cannot compile 3 rows'):
    programs.get(None, (3, 8, 26, 2.0))
  assert lowered == [(1, 8), (3, 8)]
  with pytest.raises(TypeError, match='needs a jax.jit function'):
    ahead.Programs(lambda params, src, max_len, factor: None)


def chunk_bytes(t, rows: int, length: int, hyps: int) -> int:
  """The bytes of a chunk's attention weights [rows x hyps, steps, length] and decoder caches
  [rows x hyps, steps, cache_width] (float32): what MEMORY_BUDGET bounds."""
  steps = greedy.max_output_len(length, t._factor)
  return 4 * rows * hyps * steps * (length + sum(c.cache_width for c in t.model_configs))


@pytest.mark.parametrize('cores', [1, 2])
def test_chunks_hold_every_sentence_once_within_the_memory_budget_in_few_shapes(translator,
                                                                               cores):
  """Translator._chunks on sorted lengths, whatever the growth, chunk size, hypotheses and
  budget: every sentence once, in order; each chunk padded to at least its rows and its
  longest source, at most chunk_size rows, its weights and caches within MEMORY_BUDGET (or
  one row: progress whatever the budget); at most one shape per length bucket, and one more."""
  t = translator
  lengths = sorted([3, 5, 8, 9, 9, 12, 16, 17, 30, 33, 40, 41, 41, 41, 41, 41, 90] * 7)
  growth, t.bucket_growth = t.bucket_growth, shapes.growth(cores)
  try:
    for hyps, size, budget in ((1, 256, t.MEMORY_BUDGET), (5, 6, t.MEMORY_BUDGET),
                               (1, 256, 10 ** 6), (1, 16, t.MEMORY_BUDGET), (1, 4, 1)):
      t.chunk_size, t.MEMORY_BUDGET = size, budget
      try:
        chunks = list(t.planner().chunks(list(range(len(lengths))), lengths, hyps))
      finally:
        t.chunk_size = 256
        del t.MEMORY_BUDGET   # the class's again
      assert [i for rows, _ in chunks for i in rows] == list(range(len(lengths)))
      for rows, (n, length) in chunks:
        assert len(rows) <= n <= size and lengths[rows[-1]] <= length, (rows, n, length)
        assert n == 1 or chunk_bytes(t, n, length, hyps) <= budget, (n, length, budget)
      bound = len(shapes.buckets(max(lengths), t.bucket_growth)) + 1
      assert len({s for _, s in chunks}) <= bound, sorted({s for _, s in chunks})
  finally:
    t.bucket_growth = growth


def test_kv_cache_segments_change_no_output(translator, monkeypatch):
  """A Transformer's beam search over KV caches grown in any segments (the model's defaults,
  one core's shapes.kv_segments, finer still) gives the same tokens, scores and weights.
  An untrained Transformer over the run's vocabularies, EOS suppressed: every output runs to
  its limit (1.5 x its source + 10), through every segment."""
  mcfg = ModelConfig(src_vocab=translator.config.src_vocab,
                     tgt_vocab=translator.config.tgt_vocab, arch='transformer', d_model=16,
                     heads=2, ff_dim=24, transformer_layers=1)
  model = aj.build(mcfg, rngs=nnx.Rngs(3))
  model.out.bias[...] = model.out.bias[...].at[data.EOS].set(-1e9)
  graphdef, params = nnx.split(model)
  t = translator_lib.Translator(mcfg, graphdef, nnx.to_pure_dict(params), translator.src_tok,
                                translator.tgt_tok, 1.5, 0)
  make_decoder, seen = inference.make_decoder, []

  def decode(kv):
    def make(*a, kv_segments=None, **k):
      seen.append(kv)
      return make_decoder(*a, kv_segments=kv, **k)
    monkeypatch.setattr(translator_lib.inference, 'make_decoder', make)
    t._decoders, t._programs = {}, {}
    return t.decode([LONG, TEXTS[0], LONG[:30]], beam=3, nbest=2)

  default = decode(None)
  assert all(len(ids) == greedy.max_output_len(len(h.src_tokens), 1.5)
             for h in default for ids in h.ids)   # ran to the limit
  for kv in (shapes.kv_segments(3, 1), (8, 6)):
    for a, b in zip(default, decode(kv)):
      assert a.outputs == b.outputs
      for x, y in zip(a.ids, b.ids):
        np.testing.assert_array_equal(x, y)
      np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-5)
      for x, y in zip(a.weights, b.weights):
        np.testing.assert_allclose(x, y, atol=1e-5)
  assert seen == [None, shapes.kv_segments(3, 1), (8, 6)]


def test_row_buckets_are_few_per_octave_and_pad_under_an_eighth():
  """shapes.row_bucket(n, most, per_octave=8): the smallest of {1..8} and 2^k + j 2^k / 8
  (k >= 3) holding n, at most `most`; per_octave 1 is the next power of two; bad arguments are
  named. (The function for a given per_octave: which one a Translator takes is its policy.)"""
  allowed = sorted(set(range(1, 9)) | {2 ** k + j * 2 ** k // 8 for k in range(3, 12)
                                           for j in range(8)})
  for most in (1, 8, 64, 1024):
    for n in range(1, most + 1):
      assert shapes.row_bucket(n, most, 8) == min(most, min(a for a in allowed if a >= n)), n
      assert shapes.row_bucket(n, most, per_octave=1) == min(most, 1 << (n - 1).bit_length())
  assert [shapes.row_bucket(n, 256, 8) for n in (21, 80, 130)] == [22, 80, 144]
  # a bucket's last chunk takes its full chunks' rows where that pads <= 1/8 of the bucket
  assert [shapes.tail_rows(5, 8, b, 8) for b in (5, 23, 24, 93)] == [5, 5, 8, 8]
  assert shapes.tail_rows(130, 256, 130, 8) == 144 and shapes.tail_rows(250, 256, 250, 8) == 256
  with pytest.raises(ValueError, match='1..8 rows, got 9'):
    shapes.tail_rows(9, 8, 100)
  with pytest.raises(ValueError, match='1..16 rows, got 17'):
    shapes.row_bucket(17, 16)
  with pytest.raises(ValueError, match='power of two, got 3'):
    shapes.row_bucket(5, 16, per_octave=3)


def row_bytes(t, length: int, hyps: int) -> int:
  """The bytes a source padded to `length` has its attention read each decoding step: its
  memory [length, memory_width] and its hypotheses' KV caches [steps, cache_width], float32."""
  steps = greedy.max_output_len(length, t._factor)
  return 4 * sum(length * c.memory_width + hyps * steps * c.cache_width
                 for c in t.model_configs)


def test_cache_budget_caps_a_chunks_rows_per_device_and_changes_no_output(translator):
  """A cache_budget (the default on CPUs) keeps a chunk's rows per device to those whose
  attention memory fits it (never under shapes.CACHE_LEAST_ROWS); off (None) a chunk takes
  up to chunk_size rows. Tokens, scores and weights are the same either way, greedy and
  beam-3 2-best; bad budgets are named."""
  t = translator
  texts = [f'{d % 28 + 1} November {1950 + d}'
           for d in range(8 * jax.local_device_count() * shapes.CACHE_LEAST_ROWS)] + TEXTS
  length = t.planner().length(max(len(t.src_tok.encode(x)) for x in texts) + 1)
  budget = t.cache_budget
  try:
    for kw in ({}, {'beam': 3, 'nbest': 2}):
      t.cache_budget, t.shapes_used = 1, set()       # a budget no row fits: `least` rows
      capped = t.decode(texts, **kw)
      rows = {s[3] for s in t.shapes_used}
      assert max(rows) == jax.local_device_count() * shapes.CACHE_LEAST_ROWS, rows
      assert t.planner().cache_cap(length, 1) == max(rows)
      hyps = kw.get('beam', 1) * kw.get('nbest', 1)
      for budget_ in (2 ** 16, 2 ** 20, 2 ** 24):   # rows per device within each budget
        t.cache_budget = budget_
        for L in shapes.buckets(length, t.bucket_growth):
          per_device = t.planner().cache_cap(L, hyps) // jax.local_device_count()
          assert per_device == shapes.CACHE_LEAST_ROWS or (
              per_device * row_bytes(t, L, hyps) <= budget_), (budget_, L, per_device)
      t.cache_budget, t.shapes_used = None, set()
      free = t.decode(texts, **kw)
      assert max(s[3] for s in t.shapes_used) > max(rows)   # the cap changed the chunks
      for a, b in zip(capped, free):
        assert a.outputs == b.outputs
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)
        for x, y in zip(a.weights, b.weights):
          np.testing.assert_allclose(x, y, atol=1e-5)
  finally:
    t.cache_budget = budget
  with pytest.raises(ValueError, match='positive, got 0'):
    shapes.cache_rows(0, 100)
  assert shapes.l2_bytes() >= 2 ** 14


def test_cpu_devices_split_each_chunk_and_change_no_output(run, translator):
  """translate --cpu_devices=N (default: one device per core): each chunk's rows split over N
  CPU devices (inference.split_batch, compiled ahead), the same output and n-best scores as one
  device in this process; --verbose says how many devices shared the chunks."""
  lines = TEXTS + ['Sunday, 1 March 1987']
  want = [f'{h}\t{s:.4f}' for hyps in translator.decode(lines, beam=3, nbest=2)
          for h, s in zip(hyps.outputs, hyps.scores)]
  platform = jax.local_devices()[0].platform
  # the user's count wins over the flag; on a GPU or TPU the flag splits no device
  forced = devices.cpu_devices_set_by_user() or platform != 'cpu'
  cache = r'[\d.]+ MiB of attention memory' if platform == 'cpu' else 'off'
  for n in (3, 1):
    p = command(run, f'--cpu_devices={n}', '--verbose', '--beam=3', '--nbest=2',
                stdin='\n'.join(lines).encode() + b'\n')
    err = p.stderr.decode()
    count = r'\d+' if forced else str(n)
    assert p.returncode == 0 and re.search(
        rf'devices sharing each chunk: {count} \({platform}\); rows per device kept in cache: '
        rf'{cache}', err), err
    got = [f'{h}\t{float(s):.4f}' for h, s in
           (line.split('\t') for line in p.stdout.decode().splitlines())]
    assert got == want


def test_compilation_cache_is_reused_and_a_bad_one_is_skipped_with_one_warning(run, translator,
                                                                              tmp_path):
  """translate --compilation_cache: the second process reads the decoding programs the first
  wrote (cache hits, --verbose); a corrupt cache and an unwritable folder each give one warning
  line and the same output, never an error."""
  lines = ['Nov 3, 1999', '22. November 2026', 'Sunday, 1 March 1987']
  want = '\n'.join(translator.translate(lines)) + '\n'
  cache = tmp_path / 'cache'

  def translate(folder):
    p = command(run, f'--compilation_cache={folder}', '--verbose',
                stdin='\n'.join(lines).encode() + b'\n')
    err = p.stderr.decode()
    assert p.returncode == 0 and p.stdout.decode() == want, err
    hits = re.search(r'\((\d+) cache hits\)', err)
    return err, int(hits.group(1))

  err, hits = translate(cache)
  length = translator.planner().length(max(len(translator.src_tok.encode(x)) for x in lines) + 1)
  assert 'warning' not in err and hits == 0 and re.search(
      rf'decoding shapes .*growth {translator.bucket_growth:g}\): 1: 3x{length}\b', err), err
  entries = [p for p in cache.iterdir() if p.name.endswith('-cache')]
  assert entries
  err, hits = translate(cache)
  assert 'warning' not in err and hits >= 1, err
  for p in entries:                      # truncated: zstd cannot read them
    p.write_bytes(p.read_bytes()[:100])
  err, hits = translate(cache)
  assert err.count('warning') == 1 and hits == 0, err
  assert re.search(r'warning: the compilation cache at .* failed.*truncated', err), err
  assert 'compilation cache: off' in err
  blocked = tmp_path / 'a_file'
  blocked.write_text('')
  err, hits = translate(blocked / 'cache')
  assert err.count('warning') == 1, err
  assert f'the compilation cache folder {blocked / "cache"} cannot be written' in err


def test_a_translation_imports_no_data_building_or_plotting_and_every_name_resolves():
  """`aj` and `aj.data` import each name when first used: loading a run and translating
  (what `translate` imports) imports neither TFDS, Matplotlib nor SciPy (about 0.7 s of a
  process's start); every name of both __all__ resolves, and an unknown one is named."""
  code = ('import sys; from attention_jax.decoding import compile_cache; from attention_jax.loaded import loading; '
          'from attention_jax import devices; import attention_jax as aj; '
          'aj.Translator, aj.load, aj.data.EOS, aj.data.decode_limit(8); '
          'print(sorted(m for m in ("tensorflow_datasets", "matplotlib", "scipy") '
          'if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       check=True, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert out.stdout.strip() == '[]', out.stderr
  for module in (aj, data):
    assert set(module.__all__) <= set(dir(module))
    for name in module.__all__:
      assert getattr(module, name) is not None
  assert aj.metrics.register and aj.SCORES is aj.models.scores.SCORES
  with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
    aj.no_such_name
  with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
    data.no_such_name
