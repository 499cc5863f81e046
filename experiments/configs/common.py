"""The base experiment config that every experiment file in this folder starts from.

Sections: `data` (task, tokenizer, batching), `model` (mirrors
`attention_jax.models.model.ModelConfig`), `train` (optimiser, schedule, evaluation,
checkpoints). Every field is overridable from the command line, e.g.
`--config.model.score=general --config.train.steps=500`.
"""

import dataclasses
from typing import Any, Mapping

import ml_collections

from attention_jax import fields
from attention_jax.data import data_fields
from attention_jax.evaluation import evaluators
from attention_jax.models import model as model_lib
from attention_jax.models.model import ModelConfig
from attention_jax.training.objective import Objective

# Where the experiments differ from the library's defaults (a ModelConfig or Objective built
# in Python gets the defaults; tests/test_configs.py keeps these the only differences).
MODEL_OVERRIDES = {
    'dropout': 0.1,            # the experiments regularise; a bare ModelConfig has no dropout
}
OBJECTIVE_OVERRIDES = {
    'entropy_weight': 0.01,    # hard attention: a small entropy bonus (Xu et al. 2015)
}


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.parallel = 'auto'       # auto (shard_map with >1 device) | single | shard_map | pmap

  c.smoke = False           # the smoke variant (shrink): tiny sizes of the fields the model reads

  # ---- data: see attention_jax/data ----------------------------------------------
  # its fields and their defaults: every task's (data_fields.Common, and each task's Fields in
  # attention_jax/data/loaders.py, docs/fields.md); a task's others must keep their defaults
  c.data = ml_collections.ConfigDict(data_fields.defaults())

  # ---- model: attention_jax.models.model.ModelConfig --------------------------------
  # its fields and their defaults (the one source of both: see the field comments in
  # attention_jax/models/model.py), with the experiments' own choices in MODEL_OVERRIDES
  c.model = ml_collections.ConfigDict({**ModelConfig.defaults(), **MODEL_OVERRIDES})

  # ---- train ---------------------------------------------------------------
  t = c.train = ml_collections.ConfigDict()
  t.steps = 3000
  t.lr = 3e-3
  t.warmup_steps = 200
  t.decay = 'cosine'        # cosine | constant | rsqrt
  t.weight_decay = 0.0
  t.clip_norm = 1.0
  t.ema_decay = 0.0         # > 0: evaluate/save an EMA of the parameters (e.g. 0.999); 0: off
  # the loss's coefficients: attention_jax.training.objective.Objective's fields and defaults
  # (label_smoothing, coverage_weight, reinforce_weight, entropy_weight, baseline_decay),
  # with the experiments' own choices in OBJECTIVE_OVERRIDES
  t.update({**dataclasses.asdict(Objective()), **OBJECTIVE_OVERRIDES})
  t.skip_nonfinite = False  # True: skip a batch with a non-finite loss/gradient (counted)
  t.population = 1          # N > 1: seeds seed..seed+N-1 trained as one vmapped program, each
                            # into <workdir>/seed_<k> (attention_jax/training/population_run.py)
  t.eval_every = 500
  t.log_every = 50
  t.checkpoint_every = 500
  t.keep_checkpoints = 2
  t.resume = True
  t.max_decode_factor = 2.0  # greedy/beam output length limit = factor x source length + 10

  # ---- eval ------------------------------------------------------------------
  e = c.eval = ml_collections.ConfigDict()
  e.bleu_tokenize = '13a'   # sacrebleu tokenizer: 13a for words, char for character tasks
  e.length_edges = evaluators.DEFAULT_LENGTH_EDGES  # source-length buckets (lo, hi]
  e.beam_size = 5           # experiments/evaluate.py defaults
  e.alpha = 0.6             # length penalty ((5+|Y|)/6)^alpha (Wu et al. 2016)
  e.heatmaps = 3            # attention heatmaps of the first test sentences at the end (0: none)
  e.attribution = ''        # implicit attention at the end, on tasks with gold alignments (copy,
                            # reverse, sort): methods of attention_jax/implicit/attribution.py,
                            # comma-separated, or 'all'; '' = none (implicit/alignment.py)
  e.attribution_num = 200   # test sentences attributed
  e.attribution_steps = 32  # integrated gradients' steps (and SmoothGrad's samples)
  e.word_alignment = 'auto'  # word alignments against word-level gold (greek_english) at the
                            # end: 'auto' / 'all' every explicit map (attention, a Transformer's
                            # layers, heads, _shift rows), or map names; '' none
  e.word_alignment_methods = ''   # ... and these attribution methods' maps ('all', or names)
  e.word_alignment_num = 0  # test sentences aligned (0: all)
  e.word_alignment_steps = 32  # ... integrated gradients' steps (and SmoothGrad's samples)
  return c


