"""Suites: where scenarios come from, one module (or subpackage) per suite, and the ``SUITES`` registry.

May import rollout's core (scenario, calls, agent, errors, seeding); never rollout.models (a suite does not
pick models), verifiers or anything above. A suite module never imports the registry that names it.
"""
from rollout.suites.base import Suite, split_manifest, split_of
from rollout.suites.registry import SUITES, SuiteSpec, build_suite, register_suite

__all__ = ["SUITES", "Suite", "SuiteSpec", "build_suite", "register_suite", "split_manifest", "split_of"]

# Old module paths (before the suites/ and models/ layout) -> new ones; see rollout.moved.
MOVED = {
    "rollout.edge_cloud_suite": "rollout.suites.edge_cloud",
    "rollout.importer": "rollout.suites.imported",
    "rollout.agentdojo_suite": "rollout.suites.agentdojo.suite",
    "rollout.agentdojo_agent": "rollout.suites.agentdojo.agent",
}


def __getattr__(name: str):  # ParquetSuite lived in the old rollout/suites.py module
    if name in ("ParquetSuite", "ParquetSuiteConfig"):
        from rollout.suites import imported

        return getattr(imported, name)
    raise AttributeError(f"module 'rollout.suites' has no attribute {name!r}")
