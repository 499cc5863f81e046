r"""Implicit attention of a trained run: gradient and erasure attributions beside the explicit
weights.

  bash launch.sh attribute --workdir=runs/reverse --methods=gradient,integrated_gradients
  bash launch.sh attribute --workdir=RUN --input=lines.txt [--reference=refs.txt] [--beam=5]
  bash launch.sh attribute --workdir=IMAGE_RUN --input=scans.txt --methods=gradient,gradcam
  bash launch.sh attribute --workdir=runs/reverse --methods=gradient,erasure --erase=unk

With --input (one source per line; image runs: one image file per line): each line's output
(greedy, or --beam; or the line of --reference, teacher-forced) is attributed by every method,
and the first --figures lines are drawn side by side (explicit weights | each method) into
--out_dir (default WORKDIR/attributions). Without --input, on tasks with gold alignments
(copy, reverse, sort): the first --num examples of --split, teacher-forced on their
references, give per method the alignment accuracy, the mass on the gold position, Kendall
tau and JSD against the explicit weights, and faithfulness (AOPC: the drop of log p(y_t)
when the top 1..--k positions are zeroed, against random positions), within and beyond the
training lengths; on digit_strips, whose digits' boxes are recorded, the pointing game (the
argmax in the output digit's box) and the mass in the box; written to
OUT_DIR/alignment_<split>.json and printed as tables (attention_jax/implicit/alignment.py).

Methods: attention_jax/implicit/attribution.py (default: every method the run's source allows).
Expected failures (bad flags, an unknown method, a run without gold alignments, an empty or
unreadable --input) print one line `error: ...` and exit with status 2, before the model is
loaded and without creating --out_dir.
"""

import json
import os
import sys

import ml_collections
import numpy as np
from absl import flags

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.data import builders
from attention_jax.evaluation import evaluators, plots
from attention_jax.implicit import alignment, attribution
from attention_jax.implicit import saliency as saliency_lib
from attention_jax.loaded import loading, translator
from attention_jax.models import encoders
from experiments import cli

flags.DEFINE_string('workdir', None, 'A training run directory.', required=True)
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_list('methods', [], 'Attribution methods (default: all that apply).')
flags.DEFINE_string('input', None, 'Sources, one per line (image runs: image files).')
flags.DEFINE_string('reference', None, 'Outputs to attribute, one per --input line.')
flags.DEFINE_string('split', 'test', 'The split to measure against gold alignments.')
flags.DEFINE_integer('num', 200, 'Examples of --split measured.', lower_bound=1)
flags.DEFINE_integer('figures', 4, 'Sentences drawn.', lower_bound=0)
flags.DEFINE_integer('beam', 1, 'Beam size of the attributed output (1 = greedy).', lower_bound=1)
flags.DEFINE_integer('k', 3, 'Faithfulness: positions deleted, 1..k.', lower_bound=1)
flags.DEFINE_integer('steps', 32, 'Integrated gradients: interpolation steps (quadrature nodes).',
                     lower_bound=1)
flags.DEFINE_enum('rule', 'midpoint', attribution.RULES, 'Integrated gradients: the quadrature '
                  'over the path (gauss_legendre: fewer steps for the same error on smooth models; '
                  'adaptive: cells placed where the outputs change, 16 forward passes a step; '
                  'refine: cells bisected where completeness fails until --tol holds, at most '
                  '--steps nodes (>= 9); on a trained model e.g. --rule=refine --steps=257).')
flags.DEFINE_float('tol', 0.01, "Integrated gradients, --rule=refine: the completeness error it "
                   "refines to, a share of the largest change of an output's log-probability.")
flags.DEFINE_integer('samples', 16, 'SmoothGrad: noisy samples.', lower_bound=1)
flags.DEFINE_enum('baseline', 'zero', attribution.BASELINES, 'Integrated gradients: baseline.')
flags.DEFINE_enum('erase', 'zero', attribution.ERASURES, "Erasure: an erased position's value: "
                  "tokens zero (the zero embedding), pad or unk (that token's embedding); "
                  "images zero (black) or mean (the image's mean pixel, grey).")
flags.DEFINE_string('out_dir', None, 'Where the figures and files go (default WORKDIR/attributions).')
CACHE = cli.define_compilation_cache_flag()
FLAGS = flags.FLAGS


def draw(saliencies: list[saliency_lib.Saliency], path: str) -> str:
  """One sentence: the explicit weights, then each method's magnitudes, side by side."""
  first = saliencies[0]
  items = [(first.weights, first.src_tokens, first.tgt_tokens, 'explicit attention')]
  for s in saliencies:   # each row scaled to its maximum: gradients differ in scale by row
    m = np.asarray(attribution.ranking(s.method, s.scores))
    m = m / np.maximum(m.max(-1, keepdims=True), 1e-12)
    items.append((m, s.src_tokens, s.tgt_tokens, f'{s.method} (rows scaled to their max)'))
  return plots.plot_attention_grid(items, path, cols=len(items))


def draw_image(saliencies: list[saliency_lib.Saliency], image: np.ndarray, path: str) -> str:
  """One image: a column for the explicit weights over its grid, one per method (pixels or
  grid), a row per output token."""
  first = saliencies[0]
  items = [(image, first.weights, first.tgt_tokens, 'explicit attention')] + [
      (image, np.asarray(attribution.ranking(s.method, s.scores)), s.tgt_tokens, s.method)
      for s in saliencies]
  return plots.plot_image_attention_grid(items, path)