def shrink(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The `smoke` variant of any experiment: tiny data and model, a few steps, seconds.

  Only the fields the config's task reads are shrunk, to its smoke sizes (data_fields.Common's
  and the task's Fields.SMOKE: a size, or a function of the config's value). The model's
  sizes are not written here: `c.smoke` makes the model config (state/templates.model_config)
  give the fields the chosen model reads the tiny sizes its parts declare (their
  Fields.SMOKE), so that the smoke variant of an RNN config still trains a Transformer with
  --config.model.arch=transformer. The config's own values of the fields any part shrinks are
  dropped (a flag after it still sets them)."""
  c.smoke = True
  c.data.update({k: v(c.data[k]) if callable(v) else v
                 for k, v in data_fields.smoke_sizes(c.data.name).items()})
  c.model.update({k: ModelConfig.defaults()[k] for k in fields.smoke_names('model')})
  c.train.steps = 8
  c.train.warmup_steps = 2
  c.train.eval_every = c.train.checkpoint_every = 4
  c.train.log_every = 2
  c.eval.heatmaps = 0   # seconds of drawing; tests that check the heatmaps ask for them
  return c


def switch(c: ml_collections.ConfigDict, **fields) -> dict[str, Any]:
  """Overrides ({'model.<field>': value}, as a sweep variant gives them) that give config c's
  model `fields` (another arch or encoder and its sizes), with the fields c sets that the new
  model does not read put back to their defaults (ModelConfig refuses them otherwise)."""
  new, defaults = {**c.model.to_dict(), **fields}, ModelConfig.defaults()
  read = model_lib.reads(new)
  resets = {k: defaults[k] for k in defaults
            if k not in read and k not in fields and new[k] != defaults[k]}
  return {f'model.{k}': v for k, v in {**fields, **resets}.items()}


def apply_arg(c: ml_collections.ConfigDict, arg: str | None,
              variants: Mapping[str, Mapping[str, Any]] | None = None
              ) -> ml_collections.ConfigDict:
  """The config-file argument (`file.py:ARG`): '' or comma-separated words, 'smoke' and the
  names of the file's `variants` ({name: model fields}: another encoder or arch with its
  sizes, applied with `switch`; a key with a dot, e.g. 'train.lr', sets that field of another
  section), e.g. image_dates.py:vit,smoke."""
  words = [w for w in (arg or '').split(',') if w]
  variants = variants or {}
  for word in words:
    if word != 'smoke' and word not in variants:
      raise ValueError(f'unknown config argument {word!r}; valid: '
                       + ', '.join(repr(w) for w in ('smoke', *variants))
                       + (" (or none, or several joined by ',')" if variants else ' (or none)'))
  for word in words:
    if word in variants:
      fields = variants[word]
      c.update_from_flattened_dict(switch(c, **{k: v for k, v in fields.items() if '.' not in k}))
      c.update_from_flattened_dict({k: v for k, v in fields.items() if '.' in k})
  return shrink(c) if 'smoke' in words else c
