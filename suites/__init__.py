"""Suites: where scenarios come from, one module (or subpackage) per suite, and the ``SUITES`` registry.

May import rollout's core (scenario, calls, agent, errors, seeding); never far.models (a suite does not
pick models), verifiers or anything above. A suite module never imports the registry that names it.
"""
from far.suites.base import Suite, split_manifest, split_of
from far.suites.registry import SUITES, SuiteSpec, build_suite, register_suite

__all__ = ["SUITES", "Suite", "SuiteSpec", "build_suite", "register_suite", "split_manifest", "split_of"]
