"""The base experiment config that every experiment file in this folder starts from.

Sections: `data` (task, tokenizer, batching), `model` (mirrors
`attention_jax.model.ModelConfig`), `train` (optimiser, schedule, evaluation,
checkpoints). Every field is overridable from the command line, e.g.
`--config.model.score=general --config.train.steps=500`.
"""

import ml_collections

from attention_jax import evaluate


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.parallel = 'auto'       # auto (shard_map with >1 device) | single | shard_map | pmap

  # ---- data: see attention_jax/data --------------------------------------
  d = c.data = ml_collections.ConfigDict()
  d.name = 'dates'          # dates | copy | reverse | sort | addition | cmudict | textfiles | tfds
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
  d.tokenizer = 'char'      # char | word | sentencepiece
  d.tgt_tokenizer = ''      # the target's, if another ('' = data.tokenizer); cmudict: word
  d.vocab_size = 8000       # sentencepiece vocabulary size
  d.max_src_len = 128       # training examples longer than this (in tokens) are dropped
  d.max_tgt_len = 128
  d.num_buckets = 4         # padded length buckets (a handful of jit shapes)
  d.batch_size = 64         # global batch (per-device batch x device count)

  # ---- model: attention_jax.model.ModelConfig ----------------------------
  m = c.model = ml_collections.ConfigDict()
  m.arch = 'rnn'            # rnn (the fields down to self_attention_score) | transformer
  m.cell = 'gru'            # gru | lstm
  m.emb_dim = 64
  m.enc_hidden = 64
  m.enc_layers = 1
  m.bidirectional = True
  m.dec_hidden = 128
  m.dec_layers = 1
  m.decoder = 'bahdanau'    # bahdanau | luong
  m.score = 'additive'      # see attention_jax.SCORES
  m.attn_dim = 64
  m.input_feeding = True    # luong only
  m.attention_mode = 'global'  # global | local_m | local_p | hard | hard_st
  m.normaliser = 'softmax'  # softmax | sparsemax
  m.window = 5              # D: half-width of the local_m / local_p window
  m.coverage = False        # coverage vector in the additive score (Tu et al. 2016)
  m.hard_temperature = 1.0  # hard_st: Gumbel-softmax temperature
  m.self_attention_layers = 0  # encoder self-attention layers (0 = off)
  m.self_attention_heads = 4
  m.self_attention_score = 'scaled_dot'
  m.dropout = 0.1
  m.max_src_len = 128       # location score: size of its output layer
  m.dtype = 'float32'       # compute dtype: float32 | bfloat16 (params stay float32)
  # transformer (arch=transformer; also reads self_attention_score, normaliser, dropout):
  m.d_model = 128
  m.heads = 4
  m.ff_dim = 512
  m.transformer_layers = 3  # encoder layers, and as many decoder layers
  # positions: sinusoidal (defined for every length: sentences longer than the training
  # maximum get positions the model has never seen, but they are well defined), learned (a
  # table of max_positions vectors: positions past the training lengths stay at their
  # random init, and inputs or output limits past max_positions are refused), none (the
  # encoder sees a bag of tokens; the decoder only the causal order)
  m.positions = 'sinusoidal'
  m.max_positions = 512
  m.norm_first = True       # pre-norm (False: post-norm, as in Vaswani et al. 2017)
  m.attention_dropout = 0.0
  m.cross_attention_score = 'scaled_dot'  # any content score: see attention_jax.multihead
  m.share_embeddings = False  # one table for source and target (needs one vocabulary)
  m.tie_output = False      # output projection = the target embeddings (Press & Wolf 2017)

  # ---- train ---------------------------------------------------------------
  t = c.train = ml_collections.ConfigDict()
  t.steps = 3000
  t.lr = 3e-3
  t.warmup_steps = 200
  t.decay = 'cosine'        # cosine | constant | rsqrt
  t.weight_decay = 0.0
  t.clip_norm = 1.0
  t.label_smoothing = 0.0
  t.ema_decay = 0.0         # > 0: evaluate/save an EMA of the parameters (e.g. 0.999); 0: off
  t.coverage_weight = 0.0   # coverage loss weight λ_cov (See et al. 2017 use 1.0)
  t.reinforce_weight = 1.0  # hard attention: REINFORCE term λ_r (Xu et al. 2015)
  t.entropy_weight = 0.01   # hard attention: entropy bonus λ_e
  t.baseline_decay = 0.9    # hard attention: moving-average reward baseline
  t.skip_nonfinite = False  # True: skip a batch with a non-finite loss/gradient (counted)
  t.eval_every = 500
  t.log_every = 50
  t.checkpoint_every = 500
  t.keep_checkpoints = 2
  t.resume = True
  t.max_decode_factor = 2.0  # greedy/beam output length limit = factor x source length + 10

  # ---- eval ------------------------------------------------------------------
  e = c.eval = ml_collections.ConfigDict()
  e.bleu_tokenize = '13a'   # sacrebleu tokenizer: 13a for words, char for character tasks
  e.length_edges = evaluate.DEFAULT_LENGTH_EDGES  # source-length buckets (lo, hi]
  e.beam_size = 5           # experiments/evaluate.py defaults
  e.alpha = 0.6             # length penalty ((5+|Y|)/6)^alpha (Wu et al. 2016)
  e.heatmaps = 3            # attention heatmaps of the first test sentences at the end (0: none)
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
