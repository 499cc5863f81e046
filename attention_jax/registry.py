"""Registries by name (scores, cells, decoders, encoders, architectures): `register` adds a
class, `lookup` finds one and fails with the list of valid names. A class that declares the
config fields it reads (`cls.Fields`, a fields.Fields dataclass) becomes their owner."""

from __future__ import annotations

from typing import Callable

from attention_jax import fields


def registrar(table: dict[str, type], kind: str) -> Callable[[str], Callable[[type], type]]:
  """-> a class decorator factory `register(name)` that adds classes to `table`."""

  def register(name: str):
    def add(cls):
      if name in table:
        raise ValueError(f'{kind} {name!r} is already registered by {table[name].__name__}')
      if 'Fields' in vars(cls):
        fields.own(f'{kind} {name}', cls.Fields)
      cls.name = name
      table[name] = cls
      return cls
    return add

  return register


def lookup(table: dict[str, type], kind: str, name: str) -> type:
  if name not in table:
    raise ValueError(f'unknown {kind} {name!r}; valid {kind}s: {", ".join(sorted(table))}')
  return table[name]
