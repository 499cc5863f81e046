"""The base experiment config that every experiment file in this folder starts from.

Sections: `data` (task, tokenizer, batching), `model` (mirrors
`attention_jax.models.model.ModelConfig`), `train` (optimiser, schedule, evaluation,
checkpoints). Every field is overridable from the command line, e.g.
`--config.model.score=general --config.train.steps=500`.
"""

import dataclasses

import ml_collections

from attention_jax.evaluation import evaluators
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

  # ---- data: see attention_jax/data --------------------------------------
  d = c.data = ml_collections.ConfigDict()
  d.name = 'dates'          # a name of attention_jax.data.TASKS (data.register_task adds one)
  d.data_dir = ''           # TFDS data dir; '' = ~/tensorflow_datasets
  d.seed = 0                # generation seed of the offline tasks
  d.num_train = 20_000      # examples per split for the offline tasks
  d.num_valid = 1_000
  d.num_test = 1_000
  d.min_len = 1             # symbol tasks (copy/reverse/sort): train/valid lengths
  d.max_len = 50
  d.test_max_len = 100      # symbol tasks: test lengths go up to here
  d.num_symbols = 20        # symbol tasks: alphabet size
  d.max_digits = 4          # addition: digits per operand
  d.stress = False          # cmudict: keep the stress digits of the vowels (AH0 EH1 OW2)
  d.variants = True         # cmudict: every pronunciation of a train word is a training pair
  d.valid_fraction = 0.05   # cmudict: share of the non-test words held out for validation
  d.split = 'hashed'        # cmudict: hashed (SHA-256 of seed:word) | standard (the published
                            # test list); a saved config without it means hashed
  d.textfiles_dir = ''      # textfiles: dir with train.src/train.tgt, valid.*, test.*
  d.tfds_name = 'ted_hrlr_translate/pt_to_en'  # tfds: any translation builder
  d.src_lang = 'pt'         # tfds: language keys of the pair
  d.tgt_lang = 'en'
  d.image_height = 32       # image tasks: the canvas, in pixels
  d.image_width = 256
  d.tokenizer = 'char'      # char | word | sentencepiece
  d.tgt_tokenizer = ''      # the target's, if another ('' = data.tokenizer); cmudict: word
  d.vocab_size = 8000       # sentencepiece vocabulary size
  d.max_src_len = 128       # training examples longer than this (in tokens) are dropped
  d.max_tgt_len = 128
  d.num_buckets = 4         # padded length buckets (a handful of jit shapes)
  d.bucket_multiple = 8     # bucket lengths are multiples of this (8 suits GPUs and TPUs)
  d.batch_size = 64         # global batch (per-device batch x device count)

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
  return c


def shrink(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The `smoke` variant of any experiment: tiny data and model, a few steps, seconds."""
  c.data.num_train, c.data.num_valid, c.data.num_test = 256, 32, 32
  c.data.max_len = min(c.data.max_len, 12)
  c.data.test_max_len = min(c.data.test_max_len, 16)
  c.data.batch_size = 16
  c.data.num_buckets = 1
  c.data.vocab_size = min(c.data.vocab_size, 200)
  c.model.emb_dim = c.model.enc_hidden = c.model.attn_dim = 16
  c.model.dec_hidden = 32
  c.train.steps = 8
  c.train.warmup_steps = 2
  c.train.eval_every = c.train.checkpoint_every = 4
  c.train.log_every = 2
  c.eval.heatmaps = 0   # seconds of drawing; tests that check the heatmaps ask for them
  return c


def apply_arg(c: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """The config-file argument (`file.py:ARG`): '' or 'smoke'."""
  if arg == 'smoke':
    return shrink(c)
  if arg:
    raise ValueError(f"unknown config argument {arg!r}; valid: 'smoke' (or none)")
  return c
