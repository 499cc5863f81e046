"""The data layer: offline TFDS tasks, text files, TFDS translation sets, tokenizers, batches.

  from attention_jax import data
  task = data.load_task(cfg.data)                   # data.name: one of data.TASKS
  data.register_task('mine', loader)                # a new one: loader(cfg.data) -> Loaded
  it = task.train_iterator(64, seed=0)              # dicts of src/tgt_in/tgt_out/weight/index
  data.save_tokenizers(task, workdir); data.load_tokenizers(workdir)

Token ids: PAD=0, BOS=1, EOS=2, UNK=3 in every vocabulary.
"""

from attention_jax import lazy

# Each name is imported from its module when first used (lazy.py): decoding a saved run needs
# the tokenizers, not the TFDS builders or the image drawing (Matplotlib, SciPy).
__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    'attention_jax.data.batching': ['Buckets', 'TrainIterator', 'decode_limit'],
    'attention_jax.data.builders': ['BUILDERS', 'gold_alignment', 'prepare'],
    'attention_jax.data.loaders': ['TASKS', 'Loaded', 'fetch', 'register_task'],
    'attention_jax.data.tasks': ['SPLITS', 'Task', 'load_task'],
    'attention_jax.data.textfiles': ['CorpusError', 'read_corpus'],
    'attention_jax.data.tokenizers': ['BOS', 'EOS', 'PAD', 'TOKENIZERS', 'UNK', 'Tokenizer',
                                      'load_tokenizer', 'load_tokenizers', 'save_tokenizers',
                                      'train_tokenizer'],
})
