"""Global vs local-m vs local-p attention, additive vs general scores, on CMUdict G2P: the
comparison of Toshniwal & Livescu (2016), at a budget this 2-core CPU affords.

  bash launch.sh sweep experiments/configs/cmudict_attention.py --parallel=2  # 6 variants x 3 seeds
  bash launch.sh sweep experiments/configs/cmudict_attention.py:smoke --seeds=1   # seconds

Every variant is the same smaller model (biLSTM 1 x 128 per direction, Luong decoder LSTM 256
with input feeding, attention dim 256, dropout 0.2) trained for 2,500 steps of 128 words (about
2.8 epochs), seeds 1-3, greedy decoding, best checkpoint by validation WER. The local windows
have half-width D = 3 letters (local-p: Gaussian sigma = D / 2). Variants go to
runs/cmudict_attention[_smoke]/<mode>_<score>/seed_<k>; the report (summary.md/.csv with test
WER and PER over seeds, comparisons.csv, bars.png, wer_by_length.png) is written at the end.
"""

from experiments.configs import cmudict

MODES = ('global', 'local_m', 'local_p')
SCORES = ('additive', 'general')


SEEDS = 3   # every variant under seeds 1, 2, 3 (--seeds=N overrides)


def get_config(arg: str | None = None):
  c = cmudict.get_config(arg)
  if arg != 'smoke':
    m, t = c.model, c.train
    m.emb_dim, m.enc_hidden, m.enc_layers = 64, 128, 1
    m.dec_hidden, m.attn_dim, m.dropout = 256, 256, 0.2
    t.steps, t.warmup_steps = 2_500, 200
    t.eval_every = t.checkpoint_every = 1_250
    t.log_every = 250
  c.model.window = 3
  return c


def get_sweep(arg: str | None = None):
  return [(f'{mode}_{score}', {'model.attention_mode': mode, 'model.score': score})
          for mode in MODES for score in SCORES]
