"""Old module paths keep working: ``import rollout.models.backends`` gives ``rollout.models.backends`` (the same
module object) with a ``DeprecationWarning`` naming the new path.

Each package that moved modules out lists them in its own ``MOVED`` table (old path -> new path); the
packages named in ``TABLES`` are read only when an import under ``rollout.`` has not been found anywhere else
(that finder sits at the end of ``sys.meta_path``). A submodule of a moved package (``rollout.engines.hf``)
would otherwise be found again through the package's ``__path__`` and executed twice under two names, so a
second finder, first in ``sys.meta_path``, aliases the children of packages already aliased.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

TABLES = ("rollout.suites", "rollout.models")  # the packages holding a MOVED table


def moved_to(name: str) -> str | None:
    """The new path of an old module path, or None."""
    if not name.startswith("rollout."):
        return None
    if name in TABLES:
        return None
    for package in TABLES:
        # reached only for a name no other finder found; a table's package is then already imported (or being
        # imported, when its MOVED may not exist yet: no alias then)
        table = getattr(importlib.import_module(package), "MOVED", {})
        if name in table:
            return table[name]
    return None


_ALIASED_PACKAGES: dict[str, str] = {}  # old package path -> new, once imported under the old path


def _alias_spec(name: str, new: str) -> importlib.machinery.ModuleSpec:
    warnings.warn(f"{name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
    return importlib.util.spec_from_loader(name, _Alias(new))


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        if hasattr(module, "__path__"):
            _ALIASED_PACKAGES[spec.name] = self.new
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Last in ``sys.meta_path``: an old module path that nothing else found."""

    def find_spec(self, name, path=None, target=None):
        new = moved_to(name)
        return None if new is None else _alias_spec(name, new)


class MovedSubmoduleFinder(importlib.abc.MetaPathFinder):
    """First in ``sys.meta_path``, and cheap: acts only on children of a package aliased by the finder above."""

    def find_spec(self, name, path=None, target=None):
        parent, _, child = name.rpartition(".")
        new_parent = _ALIASED_PACKAGES.get(parent)
        return None if new_parent is None else _alias_spec(name, f"{new_parent}.{child}")


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedSubmoduleFinder())
        sys.meta_path.append(MovedModuleFinder())
