"""Your own parallel corpus: train.src/train.tgt, valid.*, test.* (one sentence per line).

  bash launch.sh train experiments/configs/textfiles.py \
      --config.data.textfiles_dir=/path/to/corpus --workdir=runs/mycorpus
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'textfiles'
  c.data.tokenizer = 'sentencepiece'
  c.data.vocab_size = 4000
  c.data.max_src_len = 64
  c.data.max_tgt_len = 64
  c.model.emb_dim = 128
  c.model.enc_hidden = 128
  c.model.dec_hidden = 256
  c.model.attn_dim = 128
  return common.apply_arg(c, arg)
