"""A pytest plugin that adds a task at test time, the way a researcher adds a data set: one
loader, the fields of its own, and one `data.register_task` line, no other file.

  PYTHONPATH=tests pytest -p throwaway_task tests/test_data_sources.py -k swapcase

tests/test_registries.py runs the registry-driven task tests with it; tests/test_new_parts.py
trains it on every route (data.swap_alphabet: the letters its words are drawn from).
"""

import dataclasses
import random

from attention_jax import data, fields
from attention_jax.data import data_fields


def _check_alphabet(name, value):
  if not isinstance(value, str) or len(set(value)) < 2 or not value.isalpha():
    raise ValueError(f'{name} must be two or more letters, got {value!r}')


@dataclasses.dataclass(frozen=True)
class Fields(data_fields.Generated):
  SMOKE = {**data_fields.Generated.SMOKE, 'max_len': lambda v: min(v, 12)}
  max_len: int = fields.positive(50, 'the longest word')
  swap_alphabet: str = fields.field('abcdefgh', 'the letters the words are drawn from',
                                    _check_alphabet, 'two or more letters')


def load(d) -> data.Loaded:
  """Random lower-case words -> the same words in upper case, split sizes from the config."""
  rng = random.Random(int(d.seed))

  def pairs(n):
    words = [''.join(rng.choice(d.swap_alphabet) for _ in range(rng.randint(1, int(d.max_len))))
             for _ in range(n)]
    return [(w, w.swapcase()) for w in words]
  texts = {'train': pairs(int(d.num_train)), 'validation': pairs(int(d.num_valid)),
           'test': pairs(int(d.num_test))}
  return data.Loaded(texts, {}, 'tests/throwaway_task.py')


data.register_task('swapcase', load, fields=Fields)
