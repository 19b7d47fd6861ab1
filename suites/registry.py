"""Suites by name: ``suite: {name: ..., <options>}`` in a config picks one from ``SUITES``.

A suite factory takes ``(options, base_dir)`` and returns a ``Suite``; options include ``name``. Built-ins
are named by module path and imported on first use (AgentDojo loads only when a config asks for it); add
your own with ``register_suite`` or an entry point in the ``far.suites`` group.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.rollout.registry import Registry
from far.suites.base import Suite
from pydantic import BaseModel, ConfigDict, Field

SuiteFactory = Callable[[dict[str, Any], Path | None], Suite]
SUITES: Registry[SuiteFactory] = Registry("suite", "far.suites", {
    "parquet": "far.suites.imported:parquet_factory",
    "edge_cloud": "far.suites.edge_cloud:factory",
    "agentdojo": "far.suites.agentdojo.suite:factory",
    "broad_requests": "far.suites.broad_requests:factory",
})


def register_suite(name: str, factory: SuiteFactory | str) -> None:
    """Make ``suite: {name: <name>}`` build with ``factory`` (or the ``"module:attribute"`` it names)."""
    SUITES.register(name, factory)


class SuiteSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field("edge_cloud", min_length=1)


def build_suite(spec: SuiteSpec | dict[str, Any], base_dir: Path | None = None) -> Suite:
    if isinstance(spec, dict):
        spec = SuiteSpec.model_validate(spec)
    if spec.name not in SUITES:
        raise FarInputError(f"unknown suite {spec.name!r} (known: {', '.join(sorted(SUITES))})", field="suite.name")
    options = {"name": spec.name, **(spec.model_extra or {})}
    return SUITES[spec.name](options, base_dir)
