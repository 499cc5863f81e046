"""Koine Greek -> English, verse by verse (SBLGNT -> BSB), with manual word alignments.

  bash launch.sh train experiments/configs/greek_english.py --workdir=runs/ge
  bash launch.sh align --workdir=runs/ge --src=G --tgt=E [--gold=LINKS] --out=OUT
  bash launch.sh data-info experiments/configs/greek_english.py     # split sizes, examples
  bash launch.sh train experiments/configs/greek_english.py:smoke --workdir=/tmp/ge_smoke
  bash launch.sh sweep experiments/configs/greek_english.py --seeds=3   # the alignment study

Data (attention_jax/data/bible.py): the bible-alignments 0.4.2 wheel, fetched once with pip and
its SHA-256 checked; 7,936 verse pairs, test and validation verses by SHA-256 of the verse id
(506 and 486), 6,944 training verses. Sentencepiece unigram per side (data.vocab_size for the
Greek, data.tgt_vocab_size for the English). Test BLEU and chrF on the detokenised English.

A low-resource recipe after Sennrich & Zhang 2019 ("Revisiting low-resource neural machine
translation"): small subword vocabularies, a small model, strong dropout, label smoothing,
small batches. Bahdanau's decoder (GRU) over a biGRU encoder, `additive` score.

At the end, the test verses' word alignments of every explicit map (and of the attribution
methods in eval.word_alignment_methods) against the manual ones: precision, recall, AER
(attention_jax/implicit/word_maps.py). The sweep (get_sweep) is the alignment study of
docs/alignment.md: the scores and modes below, no attention, a Transformer, and guided
alignment (Garg et al. 2019) on all and on a fifth of the training pairs' gold.
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  d, m, t = c.data, c.model, c.train
  d.name = 'greek_english'
  d.tokenizer = 'sentencepiece'
  d.vocab_size = 2000          # Greek pieces
  d.tgt_vocab_size = 2000      # English pieces
  d.max_src_len = 96           # the longest verses (about 1% of training verses are dropped)
  d.max_tgt_len = 96
  d.num_buckets = 6
  d.batch_size = 32
  m.cell = 'gru'
  m.emb_dim = 256
  m.enc_hidden = 128           # per direction: annotations of 256, as wide as the decoder
  m.enc_layers = 1
  m.dec_hidden = 256
  m.attn_dim = 256
  m.decoder = 'bahdanau'
  m.score = 'additive'
  m.dropout = 0.4
  t.steps = 3000               # about 21 minutes on 2 cores
  t.lr = 2e-3
  t.warmup_steps = 300
  t.label_smoothing = 0.1
  t.eval_every = 500
  t.checkpoint_every = 500
  t.log_every = 100
  c.eval.beam_size = 5
  c.eval.heatmaps = 3
  c.eval.word_alignment = 'auto'   # every explicit map, against the manual alignments
  return common.apply_arg(c, arg)


# the study's Transformer (its RNN sizes put back to their defaults: common.switch)
TRANSFORMER = {'arch': 'transformer', 'd_model': 256, 'heads': 4, 'ff_dim': 1024,
               'transformer_layers': 3}
GUIDED = {'train.guided_alignment_weight': 1.0}


def get_sweep(arg: str | None = None):
  """The alignment study's variants (docs/alignment.md); every one under --seeds seeds."""
  luong = {'model.decoder': 'luong'}
  return [   # the rows the conclusions rest on first
      ('additive', {}),
      ('guided', {**GUIDED, 'train.guided_alignment_share': 1.0}),
      ('guided_fifth', {**GUIDED, 'train.guided_alignment_share': 0.2}),
      ('transformer', common.switch(get_config(arg), **TRANSFORMER)),
      ('none', {'model.score': 'none'}),
      ('general', {**luong, 'model.score': 'general'}),
      ('dot', {**luong, 'model.score': 'dot'}),
      ('location', {**luong, 'model.score': 'location'}),
      ('local_p', {**luong, 'model.score': 'general', 'model.attention_mode': 'local_p'}),
  ]
