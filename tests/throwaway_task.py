"""A pytest plugin that adds a task at test time, the way a researcher adds a data set: one
loader and one `data.register_task` line, no other file.

  PYTHONPATH=tests pytest -p throwaway_task tests/test_data_sources.py -k swapcase

tests/test_registries.py runs the registry-driven task tests with it.
"""

import random

from attention_jax import data


def load(d) -> data.Loaded:
  """Random lower-case words -> the same words in upper case, split sizes from the config."""
  rng = random.Random(int(d.seed))

  def pairs(n):
    words = [''.join(rng.choice('abcdefgh') for _ in range(rng.randint(1, int(d.max_len))))
             for _ in range(n)]
    return [(w, w.swapcase()) for w in words]
  texts = {'train': pairs(int(d.num_train)), 'validation': pairs(int(d.num_valid)),
           'test': pairs(int(d.num_test))}
  return data.Loaded(texts, {}, 'tests/throwaway_task.py')


data.register_task('swapcase', load)
