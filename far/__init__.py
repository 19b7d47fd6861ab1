"""FAR from Python: the jobs the ``far`` command runs, as functions that return their results.

    import far
    result = far.run_search("configs/search.yaml")   # far search configs/search.yaml
    print(result.report)                               # what the command prints
    result.deployable, result.winner.short(), result.output

``run_evaluate`` (far evaluate), ``run_search`` (far search), ``run_calibrate`` (far calibrate),
``import_scenarios`` (far import-scenarios), ``run_evolve`` (far evolve), ``run_service`` (far serve), and
``build_evaluator`` to evaluate policies of your own on a config's suite and models; ``Guard.load(policy.json)``
enforces a searched policy on a live agent's calls (``far.rollout.guard``); ``dry_run(policy.json, traces.jsonl)``
(far dry-run) says what it would have done on logged runs. Bad input raises
``FarInputError`` (its message names file and field) before any expensive work.

The top of the layer order: this package may import every other one; none imports it.
"""
from __future__ import annotations

from typing import Any

from far.rollout.errors import FarEnvironmentError, FarInputError

_EXPORTS = {
    "run_evaluate": "far.search.jobs.evaluate_job", "EvaluateResult": "far.search.jobs.evaluate_job",
    "run_search": "far.search.jobs.search_job", "SearchResult": "far.search.jobs.search_job",
    "run_calibrate": "far.search.jobs.calibrate_job", "import_scenarios": "far.search.jobs.import_job",
    "build_evaluator": "far.search.jobs.assemble",
    "run_evolve": "far.evolve.loop", "run_service": "far.serve.service",
    "load_guard": "far.search.jobs.policy_file", "read_policy_file": "far.search.jobs.policy_file",
    "dry_run": "far.search.jobs.dry_run",
    "Decision": "far.rollout.guard", "ReadItem": "far.rollout.guard",
}

__all__ = ["FarEnvironmentError", "FarInputError", "Guard", *_EXPORTS]


def __dir__() -> list[str]:
    return sorted(__all__)


class _GuardLoader:
    """``far.Guard.load(policy.json, audit_log=..., shadow=...)``: the runtime guard of a policy file
    (``far.search.jobs.policy_file.load_guard``); ``far.Guard(policy, models)`` builds one directly."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from far.rollout.guard import Guard as _Guard

        return _Guard(*args, **kwargs)

    @staticmethod
    def load(path: Any, **kwargs: Any) -> Any:
        from far.search.jobs.policy_file import load_guard

        return load_guard(path, **kwargs)


Guard = _GuardLoader()


def __getattr__(name: str) -> Any:
    """Imported on first use: ``import far`` stays light (no Ray, torch or Serve until a job needs them)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'far' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
