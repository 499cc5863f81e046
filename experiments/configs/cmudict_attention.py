"""Global vs local-m vs local-p attention, additive vs general scores, on CMUdict G2P: the
comparison of Toshniwal & Livescu (2016), at a budget this 2-core CPU affords.

  bash launch.sh sweep experiments/configs/cmudict_attention.py          # 6 variants
  bash launch.sh sweep experiments/configs/cmudict_attention.py:smoke    # seconds per variant

Every variant is the same smaller model (biLSTM 1 x 128 per direction, Luong decoder LSTM 256
with input feeding, attention dim 256, dropout 0.2) trained for 2,500 steps of 128 words (about
2.8 epochs), one seed, greedy decoding, best checkpoint by validation WER. The local windows
have half-width D = 3 letters (local-p: Gaussian sigma = D / 2). Variants go to
runs/cmudict_attention[_smoke]/<mode>_<score>; the report (summary.md/.csv with test WER and
PER, bars.png, wer_by_length.png) is written at the end.
"""

from experiments.configs import cmudict

MODES = ('global', 'local_m', 'local_p')
SCORES = ('additive', 'general')


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
