r"""Prepare a data set offline and print what the model will see.

  python -m experiments.data_info --config=experiments/configs/dates.py
  python -m experiments.data_info --config=experiments/configs/textfiles.py \
      --config.data.textfiles_dir=/path/to/corpus
  bash launch.sh data-info experiments/configs/reverse.py --config.data.num_train=2000

Prints split sizes, source/target length statistics (tokens, without EOS), vocabulary sizes,
the bucket shapes (S, T) with the share of padding, and three decoded training examples.
Image tasks: --draw=FILE.png draws the first --draw_num images of every split (image_dates:
with each one's typeface), e.g. the training images' augmentations beside the held-out fonts:

  bash launch.sh data-info experiments/configs/image_dates.py --draw=docs/image_dates_fonts.png
"""

import time

from absl import app, flags
from ml_collections import config_flags

from attention_jax import data
from attention_jax.data import cmudict, image_builders
from experiments import cli

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file.',
                                          lock_config=True)
_DRAW = flags.DEFINE_string('draw', None, 'Image tasks: a PNG of the first --draw_num images '
                            'of every split.')
_DRAW_NUM = flags.DEFINE_integer('draw_num', 4, 'Images per split for --draw.', lower_bound=1)


def _lengths(stats: dict) -> str:
  return ('min {min} mean {mean:.1f} p50 {p50:.0f} p90 {p90:.0f} p99 {p99:.0f} max {max}'
          .format(**stats)) if stats else '-'


def _words_and_symbols(task) -> list[str]:
  """Distinct sources (words) and pairs per split, the symbol inventories, one example per
  split with all its references (tasks with several references per source, e.g. cmudict)."""
  lines = []
  for split in data.SPLITS:
    pairs = task.texts(split)
    refs = task.references(split)
    extra = ''
    if refs is not None:
      multi = len({s for (s, _), r in zip(pairs, refs) if len(r) > 1})
      extra = f'; {multi} sources with several references'
    lines.append(f'{split:>10}: {len({s for s, _ in pairs})} distinct sources in {len(pairs)} '
                 f'pairs{extra}')
  for side, tok in (('source', task.src_tok), ('target', task.tgt_tok)):
    symbols = getattr(tok, 'symbols', None)
    if symbols is not None and len(symbols) <= 200:
      lines.append(f'{side} symbols ({tok.kind}, {len(symbols)}): {" ".join(symbols)}')
  for split in data.SPLITS:
    refs = task.references(split)
    i = next((i for i, r in enumerate(refs) if len(r) > 1), 0) if refs is not None else 0
    src, tgt = task.texts(split)[i]
    lines.append(f'  {split} example: {src!r} -> {tgt!r}'
                 + (f'  (references: {" | ".join(refs[i])})' if refs is not None else ''))
  return lines


def load(cfg):
  """(the config's task, seconds it took to prepare and load)."""
  start = time.time()
  task = data.load_task(cfg.data, seed=cfg.get('seed', 0))
  return task, time.time() - start


def describe(cfg, *, num_examples: int = 3, loaded=None) -> str:
  """The report printed by this script, for the config's data section (`loaded`: load(cfg),
  if the caller has it already)."""
  task, elapsed = loaded or load(cfg)
  d = cfg.data
  s = task.stats(d.batch_size)
  lines = [f'task {s["name"]}: {s["location"]}  (loaded in {elapsed:.1f} s)',
           f'tokenizer {d.tokenizer}: source vocab {s["src_vocab"]}, target vocab '
           f'{s["tgt_vocab"]}',
           f'train buckets (S, T): {s["bucket_shapes"]}  (batch {d.batch_size}; max lengths '
           f'{d.max_src_len} / {d.max_tgt_len} incl. EOS; {s["num_dropped"]} training '
           'examples dropped as too long)']
  for split, info in s['splits'].items():
    lines += [f'{split:>10}: {info["size"]} examples, shapes {info["shapes"]}, '
              f'padding {100 * info["padding_share"]:.1f}%',
              f'{"":>12}source tokens: {_lengths(info["src_len"])}',
              f'{"":>12}target tokens: {_lengths(info["tgt_len"])}']
  lines += _words_and_symbols(task)
  if d.name == 'cmudict':
    words = {split: len({s for s, _ in task.texts(split)}) for split in data.SPLITS}
    lines.append(cmudict.split_note(cmudict.make_config(d).split, words))
  batch = next(iter(task.train_iterator(d.batch_size, seed=cfg.get('seed', 0))))
  lines.append(f'first training batch: src {batch["src"].shape}, tgt_in '
               f'{batch["tgt_in"].shape}; examples decoded from its ids:')
  for r in range(min(num_examples, int(batch['weight'].sum()))):
    src = (repr(task.src_tok.decode(batch['src'][r])) if task.source == 'tokens' else
           f'image {batch["src"][r].shape} of {task.texts("train")[batch["index"][r]][0]!r}')
    lines.append(f'  [{batch["index"][r]}] {src} -> {task.tgt_tok.decode(batch["tgt_out"][r])!r}')
  if task.has_alignment:
    gold = task.batch_alignment(batch)[0]
    lines.append(f'  gold alignment of the first (target position -> source position): '
                 f'{gold[gold >= 0].tolist()}')
  return '\n'.join(lines)


def draw(task, path: str, num: int = 4) -> str:
  """The first `num` images of every split of an image task, a row each (titled with the
  split, the typeface where the task records one, and what is drawn) -> path."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  if task.source != 'images':
    raise ValueError(f'--draw: task {task.name!r} has no images (image tasks: '
                     f'{", ".join(image_builders.IMAGE_BUILDERS)})')
  rows = [(split, i) for split in task.splits for i in range(min(num, len(task.texts(split))))]
  h, w = task.image_shape
  fig, axes = plt.subplots(len(rows), 1, figsize=(w / 40, len(rows) * (h / 40 + 0.35)),
                           squeeze=False)
  for ax, (split, i) in zip(axes[:, 0], rows):
    font = task.features(split).get('font')
    ax.imshow(task.image(split, i), cmap='gray', vmin=0, vmax=1)
    ax.set_title(f'{split}: {task.texts(split)[i][0]!r}' + (f' ({font[i]})' if font else ''),
                 fontsize=8, loc='left')
    ax.axis('off')
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  loaded = load(_CONFIG.value)        # once, for the report and the drawing
  print(describe(_CONFIG.value, loaded=loaded))
  if _DRAW.value:
    print(f'drawn: {draw(loaded[0], _DRAW.value, _DRAW_NUM.value)}')


if __name__ == '__main__':
  flags.mark_flags_as_required(['config'])
  cli.run(main)
