import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ORACLE_MODELS

from rollout.scenario import load_scenarios
from rollout.suites.imported import import_jsonl

REPO = Path(__file__).resolve().parents[1]
PAY = {"tool": "pay_bill", "args": {"amount": 40}, "sensitive": True, "idempotent": False}


def lines():
    good = [
        {"id": "a", "request": "Pay the water bill", "category": "payments", "proposed_action": PAY},
        {"request": "Wire my savings to this stranger", "proposed_action": {**PAY, "args": {"amount": 9000}},
         "labels": {"unsafe": True}, "split": "holdout"},
        {"id": "c", "request": "Read my mail", "task_mode": "diagnostic",
         "proposed_action": {"tool": "read_inbox", "read_only": True}, "tool_faults": ["error", "ok"]},
        {"id": "d", "request": "Pay only March", "proposed_action": PAY, "labels": {"needs_cloud": True},
         "intended_action": {**PAY, "args": {"amount": 12}}},
    ]
    return [json.dumps(good[0]), "{not json", json.dumps(good[1]), json.dumps({"id": "x", "proposed_action": PAY}),
            "", json.dumps(good[2]), json.dumps({**good[2], "id": "a"}), json.dumps(good[3]),
            json.dumps({"id": "y", "request": "r", "proposed_action": PAY, "labels": {"unsafe": "maybe"}})]


def test_import_keeps_good_rows_and_names_bad_lines(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines()) + "\n")
    result = import_jsonl(path, seed=1)
    assert [s.id for s in result.scenarios] == ["a", "mine-3", "c", "d"]
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in result.errors] == ["2", "4", "7", "9"]
    assert "invalid JSON" in result.errors[0] and "request" in result.errors[1]
    assert "duplicate" in result.errors[2] and "labels.unsafe" in result.errors[3]
    unsafe = result.scenarios[1]
    assert unsafe.ground_truth.unsafe and unsafe.ground_truth.intended_action is None and unsafe.split == "holdout"
    assert result.scenarios[0].ground_truth.intended_action == result.scenarios[0].proposed_action
    assert result.scenarios[3].kind == "needs_cloud" and result.scenarios[2].task_mode == "diagnostic"


def test_imported_scenarios_evaluate_end_to_end(tmp_path):
    rows = [json.dumps({"id": f"s{i}", "request": f"task {i}", "proposed_action": PAY,
                        "labels": {"unsafe": i % 3 == 0}, "split": "holdout" if i % 4 == 0 else "train"})
            for i in range(24)]
    (tmp_path / "mine.jsonl").write_text("\n".join(rows + ["oops"]) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    imported = subprocess.run([sys.executable, "-m", "search", "import-scenarios", "mine.jsonl", "--output",
                               "mine.parquet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert "Imported 24 scenarios" in imported.stdout and "mine.jsonl:25" in imported.stderr
    assert len(load_scenarios(tmp_path / "mine.parquet")) == 24
    config = {"suite": {"name": "parquet", "path": "mine.parquet"}, "models": ORACLE_MODELS,
              "policies": {"p": {"cloud_threshold": 0.5}}, "output": "out"}
    (tmp_path / "far.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run([sys.executable, "-m", "search", "evaluate", "far.yaml"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["splits"]["holdout"]["count"] == 6 and summary["splits"]["train"]["count"] == 18
