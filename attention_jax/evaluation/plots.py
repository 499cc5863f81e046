"""Attention heatmaps (matplotlib, no display needed)."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from attention_jax.evaluation import metrics as metrics_lib


def _pyplot():
  """matplotlib.pyplot on the Agg backend (no display), imported at the first plot: it adds
  about a second to the start of every process that imports this module."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _save(fig, path: str, dpi: int) -> str:
  """Lays the figure out, writes it to path (creating its directory) and closes it."""
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=dpi)
  _pyplot().close(fig)
  return path


def _draw(ax, weights, src_tokens, tgt_tokens, title):
  weights = np.asarray(weights, np.float32)[:len(tgt_tokens), :len(src_tokens)]
  ax.imshow(weights, cmap='Greys', vmin=0.0, vmax=max(float(weights.max(initial=0)), 1e-6),
            aspect='auto')
  ax.set_xticks(range(len(src_tokens)), [repr(t)[1:-1] for t in src_tokens], rotation=90,
                fontsize=8)
  ax.set_yticks(range(len(tgt_tokens)), [repr(t)[1:-1] for t in tgt_tokens], fontsize=8)
  ax.set_xlabel('source')
  ax.set_ylabel('output')
  if title:
    ax.set_title(title, fontsize=9)


def plot_attention(weights, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                   path: str, title: str = '') -> str:
  """weights [T, S] (rows: output tokens, columns: source tokens) -> a labelled PNG at path."""
  t, s = len(tgt_tokens), len(src_tokens)
  fig, ax = _pyplot().subplots(figsize=(max(3.0, 0.28 * s + 1.5), max(2.5, 0.28 * t + 1.2)))
  _draw(ax, weights, src_tokens, tgt_tokens, title)
  return _save(fig, path, dpi=110)


def plot_attention_grid(items, path: str, cols: int = 3) -> str:
  """items: list of (weights [T, S], src_tokens, tgt_tokens, title) -> one PNG grid."""
  rows = (len(items) + cols - 1) // cols
  fig, axes = _pyplot().subplots(rows, cols, figsize=(5 * cols, 4.5 * rows), squeeze=False)
  for ax, item in zip(axes.flat, items):
    _draw(ax, *item)
  for ax in list(axes.flat)[len(items):]:
    ax.axis('off')
  return _save(fig, path, dpi=100)


def plot_by_length(curves: dict[str, list[dict]], path: str, metric: str = 'bleu',
                   title: str = '', train_max_len: int | None = None) -> str:
  """curves: {variant: report['by_length']} -> one line per variant, metric vs source length
  (the figure of Bahdanau et al. 2015, Fig. 2). Rows with 'ci_lo' / 'ci_hi' (a mean over
  seeds) get their confidence interval drawn as a band. A dashed line marks the longest
  training length, if given."""
  fig, ax = _pyplot().subplots(figsize=(7, 4.2))
  for name, rows in curves.items():
    xs = [(r['lo'] + r['hi']) / 2 for r in rows]
    line, = ax.plot(xs, [r[metric] for r in rows], marker='o', label=name)
    band = [(x, r['ci_lo'], r['ci_hi']) for x, r in zip(xs, rows)
            if np.isfinite(r.get('ci_lo', np.nan))]
    if band:
      bx, lo, hi = zip(*band)
      ax.fill_between(bx, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
  if train_max_len:
    ax.axvline(train_max_len, color='grey', linestyle='--', linewidth=1)
    ax.text(train_max_len, ax.get_ylim()[0], ' longest training sentence', color='grey',
            fontsize=8, va='bottom')
  ax.set_xlabel('source length (tokens)')
  m = metrics_lib.METRICS.get(metric)
  ax.set_ylabel(m.label + m.unit if m else metric.replace('_', ' '))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  if title:
    ax.set_title(title, fontsize=10)
  return _save(fig, path, dpi=110)


def plot_bars(intervals: dict[str, tuple[float, float, float]], path: str,
              ylabel: str = 'BLEU', title: str = '') -> str:
  """{variant: (mean, ci_lo, ci_hi)} -> a bar chart of the means with their confidence
  intervals as error bars (none where the interval is nan, e.g. one seed)."""
  names = list(intervals)
  means = np.array([intervals[n][0] for n in names], np.float64)
  lo = np.array([intervals[n][1] for n in names], np.float64)
  hi = np.array([intervals[n][2] for n in names], np.float64)
  err = np.nan_to_num(np.stack([means - lo, hi - means]), nan=0.0)
  fig, ax = _pyplot().subplots(figsize=(max(5.0, 0.5 * len(names) + 2), 4.2))
  ax.bar(range(len(names)), means, yerr=err, capsize=3, color='#4878a8')
  if title:
    ax.set_title(title, fontsize=10)
  ax.set_xticks(range(len(names)), names, rotation=60, ha='right', fontsize=8)
  ax.set_ylabel(ylabel)
  ax.grid(axis='y', alpha=0.3)
  return _save(fig, path, dpi=110)


# ---- attention over an image (Xu et al. 2015, the figures of §5) ---------------------------
def _interpolation(n_in: int, n_out: int) -> np.ndarray:
  """[n_out, n_in]: linear interpolation between the centres of n_in cells onto n_out
  pixels (edges held), as a matrix, so that a whole map is resampled by two products."""
  x = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
  lo = np.floor(x).astype(np.int64)
  hi = np.minimum(lo + 1, n_in - 1)
  m = np.zeros((n_out, n_in), np.float64)
  np.add.at(m, (np.arange(n_out), lo), 1 - (x - lo))
  np.add.at(m, (np.arange(n_out), hi), x - lo)
  return m


def _upsample(grid: np.ndarray, h: int, w: int) -> np.ndarray:
  """grid [H', W'] -> [h, w], bilinear between cell centres (edges held)."""
  return _interpolation(grid.shape[0], h) @ grid @ _interpolation(grid.shape[1], w).T


def _overlay(image, grid) -> np.ndarray:
  """The image in grey (or its colours), one step's attention over its grid [H', W']
  upsampled onto it (bilinear) and drawn in 'inferno' at 60% opacity, scaled to the step's
  maximum -> RGB [H, W, 3] in [0, 1]."""
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  image = np.clip(np.asarray(image, np.float32), 0, 1)
  if image.ndim == 2 or image.shape[-1] == 1:
    image = np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=-1)
  grid = np.asarray(grid, np.float32)
  heat = _upsample(grid, *image.shape[:2]) / max(float(grid.max()), 1e-6)
  return 0.4 * image + 0.6 * colormaps['inferno'](np.clip(heat, 0, 1))[..., :3]


