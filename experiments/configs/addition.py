"""Integer addition "123+4567" -> "4690", as in the Flax seq2seq example.

  bash launch.sh train experiments/configs/addition.py --workdir=runs/addition_additive
  bash launch.sh train experiments/configs/addition.py:smoke --workdir=/tmp/addition_smoke
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'addition'
  c.data.tokenizer = 'char'
  c.data.max_src_len = 24
  c.data.max_tgt_len = 16
  c.eval.bleu_tokenize = 'char'
  return common.apply_arg(c, arg)
