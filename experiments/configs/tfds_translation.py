"""A real translation set by TFDS name (needs the data prepared in the TFDS data dir;
nothing is downloaded by this project's tests).

  bash launch.sh train experiments/configs/tfds_translation.py --workdir=runs/ted_pt_en
  bash launch.sh train experiments/configs/tfds_translation.py \
      --config.data.tfds_name=wmt14_translate/de-en --config.data.src_lang=de \
      --config.data.tgt_lang=en --workdir=runs/wmt14_de_en
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'tfds'
  c.data.tfds_name = 'ted_hrlr_translate/pt_to_en'
  c.data.src_lang, c.data.tgt_lang = 'pt', 'en'
  c.data.tokenizer = 'sentencepiece'
  c.data.vocab_size = 8000
  c.data.max_src_len = 64
  c.data.max_tgt_len = 64
  c.model.emb_dim = 256
  c.model.enc_hidden = 256
  c.model.dec_hidden = 512
  c.model.attn_dim = 256
  c.train.steps = 20_000
  c.train.lr = 1e-3
  c.train.eval_every = 2000
  c.train.checkpoint_every = 1000
  return common.apply_arg(c, arg)
