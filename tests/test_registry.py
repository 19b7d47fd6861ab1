"""Registries resolve names lazily and accept third-party entries; old module paths still import."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from far.models.backends import (
    CLOUD_BACKENDS,
    EDGE_BACKENDS,
    SCOPE_BACKENDS,
    USER_BACKENDS,
    BackendSpec,
    ModelsConfig,
    build_models,
)
from far.rollout.errors import FarInputError
from far.rollout.registry import Registry, resolve_path
from far.suites import SUITES, build_suite, register_suite
from far.verifiers.ensemble import MEMBERS, EnsembleConfig
from far.verifiers.judge import JUDGES

ROOT = Path(__file__).resolve().parents[1]


def test_a_path_is_imported_only_when_used():
    table = Registry("thing", "far.test_things", {"missing": "no_such_module_anywhere:factory", "json": "json:dumps"})
    assert table.names() == ("missing", "json")  # naming it imports nothing
    import json

    assert table["json"] is json.dumps
    with pytest.raises(ModuleNotFoundError):
        table["missing"]
    with pytest.raises(KeyError, match=r"unknown thing 'other' \(known: json, missing\)"):
        table["other"]


def test_register_replaces_and_accepts_objects_or_paths():
    table = Registry("thing", "far.test_things", {"a": "json:dumps"})
    table.register("a", "json:loads")
    table.register("b", len)
    import json

    assert table["a"] is json.loads and table["b"] is len and list(table) == ["a", "b"]
    assert resolve_path("os.path:join.__name__") == "join"


def test_entry_points_add_names(monkeypatch):
    class Point:
        name, value = "plugin", "json:dumps"

    import far.rollout.registry as registry_module

    monkeypatch.setattr(registry_module, "entry_points", lambda group: [Point()] if group == "far.test" else [])
    table = Registry("thing", "far.test", {"builtin": "json:loads"})
    import json

    assert table.names() == ("builtin", "plugin") and table["plugin"] is json.dumps


def names_in_configs() -> dict[str, set[str]]:
    """The names the shipped configs (configs/*.yaml) give: suites (``suite:``, a backend's ``fit_on.suite``, and
    far serve's ``suites:`` by name), each role's model backends, verifier members and aggregation rules."""
    import yaml

    used: dict[str, set[str]] = {kind: set() for kind in
                                 ("suite", "edge", "cloud", "user", "scope", "member", "aggregation")}

    def walk(node, key=None):
        if isinstance(node, list):
            for item in node:
                walk(item, key)
        if not isinstance(node, dict):
            return
        if key in ("edge", "cloud", "user", "scope") and "backend" in node:
            used[key].add(node["backend"])
        if key == "suite" and "name" in node:
            used["suite"].add(node["name"])
        if key == "verifier":
            used["member"].update(node.get("members", ()))
            used["aggregation"].update([node["aggregation"]] if "aggregation" in node else [])
        for name, value in node.items():
            if key == "suites" and isinstance(value, dict) and "name" in value:
                used["suite"].add(value["name"])
            walk(value, name)

    for path in sorted((ROOT / "configs").glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return used


def test_builtin_tables_name_what_the_configs_use():
    """Every suite, backend, member and aggregation a shipped config names resolves in its table, and every
    built-in entry of every table resolves to something callable (a path that no longer imports fails here, not
    in a user's run)."""
    from far.verifiers.aggregation import AGGREGATIONS

    used = names_in_configs()
    assert all(used[kind] for kind in ("suite", "edge", "cloud", "user", "member", "aggregation")), used
    assert used["suite"] <= set(SUITES.names())
    for role, table in (("edge", EDGE_BACKENDS), ("cloud", CLOUD_BACKENDS), ("user", USER_BACKENDS),
                        ("scope", SCOPE_BACKENDS)):
        assert used[role] <= set(table.names()), (role, used[role] - set(table.names()))
    assert used["member"] <= set(MEMBERS.names()) and used["aggregation"] <= set(AGGREGATIONS)
    assert "agentdojo" in JUDGES  # the AgentDojo suite's scenarios name their benchmark "agentdojo"
    for table in (SUITES, EDGE_BACKENDS, CLOUD_BACKENDS, USER_BACKENDS, SCOPE_BACKENDS, MEMBERS, JUDGES):
        for name in table:  # every built-in path resolves to something callable
            assert callable(table[name]), (table.kind, name)


def test_a_third_party_suite_builds_by_name(tmp_path):
    from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

    register_suite("tiny_test_suite", lambda options, base_dir: EdgeCloudSuite(EdgeCloudSuiteConfig(size=10)))
    try:
        suite = build_suite({"name": "tiny_test_suite"})
        assert len(suite.scenarios("train")) + len(suite.scenarios("holdout")) == 10
    finally:
        SUITES._targets.pop("tiny_test_suite")
    with pytest.raises(FarInputError, match="unknown suite 'nope'"):
        build_suite({"name": "nope"})


def test_unknown_names_fail_naming_every_known_one():
    """An unknown name is refused with the table's names, all of them (backends sorted, members in their order)."""
    import re

    known = re.escape(f"(known: {', '.join(sorted(EDGE_BACKENDS))})")
    with pytest.raises(FarInputError, match=r"unknown backend 'nope' " + known):
        build_models(ModelsConfig(edge=BackendSpec(backend="nope")))
    known_members = re.escape(f"(known: {', '.join(MEMBERS.names())})")
    with pytest.raises(ValueError, match=r"unknown member\(s\) \['nope'\] " + known_members):
        EnsembleConfig(members=("rules", "nope"))


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_module_that_never_existed_still_fails_plainly():
    done = run_python("import rollout.no_such_module")
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'rollout.no_such_module'" in done.stderr
