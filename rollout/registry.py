"""Named implementations, resolved lazily: one ``Registry`` per kind (suites, model backends, verifier members,
environment judges).

An entry is a ``"package.module:attribute"`` path, imported on first use, or the object itself. Third parties
add theirs with ``register`` or through a package entry point in the registry's group, e.g. in their
``pyproject.toml``::

    [project.entry-points."far.suites"]
    my_suite = "my_package.suite:factory"

Tables hold paths, not imports, so a registered module never imports the table that names it (no circles),
and naming an implementation costs nothing until it is used (a heavy dependency loads only when asked for).
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def resolve_path(path: str) -> Any:
    """``"package.module:attribute"`` -> the attribute (``"package.module"`` alone -> the module)."""
    module_name, _, attribute = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        value = getattr(value, part)
    return value


class Registry(Generic[T]):
    """Built-ins first (in the order given), then ``register``-ed names, then entry points of ``group``."""

    def __init__(self, kind: str, group: str, builtins: Mapping[str, str | T]) -> None:
        self.kind = kind
        self.group = group
        self._targets: dict[str, str | T] = dict(builtins)
        self._resolved: dict[str, T] = {}
        self._entry_points_read = False

    def register(self, name: str, target: str | T) -> None:
        """Add (or replace) ``name``; ``target`` is a ``"module:attribute"`` path or the object."""
        self._targets[name] = target
        self._resolved.pop(name, None)

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        for point in entry_points(group=self.group):
            self._targets.setdefault(point.name, point.value)

    def names(self) -> tuple[str, ...]:
        self._read_entry_points()
        return tuple(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __getitem__(self, name: str) -> T:
        """The implementation named ``name`` (imported now if it is a path); ``KeyError`` if unknown."""
        if name not in self._resolved:
            if name not in self:
                raise KeyError(f"unknown {self.kind} {name!r} (known: {', '.join(sorted(self.names()))})")
            target = self._targets[name]
            self._resolved[name] = resolve_path(target) if isinstance(target, str) else target
        return self._resolved[name]