def _draw_steps(ax, image, weights, labels, gap: int) -> None:
  """Output steps top to bottom: each label's _overlay, `gap` white pixels apart, drawn as one
  picture in one axes (an axes per step made a figure of 26 steps take 2 s to lay out and
  write; this takes a fraction of it)."""
  h, w = np.asarray(image).shape[:2]
  column = np.ones((len(labels) * (h + gap) - gap, w, 3), np.float32)
  for i in range(len(labels)):
    column[i * (h + gap):i * (h + gap) + h] = _overlay(image, np.asarray(weights)[i])
  ax.imshow(column, extent=(0, w, column.shape[0], 0), interpolation='nearest')
  ax.set_xticks([])
  ax.set_yticks([i * (h + gap) + h / 2 for i in range(len(labels))],
                [repr(t)[1:-1] for t in labels], fontsize=9)
  ax.tick_params(axis='y', length=0)
  ax.set_anchor('N')   # a shorter column of the grid starts at the top
  for side in ax.spines.values():
    side.set_visible(False)


def plot_image_attention(image, weights, tgt_tokens: Sequence[str], path: str,
                         title: str = '') -> str:
  """image [H, W] (pixels in [0, 1]), weights [T, H', W'] over its grid -> a PNG with one row
  per output token: where the decoder looked to emit it."""
  image = np.asarray(image)
  (h, w), gap = image.shape[:2], max(2, image.shape[0] // 8)
  width = 8.0   # inches; the picture's 7 of them as wide as the image, its height to scale
  fig, ax = _pyplot().subplots(figsize=(
      width, 7.0 * (len(tgt_tokens) * (h + gap) - gap) / w + 0.7))
  _draw_steps(ax, image, weights, tgt_tokens, gap)
  if title:
    ax.set_title(title, fontsize=9)
  return _save(fig, path, dpi=100)


def plot_image_attention_grid(items, path: str, steps: int = 10) -> str:
  """items: list of (image [H, W], weights [T, H', W'], tgt_tokens, title) -> one PNG: a column
  per example, its first `steps` output tokens top to bottom."""
  rows = min(steps, max(len(it[2]) for it in items))
  h, w = np.asarray(items[0][0]).shape[:2]
  gap = max(2, h // 8)
  width = 4.0   # inches per example, its picture's 3.4 as wide as the image
  fig, axes = _pyplot().subplots(1, len(items), figsize=(
      width * len(items), 3.4 * (rows * (h + gap) - gap) / w + 0.8), squeeze=False)
  for ax, (img, weights, tokens, title) in zip(axes[0], items):
    _draw_steps(ax, img, weights, tokens[:rows], gap)
    ax.set_title(title, fontsize=8)
  return _save(fig, path, dpi=100)


def plot_word_alignment(w, src_words: Sequence[str], tgt_words: Sequence[str], gold,
                        links, path: str, title: str = '') -> str:
  """A word map w [Tw, Sw] (rows: target words, columns: source words) with the gold links
  drawn as squares (sure: solid, possible only: dotted) and the extracted links as dots;
  gold: pharaoh.Alignment or None, links: {(source word, target word)}."""
  plt = _pyplot()
  t, s = len(tgt_words), len(src_words)
  fig, ax = plt.subplots(figsize=(max(3.5, 0.32 * s + 1.8), max(3.0, 0.3 * t + 1.4)))
  _draw(ax, np.asarray(w)[:t, :s], src_words, tgt_words, title)
  patches = _pyplot_patches()
  if gold is not None:
    for i, j in gold.possible:
      ax.add_patch(patches.Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, lw=1.6,
                                     ec='tab:red', ls='-' if (i, j) in gold.sure else ':'))
  if links:
    i, j = zip(*sorted(links))
    ax.scatter(i, j, s=14, c='tab:cyan', marker='o', edgecolors='k', linewidths=0.4,
               zorder=3)
  return _save(fig, path, dpi=110)


def _pyplot_patches():
  from matplotlib import patches  # pylint: disable=g-import-not-at-top  (as _pyplot: on use)
  return patches
