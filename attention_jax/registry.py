"""Registries by name (scores, cells, decoders): `register` adds a class, `lookup` finds one
and fails with the list of valid names."""

from __future__ import annotations

from typing import Callable


def registrar(table: dict[str, type], kind: str) -> Callable[[str], Callable[[type], type]]:
  """-> a class decorator factory `register(name)` that adds classes to `table`."""

  def register(name: str):
    def add(cls):
      if name in table:
        raise ValueError(f'{kind} {name!r} is already registered by {table[name].__name__}')
      cls.name = name
      table[name] = cls
      return cls
    return add

  return register


def lookup(table: dict[str, type], kind: str, name: str) -> type:
  if name not in table:
    raise ValueError(f'unknown {kind} {name!r}; valid {kind}s: {", ".join(sorted(table))}')
  return table[name]
