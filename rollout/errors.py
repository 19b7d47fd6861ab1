"""The one error type for bad user input: it names the file, the field and the row."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


class FarInputError(ValueError):
    """A malformed input file or value, described in one line.

    The CLI prints ``str(error)`` and exits with status 2; no traceback reaches the user.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        row: int | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.row = row
        super().__init__(self.describe())

    def describe(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field:
            where.append(f"field '{self.field}'")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class FarEnvironmentError(RuntimeError):
    """The machine or cluster failed FAR (Ray would not start, a node went away), not the user's input: one line,
    exit status 1, no traceback."""


def field_path(loc: Iterable[Any]) -> str:
    """Pydantic's error location as a dotted path: ``policies.safe.cloud_threshold``."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def from_validation_error(
    error: Any, *, file: str | Path | None = None, row: int | None = None, prefix: str = ""
) -> FarInputError:
    """Turn a pydantic ``ValidationError`` into a one-line ``FarInputError`` (first problem, plus a count)."""
    problems = error.errors()
    first = problems[0]
    loc = field_path(first.get("loc", ()))
    if prefix:
        loc = prefix if loc == "<root>" else f"{prefix}.{loc}"
    message = first.get("msg", "invalid value")
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
    return FarInputError(message, file=file, field=loc, row=row)
