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


def test_builtin_tables_name_what_the_configs_use():
    assert set(SUITES.names()) == {"parquet", "edge_cloud", "agentdojo", "broad_requests"}
    assert set(EDGE_BACKENDS) == {"oracle", "smollm2", "lm", "embedding", "calibrated"}
    assert set(CLOUD_BACKENDS) == {"oracle", "vllm", "openai", "lm", "reviewer", "finetuned", "calibrated"}
    assert set(USER_BACKENDS) == {"oracle", "approves"}
    assert MEMBERS.names() == ("rules", "environment", "llm_judge", "cloud_probe")
    assert "agentdojo" in JUDGES
    for table in (SUITES, EDGE_BACKENDS, CLOUD_BACKENDS, USER_BACKENDS, MEMBERS, JUDGES):
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


def test_unknown_names_fail_as_before():
    known = r"\(known: calibrated, embedding, lm, oracle, smollm2\)"
    with pytest.raises(FarInputError, match=r"unknown backend 'nope' " + known):
        build_models(ModelsConfig(edge=BackendSpec(backend="nope")))
    known_members = r"\(known: rules, environment, llm_judge, cloud_probe\)"
    with pytest.raises(ValueError, match=r"unknown member\(s\) \['nope'\] " + known_members):
        EnsembleConfig(members=("rules", "nope"))


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_module_that_never_existed_still_fails_plainly():
    done = run_python("import rollout.no_such_module")
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'rollout.no_such_module'" in done.stderr
