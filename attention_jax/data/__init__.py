"""The data layer: offline TFDS tasks, text files, TFDS translation sets, tokenizers, batches.

  from attention_jax import data
  task = data.load_task(cfg.data)                   # data.name: one of data.TASKS
  data.register_task('mine', loader)                # a new one: loader(cfg.data) -> Loaded
  it = task.train_iterator(64, seed=0)              # dicts of src/tgt_in/tgt_out/weight/index
  data.save_tokenizers(task, workdir); data.load_tokenizers(workdir)

Token ids: PAD=0, BOS=1, EOS=2, UNK=3 in every vocabulary.
"""

from attention_jax.data.batching import Buckets, TrainIterator
from attention_jax.data.builders import BUILDERS, gold_alignment, prepare
from attention_jax.data.loaders import TASKS, Loaded, register_task
from attention_jax.data.tasks import FIELD_DEFAULTS, SPLITS, Task, decode_limit, load_task
from attention_jax.data.textfiles import CorpusError, read_corpus
from attention_jax.data.tokenizers import (BOS, EOS, PAD, TOKENIZERS, UNK, Tokenizer,
                                           load_tokenizer, load_tokenizers, save_tokenizers,
                                           train_tokenizer)

__all__ = ['BOS', 'BUILDERS', 'Buckets', 'CorpusError', 'EOS', 'FIELD_DEFAULTS', 'Loaded', 'PAD',
           'SPLITS', 'TASKS', 'TOKENIZERS', 'Task', 'Tokenizer', 'TrainIterator', 'UNK',
           'decode_limit', 'gold_alignment', 'load_task', 'load_tokenizer', 'load_tokenizers',
           'prepare', 'read_corpus', 'register_task', 'save_tokenizers', 'train_tokenizer']
