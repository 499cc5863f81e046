"""Names of a package imported from their modules when first used (PEP 562), so that a
process that needs part of a package does not import all of it (`translate`: no TFDS,
Matplotlib or SciPy; docs/performance.md).

  __getattr__, __dir__, __all__ = lazy.exports(__name__, {'pkg.mod': ['name', ...]},
                                                modules={'alias': 'pkg.module'})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, names: dict[str, list[str]], modules: dict[str, str] | None = None
            ) -> tuple[Callable, Callable, list[str]]:
  """-> (__getattr__, __dir__, __all__) for `package`: names[module] are that module's names;
  modules[alias] is a module itself. Each is imported once, on first use; an unknown name
  raises AttributeError naming it."""
  where = {name: module for module, ns in names.items() for name in ns}
  modules = modules or {}

  def getattr_(name: str):
    if name in modules:
      value = importlib.import_module(modules[name])
    elif name in where:
      value = getattr(importlib.import_module(where[name]), name)
    else:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    setattr(sys.modules[package], name, value)   # imported once
    return value

  all_ = [*sorted(where), *sorted(modules)]
  return getattr_, lambda: sorted(set(vars(sys.modules[package])) | set(all_)), all_
