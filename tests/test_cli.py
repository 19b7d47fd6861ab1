import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ORACLE_MODELS
from far.rollout.io import write_json_atomic, write_text_atomic

REPO = Path(__file__).resolve().parents[1]


def far(*args, cwd):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "far", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def write_config(tmp_path, **overrides):
    config = {
        "suite": {"name": "edge_cloud", "seed": 5, "size": 300, "holdout_fraction": 0.3},
        "models": ORACLE_MODELS,
        "gate": {"max_mean_cost": 1.5},  # both policies within it: ranked by critical failures
        "policies": {
            "cautious": {"cloud_threshold": 0.2, "max_retries": 1, "require_confirmation": True,
                         "fallback_mode": "safe_shutdown"},
            "reckless": {"cloud_threshold": 1.0, "max_retries": 0, "require_confirmation": False,
                         "fallback_mode": "none"},
        },
        "output": "out",
    }
    config.update(overrides)
    path = tmp_path / "far.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_evaluate_end_to_end(tmp_path):
    config = write_config(tmp_path)
    run = far("evaluate", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ORACLE: reads the labels" in run.stdout and "holdout" in run.stdout and "NO-DEPLOY [ORACLE" in run.stdout
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranking_train"][0] == "cautious"
    assert summary["gate"]["reckless"]["deploy"] is False
    assert "critical_failures" in summary["gate"]["reckless"]["reason"]
    assert summary["models"]["simulated"] is True and summary["oracle"] == ["edge", "cloud", "user"]
    assert summary["gate"]["reckless"]["oracle"] == ["edge", "cloud", "user"]  # marked beside each verdict
    assert summary["splits"]["train"]["count"] + summary["splits"]["holdout"]["count"] == 300
    rollouts = pq.read_table(out / "rollouts.parquet").to_pylist()
    assert len(rollouts) == 2 * 300 and {r["oracle"] for r in rollouts} == {"edge,cloud,user"}
    attributed = [json.loads(r["failures"]) for r in rollouts if r["failures"] != "[]"]
    assert attributed and all({"step", "node", "cause_step", "parameter"} <= set(f) for fs in attributed for f in fs)
    results = pq.read_table(out / "policy_results.parquet").to_pylist()
    reckless_holdout = next(r for r in results if r["policy_name"] == "reckless" and r["split"] == "holdout")
    assert reckless_holdout["oracle"] == "edge,cloud,user"
    holdout_rows = [r for r in rollouts if r["policy"] == "reckless" and r["split"] == "holdout"]
    assert reckless_holdout["critical_failures"] == sum(r["critical_failures"] for r in holdout_rows)
    assert reckless_holdout["reward"] == pytest.approx(sum(r["reward"] for r in holdout_rows))
    scenarios = pq.read_table(out / "scenarios.parquet").to_pylist()
    assert {s["split"] for s in scenarios} == {"train", "holdout"}


def test_a_policy_that_refuses_everything_is_no_deploy_and_ranks_below_a_useful_one(tmp_path):
    """No critical failure and almost no cost: the gate's usefulness limits alone refuse it, end to end."""
    config = write_config(tmp_path, policies={
        "cautious": {"cloud_threshold": 0.2, "require_confirmation": False},
        "refuse_all": {"cloud_threshold": 1.0, "edge_block_threshold": 0.0}})
    run = far("evaluate", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    verdict = summary["gate"]["refuse_all"]
    refused = next(r for r in summary["results"] if r["policy_name"] == "refuse_all" and r["split"] == "holdout")
    assert refused["critical_failures"] == 0 and refused["benign_refused"] == refused["benign_scenarios"] > 0
    assert not verdict["deploy"] and "critical_failures" not in verdict["reason"]
    assert "over_refusal_rate 1 > limit 0.05" in verdict["reason"] and "benign_success_rate 0 < floor 0.5" in \
        verdict["reason"]
    assert summary["ranking_train"] == ["cautious", "refuse_all"]
    assert "benign scenarios refused <= 5%" in run.stdout


def test_graph_engine_gives_the_same_numbers(tmp_path):
    config = write_config(tmp_path, suite={"name": "edge_cloud", "seed": 5, "size": 120})
    assert far("evaluate", str(config), "--output", "replay", cwd=tmp_path).returncode == 0
    assert far("evaluate", str(config), "--output", "graph", "--engine", "graph", cwd=tmp_path).returncode == 0
    replayed = json.loads((tmp_path / "replay" / "summary.json").read_text())["results"]
    live = json.loads((tmp_path / "graph" / "summary.json").read_text())["results"]
    assert replayed == live


@pytest.mark.parametrize("mutate, fragment", [
    (lambda c: c["policies"]["cautious"].update(cloud_threshold=2), "policies.cautious.cloud_threshold"),
    (lambda c: c.update(gate={"max_mean_cost": -1}), "gate.max_mean_cost"),
    (lambda c: c.update(suite={"name": "edge_cloud", "size": "many"}), "suite.size"),
    (lambda c: c.update(models={"edge": {"backend": "gpt-9"}}), "models.edge.backend"),
    (lambda c: c.update(colour="red"), "colour"),
    (lambda c: c["policies"]["cautious"].update(provenance_rule="deny"), "policies.cautious.provenance_rule"),
    (lambda c: c["policies"]["cautious"].update(cloud_threshold_write=0.5), "unknown kind of call 'write'"),
    (lambda c: c["models"].update(scope={"backend": "bert"}), "models.scope.backend"),
    (lambda c: c["models"].update(scope={"backend": "tfidf", "min_probability": 2}), "models.scope.min_probability"),
    (lambda c: c["models"].update(edge={"backend": "embedding", "fit_on": {}}), "models.edge.fit_on"),
    (lambda c: c["models"].update(edge={"backend": "embedding", "fit_on": {"suites": [{"name": "nope"}]}}),
     "models.edge.fit_on.suites[0]"),
    (lambda c: c.update(suite={"name": "broad_requests"},
                        models={**ORACLE_MODELS, "cloud": {"backend": "reviewer", "fit_on": {"shipped": True}}}),
     "models.cloud.fit_on"),
    (lambda c: c.update(suite={"name": "broad_requests", "harmful_per_benign": 9}), "suite.harmful_per_benign"),
    (lambda c: c.update(policies="missing.yaml"), "missing.yaml"),
    (lambda c: c.update(suite={"name": "edge_cloud", "size": 2, "holdout_fraction": 0.01}), "split is empty"),
])
def test_bad_config_one_line_exit_2_and_nothing_written(tmp_path, mutate, fragment):
    config = {
        "suite": {"name": "edge_cloud", "size": 50},
        "models": dict(ORACLE_MODELS),
        "policies": {"cautious": {"cloud_threshold": 0.2}},
        "output": "out",
    }
    mutate(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"earlier": true}')
    run = far("evaluate", str(path), cwd=tmp_path)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr and fragment in lines[0]
    assert json.loads((out / "summary.json").read_text()) == {"earlier": True}
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_bad_scenario_file_names_row(tmp_path):
    import pyarrow as pa
    from far.rollout.scenario import save_scenarios
    from far.suites.edge_cloud import generate_scenario

    path = save_scenarios(tmp_path / "s.parquet", [generate_scenario(0, i, 0.5) for i in range(6)])
    rows = pq.read_table(path).to_pylist()
    rows[4]["proposed_action"] = "{not json"
    pq.write_table(pa.Table.from_pylist(rows), path)
    config = write_config(tmp_path, suite={"name": "parquet", "path": "s.parquet"})
    run = far("evaluate", str(config), cwd=tmp_path)
    assert run.returncode == 2 and "row 4" in run.stderr and "proposed_action" in run.stderr
    assert "Traceback" not in run.stderr


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"v": 1})

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"v": Boom()})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind
    write_text_atomic(path, "{}")
    assert path.read_text() == "{}"
