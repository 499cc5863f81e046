r"""Word alignments of a parallel text by a trained run, written as Pharaoh links.

  bash launch.sh align --workdir=runs/ge --src=test.grc --tgt=test.en --out=test.links
  bash launch.sh align --workdir=RUN --src=F --tgt=G --gold=gold.links --out=OUT   # + P/R/AER
  bash launch.sh align --workdir=RUN --src=F --tgt=G --map=gradient --out=OUT
  bash launch.sh align --workdir=RUN --src=F --tgt=G --reverse_workdir=RUN_EN_GRC \
      --symmetrise=grow-diag-final --out=OUT

Each line pair (--src and --tgt: one sentence per line, the same number of lines) is
teacher-forced through the run on the target line; the chosen map (--map: the explicit
attention, a Transformer's attention_L<n>[H<h>] or its _shift rows, or an attribution method)
over subwords becomes a map over whitespace words (a target word's rows averaged, a source
word's columns summed), and links are extracted from it (--extract: each target word's argmax
source word, or every source word with at least --threshold of the row). --out gets one line
of `i-j` links per pair (source word i, target word j, 0-indexed, as fast_align and eflomal
write them; a line the run cannot teacher-force, over 4x its training lengths, stays empty and
is counted). --heatmaps=N draws the first N pairs' word maps with the gold links as squares and
the extracted links as dots. With --gold (Pharaoh, `i-j` sure and `i?j` possible links;
--one_indexed if its words count from 1; an empty line: a pair without gold, not scored)
precision, recall and AER are printed, and with --by_word=N the N target words (lower-cased,
punctuation stripped) whose gold links are missed most.

Expected failures print one line `error: ...` and exit with status 2 before the model is loaded
and with nothing written: files that differ in line count, a gold file whose links fall
outside their sentence (or that looks 1-indexed without --one_indexed), an unknown map.
"""

import os
import sys

from absl import flags

from attention_jax.analysis import aligning
from attention_jax.data import pharaoh, textfiles
from attention_jax.evaluation import plots
from attention_jax.implicit import attribution
from attention_jax.implicit import word_alignment as wa
from attention_jax.loaded import loading
from experiments import cli

flags.DEFINE_string('workdir', None, 'A trained run (source -> target).', required=True)
flags.DEFINE_string('src', None, 'Source sentences, one per line.', required=True)
flags.DEFINE_string('tgt', None, 'Target sentences, one per line (as many as --src).',
                    required=True)
flags.DEFINE_string('out', None, 'Where the Pharaoh links go (one line per pair).', required=True)
flags.DEFINE_string('map', 'attention', 'The map links come from: attention, attention_L<n>, '
                    'attention_L<n>H<h>, any of them + _shift (Transformers), or an attribution '
                    'method (gradient, gradient_x_input, integrated_gradients, erasure, ...).')
flags.DEFINE_enum('extract', 'argmax', wa.EXTRACTIONS, 'Link each target word to its argmax '
                  'source word, or to every source word with >= --threshold of its row.')
flags.DEFINE_float('threshold', 0.5, '--extract=threshold: the share of a row a link needs.')
flags.DEFINE_string('gold', None, 'Gold links (Pharaoh) to score against: precision, recall, AER.')
flags.DEFINE_bool('one_indexed', False, 'The --gold file counts words from 1.')
flags.DEFINE_string('reverse_workdir', None, 'A run trained target -> source: its links are '
                    'symmetrised with these (--symmetrise).')
flags.DEFINE_enum('symmetrise', 'grow-diag-final', wa.SYMMETRISATIONS,
                  'How the two directions combine, with --reverse_workdir.')
flags.DEFINE_integer('step', None, 'Checkpoint step (default: the best).')
flags.DEFINE_integer('batch_size', 32, 'Sentence pairs per batch.', lower_bound=1)
flags.DEFINE_integer('heatmaps', 0, 'Draw the first N pairs\' word maps, gold links as squares '
                     'and the extracted links as dots, into --heatmaps_dir.', lower_bound=0)
flags.DEFINE_string('heatmaps_dir', None, 'Where --heatmaps go (default: OUT without its '
                    'extension + .heatmaps).')
flags.DEFINE_integer('by_word', 0, 'With --gold: also print the N target words whose sure links '
                     'are missed most (recall, precision, share of the misses).', lower_bound=0)
flags.DEFINE_integer('steps', 32, 'Integrated gradients: interpolation steps.', lower_bound=1)
CACHE = cli.define_compilation_cache_flag()
FLAGS = flags.FLAGS


