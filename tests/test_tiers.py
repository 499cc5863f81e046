"""helpers.covering: the default suite runs a walk through a parametrized product that holds
every value of every axis and every combination of the small axes; the rest of the product
is marked `extended`, so CI (.ci/run) still runs all of it."""

import itertools

from helpers import covering


def split(params) -> tuple[list, list]:
  """(values of the unmarked params, values of those marked extended); no other mark."""
  default, extended = [], []
  for p in params:
    names = [m.name for m in p.marks]
    assert names in ([], ['extended']), names
    (extended if names else default).append(p.values)
  return default, extended


def test_the_default_walk_holds_every_value_and_the_whole_product_is_run_in_ci():
  big, decoders, cells = list('abcdefghi'), ['bahdanau', 'luong'], ['gru', 'lstm']
  default, extended = split(covering(big, decoders, cells))
  assert sorted(default + extended) == sorted(itertools.product(big, decoders, cells))
  assert len(default) == len(big)                      # each value of the big axis once
  assert {d[1:] for d in default} == set(itertools.product(decoders, cells))
  assert not set(default) & set(extended)


def test_a_small_axis_longer_than_the_big_one_is_still_walked_whole():
  default, _ = split(covering(['x', 'y'], [1, 2, 3, 4, 5]))
  assert {d[0] for d in default} == {'x', 'y'} and {d[1] for d in default} == {1, 2, 3, 4, 5}


def test_tuple_values_fill_several_arguments_and_ids_name_the_case():
  params = covering([('cnn', {'k': 1}), ('vit', {})], ['luong', ('bahdanau', True)],
                    ids=['cnn-k', 'vit'])
  assert [p.values for p in params] == [('cnn', {'k': 1}, 'luong'),
                                        ('cnn', {'k': 1}, 'bahdanau', True),
                                        ('vit', {}, 'luong'), ('vit', {}, 'bahdanau', True)]
  assert [p.id for p in params] == ['cnn-k-luong', 'cnn-k-bahdanau-True', 'vit-luong',
                                    'vit-bahdanau-True']
  assert [bool(p.marks) for p in params] == [False, True, True, False]
