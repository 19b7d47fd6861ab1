"""Evaluation-only scenarios: they may be evaluated, never fitted on.

Some data must never shape a model, a threshold or a calibration (AgentHarm's authors forbid training on it;
a user's private test set). A scenario is evaluation-only when

- it says so: ``Scenario.eval_only`` (a JSONL line's ``"eval_only": true``, a file's header line
  ``{"eval_only": true}``, or ``far import-scenarios --eval-only``; kept in Parquet), or
- its content was ever imported as evaluation-only on this machine: ``far import-scenarios`` records the
  content hash of every evaluation-only scenario in a registry (``$FAR_DATA_DIR/eval_only.sqlite``, or
  ``$FAR_EVAL_ONLY_REGISTRY``), and marks any later import of the same content evaluation-only.

Content = what a model sees (the request and the proposed action); ids, suite names, file names and labels
are left out, so a renamed copy, or one whose marks were stripped, is still recognised. Every path that
fits anything calls ``refuse_eval_only`` on its fitting data: at config load (``far.search.jobs.config``,
``far.evolve.config``), and again where the fit happens (``far.models.calibration.require_train``).
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from far.rollout.errors import FarInputError
from far.rollout.io import data_dir
from far.rollout.scenario import Scenario, model_input

REGISTRY_NAME = "eval_only.sqlite"


def content_hash(scenario: Scenario) -> str:
    """SHA-256 of what a model sees of the scenario (``model_input``): names and labels aside."""
    request, action = model_input(scenario)
    return hashlib.sha256(f"{request}\x00{action}".encode()).hexdigest()


class EvalOnlyRegistry:
    """Content hashes of the scenarios imported as evaluation-only (SQLite, WAL: several processes read it)."""

    def __init__(self, path: str | Path | None = None) -> None:
        if path is None and os.environ.get("FAR_EVAL_ONLY_REGISTRY"):
            path = os.environ["FAR_EVAL_ONLY_REGISTRY"]
        if path is None:
            path = data_dir() / REGISTRY_NAME
        self.path = Path(path)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation, closed after it (autocommit: each statement is its own write)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("CREATE TABLE IF NOT EXISTS eval_only (hash TEXT PRIMARY KEY, source TEXT NOT NULL)")
            yield connection
        finally:
            connection.close()

    def add(self, scenarios: Iterable[Scenario], source: str) -> int:
        rows = [(content_hash(s), source) for s in scenarios]
        with self._connect() as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany("INSERT OR IGNORE INTO eval_only (hash, source) VALUES (?, ?)", rows)
            connection.execute("COMMIT")
        return len(rows)

    def known(self, hashes: Sequence[str]) -> set[str]:
        if not hashes or not self.path.is_file():
            return set()
        found: set[str] = set()
        with self._connect() as connection:
            for start in range(0, len(hashes), 500):  # SQLite's bound-parameter limit
                chunk = list(hashes[start:start + 500])
                marks = ",".join("?" * len(chunk))
                found.update(h for (h,) in connection.execute(f"SELECT hash FROM eval_only WHERE hash IN ({marks})",
                                                               chunk))
        return found


def eval_only_among(scenarios: Sequence[Scenario], registry: EvalOnlyRegistry | None = None) -> list[Scenario]:
    """The evaluation-only scenarios among these: marked, or with content registered as evaluation-only."""
    hashes = [content_hash(s) for s in scenarios]
    registered = (registry or EvalOnlyRegistry()).known(hashes)
    return [s for s, h in zip(scenarios, hashes) if s.eval_only or h in registered]


def refuse_eval_only(scenarios: Sequence[Scenario], purpose: str, *, file: str | Path | None = None,
                     field: str | None = None, registry: EvalOnlyRegistry | None = None) -> None:
    """Raise a one-line error when any of these scenarios, about to be used for ``purpose``, is
    evaluation-only: how many, and an example id."""
    found = eval_only_among(scenarios, registry)
    if found:
        raise FarInputError(f"{len(found)} evaluation-only scenario(s) (e.g. {found[0].id!r} of {found[0].suite}) "
                            f"would be used for {purpose}: evaluation-only data is never fitted on", file=file,
                            field=field)
