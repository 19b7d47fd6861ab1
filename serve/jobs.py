"""Policy-scoring jobs that outlive the replica running them: records in an embedded SQLite database (WAL).

A job goes queued -> running -> done | failed (with a reason); its request, result and timestamps are stored as
JSON and Unix seconds. Every ingress replica runs a worker that *claims* the oldest job that is queued, or
running under a lease that ran out (the replica that held it died), runs it and records the outcome; while a
job runs, its lease is renewed. So after an ingress restart a known job id is resumed (scoring is
deterministic: the same request gives the same result) or, after ``max_attempts`` claims, failed with that
reason -- never lost, never a 404. Finished jobs older than ``retention_s``, and the oldest beyond ``max_jobs``,
are pruned.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from far.rollout.io import SQLiteConnections


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    status: str  # queued | running | done | failed
    result: Any  # the JSON the job's run returned (done)
    error: str | None  # why it failed (failed)
    created: float
    updated: float
    attempts: int  # claims so far (more than one: a replica running it stopped)

logger = logging.getLogger("far.serve.jobs")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    request TEXT NOT NULL,
    result TEXT,
    error TEXT,
    owner TEXT,
    scope TEXT NOT NULL DEFAULT '',
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
"""


class JobStore:
    """The job table. Every method is one short transaction, so several replicas (processes) share the file."""

    def __init__(self, path: str | Path, lease_s: float = 30.0, max_attempts: int = 3,
                 clock: Callable[[], float] = time.time, scope: str = "") -> None:
        self.path = Path(path)
        # jobs are claimed only by replicas of the same scope (a fingerprint of the service's config): a job is
        # never re-run under another config that happens to share the database file
        self.scope = scope
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connections = SQLiteConnections(self.path)
        connection = self._connections.get()
        connection.executescript(SCHEMA)
        columns = {row[1] for row in connection.execute("PRAGMA table_info(jobs)")}
        if "scope" not in columns:  # a database written before jobs had a scope
            connection.execute("ALTER TABLE jobs ADD COLUMN scope TEXT NOT NULL DEFAULT ''")

    def _connect(self) -> "_Transaction":
        return _Transaction(self._connections.get())

    def create(self, job_id: str, request: Any) -> JobRecord:
        now = self.clock()
        with self._connect() as connection:
            connection.execute("INSERT INTO jobs (job_id, status, request, scope, created, updated) VALUES (?, "
                               "'queued', ?, ?, ?, ?)", (job_id, json.dumps(request), self.scope, now, now))
        return self.get(job_id)  # type: ignore[return-value]

    def get(self, job_id: str) -> JobRecord | None:
        with self._connect() as connection:
            row = connection.execute("SELECT job_id, status, result, error, created, updated, attempts FROM jobs "
                                     "WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        job_id, status, result, error, created, updated, attempts = row
        return JobRecord(job_id, status, json.loads(result) if result else None, error, created, updated, attempts)

    def claim(self, owner: str) -> tuple[str, Any] | None:
        """The oldest job that is queued, or running with its lease run out, now held by ``owner``: (id,
        request). A job claimed ``max_attempts`` times already is failed instead, with the reason."""
        while True:
            now = self.clock()
            with self._connect() as connection:
                row = connection.execute(
                    "SELECT job_id, request, attempts FROM jobs WHERE scope = ? AND (status = 'queued' OR "
                    "(status = 'running' AND lease_until < ?)) ORDER BY created, job_id LIMIT 1",
                    (self.scope, now)).fetchone()
                if row is None:
                    return None
                job_id, request, attempts = row
                if attempts >= self.max_attempts:
                    connection.execute(
                        "UPDATE jobs SET status = 'failed', error = ?, owner = NULL, lease_until = NULL, updated = ? "
                        "WHERE job_id = ?", (f"abandoned: the replica running it stopped {attempts} times", now,
                                             job_id))
                    continue
                connection.execute("UPDATE jobs SET status = 'running', owner = ?, lease_until = ?, "
                                   "attempts = attempts + 1, updated = ? WHERE job_id = ?",
                                   (owner, now + self.lease_s, now, job_id))
                return job_id, json.loads(request)

    def renew(self, job_id: str, owner: str) -> bool:
        """Extend the lease of a job ``owner`` still holds; False when it no longer does."""
        now = self.clock()
        with self._connect() as connection:
            changed = connection.execute("UPDATE jobs SET lease_until = ? WHERE job_id = ? AND owner = ? AND "
                                         "status = 'running'", (now + self.lease_s, job_id, owner)).rowcount
        return changed == 1

    def finish(self, job_id: str, owner: str, result: Any) -> bool:
        return self._end(job_id, owner, "done", json.dumps(result), None)

    def fail(self, job_id: str, owner: str, reason: str) -> bool:
        return self._end(job_id, owner, "failed", None, reason)

    def _end(self, job_id: str, owner: str, status: str, result: str | None, error: str | None) -> bool:
        with self._connect() as connection:
            changed = connection.execute(
                "UPDATE jobs SET status = ?, result = ?, error = ?, owner = NULL, lease_until = NULL, updated = ? "
                "WHERE job_id = ? AND owner = ? AND status = 'running'",
                (status, result, error, self.clock(), job_id, owner)).rowcount
        return changed == 1  # False: another replica took the job over (this one was presumed dead)

    def prune(self, retention_s: float, max_jobs: int) -> int:
        """Delete finished jobs older than ``retention_s``, then the oldest finished ones beyond ``max_jobs``
        finished jobs; queued and running jobs are never pruned, nor counted."""
        now = self.clock()
        with self._connect() as connection:
            removed = connection.execute("DELETE FROM jobs WHERE status IN ('done', 'failed') AND updated < ?",
                                         (now - retention_s,)).rowcount
            (finished,) = connection.execute("SELECT COUNT(*) FROM jobs WHERE status IN ('done', 'failed')").fetchone()
            if finished > max_jobs:
                removed += connection.execute(
                    "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs WHERE status IN ('done', 'failed') "
                    "ORDER BY updated, job_id LIMIT ?)", (finished - max_jobs,)).rowcount
        return removed

    def counts(self) -> dict[str, int]:
        with self._connect() as connection:
            return dict(connection.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall())


class _Transaction:
    """``with store._connect() as c``: one IMMEDIATE transaction (a writer lock taken up front, so a claim's
    read and update cannot interleave with another replica's)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> sqlite3.Connection:
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if kind is None:
            try:
                self.connection.execute("COMMIT")
                return
            except sqlite3.Error:
                self.connection.execute("ROLLBACK")  # never leave the connection inside a transaction
                raise
        self.connection.execute("ROLLBACK")


class JobWorker:
    """Runs claimed jobs one at a time on a thread (policy scoring holds the evaluator's lock anyway), renews
    their leases, prunes, and wakes on ``notify`` or every ``poll_s`` -- which is how a job orphaned by a dead
    replica is picked up by a live one."""

    def __init__(self, store: JobStore, run: Callable[[Any], Any], owner: str, poll_s: float = 2.0,
                 retention_s: float = 7 * 86400.0, max_jobs: int = 10_000,
                 describe_error: Callable[[BaseException], str] = lambda error: type(error).__name__) -> None:
        self.store = store
        self.run = run
        self.owner = owner
        self.poll_s = poll_s
        self.retention_s = retention_s
        self.max_jobs = max_jobs
        self.describe_error = describe_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._current: str | None = None
        self._threads = [threading.Thread(target=self._loop, name="far-jobs", daemon=True),
                         threading.Thread(target=self._heartbeat, name="far-jobs-lease", daemon=True)]

    def start(self) -> "JobWorker":
        for thread in self._threads:
            thread.start()
        return self

    def notify(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._drain()
            except Exception as error:  # the store failed (locked, disk full): keep the worker, retry next poll
                logger.error("policy job worker: %s; retrying in %.0f s", type(error).__name__, self.poll_s)
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _drain(self) -> None:
        self.store.prune(self.retention_s, self.max_jobs)
        while not self._stop.is_set() and (claimed := self.store.claim(self.owner)) is not None:
            job_id, request = claimed
            self._current = job_id
            try:
                result = self.run(request)
            except Exception as error:  # reported as the job's reason, never as a trace
                self.store.fail(job_id, self.owner, self.describe_error(error))
            else:
                self.store.finish(job_id, self.owner, result)
            finally:
                self._current = None

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.store.lease_s / 3):
            if (job_id := self._current) is not None:
                try:
                    self.store.renew(job_id, self.owner)
                except Exception as error:  # a missed renewal only risks a take-over, never a lost job
                    logger.error("policy job lease renewal: %s", type(error).__name__)
