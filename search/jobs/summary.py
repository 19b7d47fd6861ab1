"""What every job writes: ``summary.json`` (the run's config, data, models and answer) and ``run_stats.json``
(this run's circumstances: seconds, model calls).

``summary.json`` holds no figure of the run's circumstances (time, a warm cache): same config and seed, same
file. Both jobs build it as a ``RunSummary``: the fields every run shares, then the job's own answer.
"""
from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from far.rollout.io import write_json_atomic

PACKAGES = ("far", "ray", "langgraph", "pydantic", "pyarrow", "numpy")


def versions() -> dict[str, str]:
    """Python's and the main packages' versions ("not installed" for one that is not)."""
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


@dataclass(frozen=True)
class RunSummary(Mapping[str, Any]):
    """A job's ``summary.json``: read it like the dict it is written as (``summary["gate"]``)."""

    command: str  # evaluate | search
    config_file: str
    config: dict[str, Any]  # the file as read
    suite: dict[str, Any]  # the suite's description
    splits: dict[str, Any]  # which scenarios sit in which split (content hashes)
    models: dict[str, Any]  # each role's model and precision, and what the learned ones were fitted on
    engine: str
    oracle: list[str]  # non-empty: every figure here came from label-reading models
    shift: str | None  # SHIFTED (...): the models were fitted on data unlike holdout
    answer: dict[str, Any] = field(default_factory=dict)  # the job's own keys (results, winner, gate, ...)
    versions: dict[str, str] = field(default_factory=versions)

    def to_dict(self) -> dict[str, Any]:
        shared = {"command": self.command, "config_file": self.config_file, "config": self.config,
                  "suite": self.suite, "splits": self.splits, "models": self.models, "engine": self.engine,
                  "oracle": self.oracle, "shift": self.shift}
        return {**shared, **self.answer, "versions": self.versions}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def run_summary(command: str, loaded: Any, suite: Any, evaluator: Any, answer: dict[str, Any]) -> RunSummary:
    """The summary of a job that ran ``loaded``'s config on ``suite`` with ``evaluator``'s models."""
    from far.suites import split_manifest

    models = evaluator.models
    described = {k: v for k, v in models.describe().items() if k != "model_calls"}  # calls: in run_stats.json
    return RunSummary(command=command, config_file=loaded.source, config=loaded.raw, suite=suite.describe(),
                      splits=split_manifest(suite), models={**described, "fit": evaluator.fit_report},
                      engine=loaded.config.engine, oracle=list(models.oracle_roles),
                      shift=evaluator.shift_note or None, answer=answer)


def write_run_files(out: Path, summary: RunSummary, stats: dict[str, Any]) -> None:
    """``summary.json`` and ``run_stats.json`` under ``out``, each written atomically."""
    write_json_atomic(out / "summary.json", summary.to_dict())
    write_json_atomic(out / "run_stats.json", stats)


def calls_line(calls: dict[str, Any]) -> str:
    return f"Model calls: {calls['calls_made']} made, {calls['hits']} answered from the cache"