def read_lines(path: str) -> list[str]:
  """A UTF-8 file's lines (without line ends); a bad file is one ValueError naming it."""
  try:
    with open(path, encoding='utf-8-sig') as f:
      return f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f'{path}: cannot read it as UTF-8 text ({type(e).__name__}: {e})') from None


def on_lines(t: translator.Translator, methods, lines, refs, opts, out_dir: str) -> None:
  t.check(lines, name=lambda i: f'{FLAGS.input}:{i + 1}')
  os.makedirs(out_dir, exist_ok=True)
  records = []
  for i, (line, ref) in enumerate(zip(lines, refs)):
    sal = [t.saliency(line, m, beam=FLAGS.beam, reference=ref, **opts) for m in methods]
    record = {'line': i + 1, 'source': line, 'output': sal[0].output,
              'src_tokens': sal[0].src_tokens, 'tgt_tokens': sal[0].tgt_tokens,
              'weights': sal[0].weights.tolist(),
              **{s.method: s.scores.tolist() for s in sal}}
    records.append(record)
    if i < FLAGS.figures and sal[0].tgt_tokens:
      path = os.path.join(out_dir, f'line_{i + 1}.png')
      if t.config.source == 'tokens':
        draw(sal, path)
      else:
        draw_image(sal, t.read_image(line), path)
      print(f'line {i + 1}: {sal[0].output!r} -> {path}', file=sys.stderr)
  out = os.path.join(out_dir, 'attributions.jsonl')
  workdir_lib.write_atomic(out, ''.join(json.dumps(r) + '\n' for r in records))
  print(f'wrote {out} ({len(records)} lines) and {min(FLAGS.figures, len(records))} figures '
        f'in {out_dir}/')


def on_split(t: translator.Translator, methods, opts, out_dir: str) -> None:
  cfg = ml_collections.ConfigDict(t.run_config)
  task = data_lib.load_task(cfg.data, seed=cfg.seed, tokenizers=(t.src_tok, t.tgt_tok))
  def progress(n):
    print(f'\r{n}/{FLAGS.num} sentences', end='', file=sys.stderr)
  if t.config.source == 'tokens':
    report = alignment.attribute_split(
        t.graphdef, t.params, task, FLAGS.split, methods, num=FLAGS.num, k=FLAGS.k,
        options=attribution.Options(**opts), train_max_len=evaluators.train_max_len(cfg.data),
        progress=progress)
  else:   # digit_strips: the pointing game in each digit's recorded box
    report = alignment.attribute_images(
        t.graphdef, t.params, task, FLAGS.split, methods,
        encoders.grid_shape(t.config, task.image_shape), num=FLAGS.num,
        options=attribution.Options(**opts), progress=progress)
  print(file=sys.stderr)
  report.update({'workdir': os.path.abspath(FLAGS.workdir), 'step': t.step,
                 'split': FLAGS.split, 'options': opts})
  path = os.path.join(out_dir, f'alignment_{FLAGS.split}.json')
  os.makedirs(out_dir, exist_ok=True)
  workdir_lib.write_atomic(path, json.dumps(report, indent=1) + '\n')
  print(alignment.format_report(report, FLAGS.split))
  print(f'wrote {path}')


def checked_inputs(source: str, task_name: str, opts: dict) -> tuple[list[str], list[str], list]:
  """The methods, --input lines and --reference lines, checked before the model is loaded
  (a refused command loads nothing and creates no folder): every method and option applies
  to the run's source, the input has lines and the reference as many, and without --input
  the run's task has gold alignments."""
  methods = FLAGS.methods or attribution.names(source)
  for m in methods:
    attribution.check(m, source)
  attribution.check_options(attribution.Options(**opts), source)
  if FLAGS.reference and not FLAGS.input:
    raise ValueError('--reference gives the outputs of the --input lines: give --input too')
  if not FLAGS.input:
    if source == 'tokens' and task_name not in builders.ALIGNMENTS:
      raise ValueError(f'task {task_name!r} has no gold alignments: without --input, '
                       f'attribute measures against them ({", ".join(builders.ALIGNMENTS)}); '
                       'give --input=FILE to attribute your own lines')
    return methods, [], []
  lines = read_lines(FLAGS.input)
  if not lines:
    raise ValueError(f'{FLAGS.input} has no lines: nothing to attribute (one source per line)')
  refs = read_lines(FLAGS.reference) if FLAGS.reference else [None] * len(lines)
  if len(refs) != len(lines):
    raise ValueError(f'--reference has {len(refs)} lines, --input {len(lines)}')
  return methods, lines, refs


def main(argv):
  del argv
  cli.use_compilation_cache(CACHE)
  mcfg, run_cfg = loading.saved_config(FLAGS.workdir)
  opts = {'steps': FLAGS.steps, 'samples': FLAGS.samples, 'baseline': FLAGS.baseline,
          'rule': FLAGS.rule, 'erase': FLAGS.erase, 'tol': FLAGS.tol}
  methods, lines, refs = checked_inputs(mcfg.source, run_cfg.get('data', {}).get('name', ''),
                                        opts)
  out_dir = FLAGS.out_dir or workdir_lib.Run(FLAGS.workdir).attributions_dir
  if os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise NotADirectoryError(20, 'is a file, not a folder for --out_dir', out_dir)
  t = loading.load(FLAGS.workdir, step=FLAGS.step)
  if FLAGS.input:
    on_lines(t, methods, lines, refs, opts, out_dir)
  else:
    on_split(t, methods, opts, out_dir)


if __name__ == '__main__':
  cli.run(main)