def checked_inputs() -> tuple[list[tuple[str, str]], list | None]:
  """The line pairs and the gold, checked before any model is loaded."""
  src, tgt = textfiles.read_lines(FLAGS.src), textfiles.read_lines(FLAGS.tgt)
  if len(src) != len(tgt):
    raise ValueError(f'--src has {len(src)} lines, --tgt {len(tgt)}: the files must pair line '
                     'by line')
  gold = None
  if FLAGS.gold:
    gold = pharaoh.read(FLAGS.gold, sizes=[(len(s.split()), len(t.split()))
                                           for s, t in zip(src, tgt)],
                        one_indexed=FLAGS.one_indexed)
  elif FLAGS.one_indexed:
    raise ValueError('--one_indexed says how the --gold file counts words: give --gold too')
  cli.check_output(FLAGS.out)
  return list(zip(src, tgt)), gold


def main(argv):
  del argv
  cli.use_compilation_cache(CACHE)
  pairs, gold = checked_inputs()
  loading.saved_config(FLAGS.workdir)   # a workdir that holds no run: one line, before loading
  if FLAGS.reverse_workdir:
    loading.saved_config(FLAGS.reverse_workdir)
  t = loading.load(FLAGS.workdir, step=FLAGS.step)
  opts = attribution.Options(steps=FLAGS.steps)
  aligning.check_map(t, FLAGS.map)

  def progress(n):
    print(f'\r{n}/{len(pairs)} pairs', end='', file=sys.stderr, flush=True)
  kw = dict(how=FLAGS.extract, threshold=FLAGS.threshold, batch_size=FLAGS.batch_size,
            options=opts, progress=progress)
  maps = [None] * min(FLAGS.heatmaps, len(pairs))
  links = aligning.align_pairs(t, pairs, FLAGS.map, maps=maps, **kw)
  if FLAGS.reverse_workdir:
    back = loading.load(FLAGS.reverse_workdir)
    aligning.check_map(back, FLAGS.map)
    links = aligning.symmetrised(links, aligning.align_pairs(
        back, [(b, a) for a, b in pairs], FLAGS.map, **kw), FLAGS.symmetrise)
  print(file=sys.stderr)
  skipped = sum(l is None for l in links)
  pharaoh.write(FLAGS.out, [l or frozenset() for l in links])
  print(f'wrote {FLAGS.out}: {len(links)} lines of links ({FLAGS.map}, {FLAGS.extract}'
        + (f', {FLAGS.symmetrise} with {FLAGS.reverse_workdir}' if FLAGS.reverse_workdir else '')
        + ')' + (f'; {skipped} pairs too long to align left empty' if skipped else ''))
  folder = FLAGS.heatmaps_dir or os.path.splitext(FLAGS.out)[0] + '.heatmaps'
  for k, m in enumerate(maps):
    if m is not None:
      g = gold[k] if gold is not None else None
      extra = '' if g is None else f', AER {wa.sentence_aer(g, links[k]):.1f}'
      path = plots.plot_word_alignment(
          m, pairs[k][0].split(), pairs[k][1].split(), g, links[k],
          os.path.join(folder, f'pair_{k + 1}.png'), f'pair {k + 1}: {FLAGS.map}{extra}')
      print(f'drew {path}')
  if gold is not None:   # a pair whose gold line is empty has no gold: not scored
    scored = [k for k, g in enumerate(gold) if g.possible]
    golds, found = [gold[k] for k in scored], [links[k] or frozenset() for k in scored]
    f = wa.score(golds, found)
    unscored = len(gold) - len(scored)
    print(f'precision {f["precision"]:.2f}  recall {f["recall"]:.2f}  AER {f["aer"]:.2f}  '
          f'({f["links"]} links, {f["sure"]} sure gold links, {len(scored)} pairs'
          + (f'; {unscored} with an empty gold line not scored' if unscored else '') + ')')
    if FLAGS.by_word:
      print('\n| target word | sure links | recall | precision | share of the missed |\n'
            '|---|---|---|---|---|')
      for r in wa.by_word(golds, found, [pairs[k][1] for k in scored])[:FLAGS.by_word]:
        print(f'| {r["word"]} | {r["sure"]} | {r["recall"]:.1f} | {r["precision"]:.1f} | '
              f'{r["missed_share"]:.1f}% |')


if __name__ == '__main__':
  cli.run(main)
