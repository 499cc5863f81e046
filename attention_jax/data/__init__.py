"""The data layer: offline TFDS tasks, text files, TFDS translation sets, tokenizers, batches.

  from attention_jax import data
  task = data.load_task(cfg.data)                   # data.name: one of data.TASKS
  data.register_task('mine', loader)                # a new one: loader(cfg.data) -> Loaded
  it = task.train_iterator(64, seed=0)              # dicts of src/tgt_in/tgt_out/weight/index
  data.save_tokenizers(task, workdir); data.load_tokenizers(workdir)

Token ids: PAD=0, BOS=1, EOS=2, UNK=3 in every vocabulary.
"""

import importlib

# Each name is imported from its module when first used (PEP 562): decoding a saved run needs
# the tokenizers, not the TFDS builders or the image drawing (Matplotlib, SciPy).
_EXPORTS = {
    'attention_jax.data.batching': ['Buckets', 'TrainIterator', 'decode_limit'],
    'attention_jax.data.builders': ['BUILDERS', 'gold_alignment', 'prepare'],
    'attention_jax.data.loaders': ['TASKS', 'Loaded', 'register_task'],
    'attention_jax.data.tasks': ['FIELD_DEFAULTS', 'SPLITS', 'Task', 'load_task'],
    'attention_jax.data.textfiles': ['CorpusError', 'read_corpus'],
    'attention_jax.data.tokenizers': ['BOS', 'EOS', 'PAD', 'TOKENIZERS', 'UNK', 'Tokenizer',
                                      'load_tokenizer', 'load_tokenizers', 'save_tokenizers',
                                      'train_tokenizer'],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [*sorted(_WHERE)]  # noqa: PLE0604 (the names above)


def __getattr__(name: str):
  if name not in _WHERE:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  value = globals()[name] = getattr(importlib.import_module(_WHERE[name]), name)
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
