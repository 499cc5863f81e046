"""Reverse a sequence of symbols: the task of the length study (gold alignment known).

  bash launch.sh train experiments/configs/reverse.py --workdir=runs/reverse_additive
  bash launch.sh train experiments/configs/reverse.py:smoke --workdir=/tmp/reverse_smoke
  bash launch.sh train experiments/configs/reverse.py --config.model.arch=transformer --workdir=runs/reverse_transformer

Training lengths are data.min_len..data.max_len (1..50), test lengths go to
data.test_max_len (100), so quality can be read by source length.
"""

from experiments.configs import common


def get_config(arg: str | None = None):
  c = common.base_config()
  c.data.name = 'reverse'
  c.data.tokenizer = 'char'
  c.data.max_src_len = 64
  c.data.max_tgt_len = 64
  c.eval.bleu_tokenize = 'char'
  c.model.max_src_len = 128
  return common.apply_arg(c, arg)
