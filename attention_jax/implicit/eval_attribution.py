"""The eval.attribution fields of a run's config: which attribution methods a run measures
against gold alignments, checked before training starts (an unknown method, a task without
gold: one line), and the report measured at its end (alignment.attribute_split on copy /
reverse / sort, alignment.attribute_images' pointing game on digit_strips).

  eval.attribution = 'gradient,integrated_gradients'   # or 'all', '' (none)
  eval.attribution_num = 200, eval.attribution_steps = 32
"""

from __future__ import annotations

from attention_jax.data import builders
from attention_jax.implicit import alignment
from attention_jax.implicit import attribution
from attention_jax.models import encoders


def train_max_len(data_cfg) -> int | None:
  """The longest training source of a task with gold alignments (copy, reverse, sort: their
  test sentences go beyond it), else None."""
  return int(data_cfg.max_len) if data_cfg.name in builders.ALIGNMENTS else None


def config_methods(spec: str, source: str | None = None) -> list[str]:
  """eval.attribution ('' | 'all' | 'gradient,integrated_gradients') -> method names (those
  that apply to `source`, 'tokens' or 'images', where given); an unknown name, or one that
  cannot apply, fails naming the valid ones."""
  names = [m.strip() for m in str(spec or '').split(',') if m.strip()]
  if names == ['all']:
    return attribution.names(source) if source else sorted(attribution.METHODS)
  for m in names:
    if source:
      attribution.check(m, source)
    else:
      attribution.lookup(m)
  return names


def check_task(task, spec: str) -> list[str]:
  """eval.attribution's methods for this task; one line if the task has no gold alignment."""
  methods = config_methods(spec, task.source)
  if methods and not (task.has_alignment and task.source == 'tokens'
                      or getattr(task, 'has_boxes', False)):
    raise ValueError(f'eval.attribution={spec!r} measures attributions against gold '
                     f'alignments, which task {task.name!r} does not have (copy, reverse, '
                     "sort and digit_strips' boxes have them); set eval.attribution=''")
  return methods


def from_config(graphdef, params, task, cfg, model_config, split: str = 'test',
                progress=None) -> dict | None:
  """The attribute_split (token tasks) or attribute_images (digit_strips, over the grid that
  model_config's encoder makes of the task's images) report that a run's eval.attribution*
  fields ask for; None when eval.attribution is empty; a task without gold fails with one
  line."""
  methods = check_task(task, cfg.eval.get('attribution', ''))
  if not methods:
    return None
  steps = int(cfg.eval.get('attribution_steps', 32))
  common = dict(num=int(cfg.eval.get('attribution_num', 200)),
                batch_size=int(cfg.data.batch_size),
                options=attribution.Options(steps=steps, samples=steps), progress=progress)
  if task.source != 'tokens':
    grid = encoders.grid_shape(model_config, task.image_shape)
    return alignment.attribute_images(graphdef, params, task, split, methods, grid, **common)
  return alignment.attribute_split(graphdef, params, task, split, methods,
                         train_max_len=train_max_len(cfg.data), **common)
