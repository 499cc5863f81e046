"""Typed config fields: each registered part (an architecture, an encoder, a decoder, a task)
declares the fields it reads as a frozen dataclass, a subclass of `Fields`:

  @dataclasses.dataclass(frozen=True)
  class Fields(fields.Fields):
    SMOKE = {'width': 8}                       # the smoke variant's size of each (optional)
    width: int = fields.positive(64, 'channels of the first block')
    mode: str = fields.one_of('a', ('a', 'b'), 'what it does')

Each field holds its default (the one place), its check (run on construction: one line naming
the field and the valid values) and its description (docs/fields.md is generated from them).
Combinations of fields are checked by the part itself. A part's class carries its dataclass as
`cls.Fields`; registering the part (registry.registrar) records it as an owner of its config
section here, and refuses a key that another owner gives another default: a key shared by two
owners (model.d_model, model.cell) is one field with one default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Iterable, Mapping

Check = Callable[[str, Any], None]   # (the field's full name, its value) -> None or ValueError


@dataclasses.dataclass(frozen=True)
class Fields:
  """The fields one part reads (subclasses are frozen dataclasses)."""
  SECTION: ClassVar[str] = 'model'             # the config section the fields live in
  SMOKE: ClassVar[Mapping[str, Any]] = {}      # smoke-variant sizes of some of them

  def __post_init__(self):
    for f in dataclasses.fields(self):
      check = f.metadata.get('check')
      if check is not None:
        check(f'{self.SECTION}.{f.name}', getattr(self, f.name))

  @classmethod
  def names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))

  @classmethod
  def defaults(cls) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)}

  @classmethod
  def of(cls, values: Mapping[str, Any]) -> 'Fields':
    """The part's fields out of a flat config section (absent keys: their defaults); checked."""
    return cls(**{k: values[k] for k in cls.names() if k in values})


def field(default: Any, doc: str = '', check: Check | None = None,
          valid: str | Callable[[], Iterable[str]] = '') -> Any:
  """A field with a default, a description, an optional check and the valid values (in words,
  or a callable giving their names)."""
  return dataclasses.field(default=default, metadata={'doc': doc, 'check': check,
                                                      'valid': valid})


def _integer(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def check_positive(name: str, value: Any) -> None:
  if not _integer(value) or value < 1:
    raise ValueError(f'{name} must be a positive integer, got {value!r}')


def positive(default: int, doc: str = '') -> Any:
  """An integer >= 1."""
  return field(default, doc, check_positive, '>= 1')


def count(default: int, doc: str = '', what: str = '') -> Any:
  """An integer >= 0 (`what`: what 0 means, for the error)."""
  def check(name, value):
    if not _integer(value) or value < 0:
      raise ValueError(f'{name} must be an integer >= 0{f" ({what})" if what else ""}, '
                       f'got {value!r}')
  return field(default, doc, check, '>= 0')


def number(default: float, doc: str = '', low: float = 0.0, strict: bool = False) -> Any:
  """A finite number >= low (> low when `strict`)."""
  def check(name, value):
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and (value > low if strict else value >= low) and value < float('inf'))
    if not ok:
      raise ValueError(f'{name} must be a finite number {">" if strict else ">="} {low:g}, '
                       f'got {value!r}')
  return field(default, doc, check, f'{">" if strict else ">="} {low:g}')


def rate(default: float, doc: str = '') -> Any:
  """A number in [0, 1)."""
  def check(name, value):
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
      raise ValueError(f'{name} must be in [0, 1), got {value!r}')
  return field(default, doc, check, '[0, 1)')


def one_of(default: str, valid: Iterable[str] | Callable[[], Iterable[str]],
           doc: str = '') -> Any:
  """One of `valid` (a tuple in its order, a registry sorted; a callable giving either is
  read when checked, so a registry may grow after the field is declared)."""
  def names() -> list[str]:
    v = valid() if callable(valid) else valid
    return sorted(v) if isinstance(v, Mapping) else list(v)

  def check(name, value):
    if value not in names():
      raise ValueError(f'unknown {name} {value!r}; valid: {", ".join(names())}')
  return field(default, doc, check, names)


# ---- owners: the parts that declared the fields of each section, in registration order ----
OWNERS: dict[str, dict[str, type[Fields]]] = {}   # section -> {owner's name: its Fields}


def own(owner: str, cls: type[Fields]) -> None:
  """Records `cls` (a Fields dataclass) as `owner`'s fields in its section; a key another
  owner gives another default is refused in one line naming both."""
  section = OWNERS.setdefault(cls.SECTION, {})
  for other, other_cls in section.items():
    theirs = other_cls.defaults()
    for name, default in cls.defaults().items():
      if name in theirs and theirs[name] != default:
        raise ValueError(f'{cls.SECTION}.{name}: {owner} gives it the default {default!r}, '
                         f'{other} {theirs[name]!r}; a key shared by two owners is one field '
                         f'with one default')
  section[owner] = cls


def defaults(section: str) -> dict[str, Any]:
  """Every field of `section` that some owner declares, with its default (owners in
  registration order, each field where it first appears)."""
  out: dict[str, Any] = {}
  for cls in OWNERS.get(section, {}).values():
    for name, default in cls.defaults().items():
      out.setdefault(name, default)
  return out


def smoke_names(section: str) -> set[str]:
  """The fields of `section` that some owner shrinks in the smoke variant."""
  return {k for cls in OWNERS.get(section, {}).values() for k in cls.SMOKE}


def owners_of(section: str, name: str) -> list[str]:
  return [owner for owner, cls in OWNERS.get(section, {}).items() if name in cls.names()]


def table(section: str) -> str:
  """A markdown table of `section`'s fields: name, default, valid values, owners, meaning."""
  rows, seen = [], set()
  owners = sorted(OWNERS.get(section, {}).items(), key=lambda o: not o[0].startswith('every'))
  for _, cls in owners:   # the fields every part reads first
    for f in dataclasses.fields(cls):
      if f.name in seen:
        continue
      seen.add(f.name)
      valid = f.metadata.get('valid', '')
      valid = ', '.join(valid()) if callable(valid) else valid
      cells = (f'`{section}.{f.name}`', f'`{f.default!r}`', valid,
               ', '.join(owners_of(section, f.name)), f.metadata.get('doc', ''))
      rows.append('| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |')
  return '\n'.join(['| field | default | valid | read by | meaning |',
                    '|---|---|---|---|---|', *rows])
