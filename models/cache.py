"""The persistent model-call cache: content-addressed, on disk, safe for several processes at once.

Key = sha256 over (model id including its weights hash, the operation, the full request: messages,
candidates or sampling parameters with the seed, and the JSON schema). Results are stored as JSON in SQLite
(WAL mode, so several Ray actors and the driver can read and write the same file). Transient faults
(timeouts, dead actors) are not cached; a malformed output is the model's answer and is.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from far.models.lm import (
    LM,
    TRANSIENT_FAULTS,
    GenerateRequest,
    GenerateResult,
    ScoreRequest,
    ScoreResult,
)
from far.rollout.io import SQLiteConnections
from pydantic import BaseModel

R = TypeVar("R", bound=BaseModel)


# Bumped when engines start answering the same request differently: 2 = the transformers engine constrains
# JSON-schema requests (before, it generated them freely), so answers cached under 1 must not be served.
KEY_VERSION = 2


def call_key(model_id: str, operation: str, request: BaseModel) -> str:
    payload = json.dumps({"model": model_id, "op": operation, "request": request.model_dump(mode="json"),
                          "v": KEY_VERSION}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class CallCache:
    """A key → JSON store in one SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connections = SQLiteConnections(self.path)
        with self._connect() as connection:
            connection.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return self._connections.get()

    def get_many(self, keys: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        connection = self._connect()
        for start in range(0, len(keys), 500):  # SQLite caps bound parameters per statement
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(connection.execute(f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk))
        return found

    def put_many(self, items: list[tuple[str, str]]) -> None:
        if items:
            connection = self._connect()
            with connection:  # one transaction
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany("INSERT OR IGNORE INTO calls (key, value) VALUES (?, ?)", items)

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def __getstate__(self) -> dict:  # connections do not pickle; reopen where unpickled (e.g. in an actor)
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0  # = model calls made

    def as_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "calls_made": self.misses}


def cached_calls(cache: CallCache, stats: CacheStats, model_id: str, operation: str, requests: list,
                 call: Callable[[list], list], result_type: type[R]) -> list[R]:
    """Answer ``requests`` from the cache where possible and ``call`` the model, in one batch, for the rest."""
    keys = [call_key(model_id, operation, r) for r in requests]
    stored = cache.get_many(list(dict.fromkeys(keys)))
    results: list[R | None] = [result_type.model_validate_json(stored[k]) if k in stored else None for k in keys]
    missing = [i for i, r in enumerate(results) if r is None]
    stats.hits += len(requests) - len(missing)
    stats.misses += len(missing)
    if missing:
        fresh = call([requests[i] for i in missing])
        to_store = []
        for i, result in zip(missing, fresh, strict=True):
            results[i] = result
            if getattr(result, "error", None) not in TRANSIENT_FAULTS:
                to_store.append((keys[i], result.model_dump_json()))
        cache.put_many(to_store)
    return results  # type: ignore[return-value]


class CachedLM:
    """Wraps any ``LM`` with the cache (Ray Tune style: a behaviour layered as a wrapper, not a flag)."""

    def __init__(self, lm: LM, cache: CallCache) -> None:
        self.lm = lm
        self.cache = cache
        self.model_id = lm.model_id
        self.stats = CacheStats()

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return cached_calls(self.cache, self.stats, self.model_id, "score", requests, self.lm.score, ScoreResult)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return cached_calls(self.cache, self.stats, self.model_id, "generate", requests, self.lm.generate,
                            GenerateResult)
