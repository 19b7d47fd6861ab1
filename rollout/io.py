"""Durable files: atomic writes (temp file + ``os.replace``) and config loading with clear errors."""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from far.rollout.errors import FarInputError


def data_dir() -> Path:
    """Where FAR keeps what outlives a run (model folders, fits, caches, the evaluation-only registry):
    ``$FAR_DATA_DIR``, default ``~/.cache/far``."""
    path = Path(os.environ.get("FAR_DATA_DIR", "~/.cache/far")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


class SQLiteConnections:
    """One connection per thread to one SQLite file, in WAL mode with a 60 s busy timeout, autocommit
    (transactions are the caller's): several threads and processes read and write the file at once, and a
    sqlite3 connection is never shared across threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()

    def get(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
        return connection


def _umask() -> int:
    """The process umask: read from /proc where there is one (setting it to read it races other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, write: Callable[[str], None]) -> Path:
    """Write through ``write(tmp_path)`` then rename over ``path``: readers see the old or the new file, never half.
    The file gets the permissions a plain ``open`` would give it (0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)

    return write_atomic(path, write)


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet_atomic(path: str | Path, table: Any) -> Path:
    import pyarrow.parquet as pq

    return write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def write_rows_atomic(path: str | Path, rows: list[dict[str, Any]], empty_column: str | None = None) -> Path:
    """Rows (dicts) as a Parquet table; with no rows, a table with one string column ``empty_column`` (so
    readers that select it find it) or with no column."""
    import pyarrow as pa

    if rows or empty_column is None:
        return write_parquet_atomic(path, pa.Table.from_pylist(rows))
    return write_parquet_atomic(path, pa.table({empty_column: pa.array([], pa.string())}))


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Load a YAML or JSON file whose top level is a mapping; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FarInputError("file not found", file=path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise FarInputError(f"not UTF-8 text (byte {error.start}, line {line})", file=path) from None
    except OSError as error:
        raise FarInputError(f"cannot read the file ({error.strerror or type(error).__name__})", file=path) from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise FarInputError(f"invalid JSON at line {error.lineno}: {error.msg}", file=path) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise FarInputError(f"invalid YAML{where}: {getattr(error, 'problem', error)}", file=path) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FarInputError(f"expected a mapping at the top level, got {type(data).__name__}", file=path)
    return data
