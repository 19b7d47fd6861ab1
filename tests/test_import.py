import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ORACLE_MODELS
from far.rollout.scenario import load_scenarios
from far.suites.imported import import_jsonl

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
    env = dict(os.environ)
    imported = subprocess.run([sys.executable, "-m", "far", "import-scenarios", "mine.jsonl", "--output",
                               "mine.parquet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert "Imported 24 scenarios" in imported.stdout and "mine.jsonl:25" in imported.stderr
    assert len(load_scenarios(tmp_path / "mine.parquet")) == 24
    config = {"suite": {"name": "parquet", "path": "mine.parquet"}, "models": ORACLE_MODELS,
              "policies": {"p": {"cloud_threshold": 0.5}}, "output": "out"}
    (tmp_path / "far.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run([sys.executable, "-m", "far", "evaluate", "far.yaml"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["splits"]["holdout"]["count"] == 6 and summary["splits"]["train"]["count"] == 18


def far(args, cwd, timeout=120):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "far", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_line_that_is_not_utf8_is_reported_by_number_and_skipped(tmp_path):
    good = [json.dumps({"id": f"u{i}", "request": f"Pay bill {i}", "proposed_action": PAY}) for i in range(3)]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(good[0].encode() + b"\n" + b'{"id": "bad", "request": "caf\xe9"}\n' + "\n".join(good[1:]).encode())
    result = import_jsonl(path)
    assert [s.id for s in result.scenarios] == ["u0", "u1", "u2"]
    assert len(result.errors) == 1 and result.errors[0].startswith(f"{path}:2: not UTF-8")


def eval_only_rows(n: int = 40, marked_line: int | None = None) -> list[str]:
    rows = []
    for i in range(n):
        row = {"id": f"e{i}", "request": f"Settle invoice number {i} for the clinic", "proposed_action": PAY,
               "labels": {"unsafe": i % 5 == 0}, "split": "holdout" if i % 4 == 0 else "train"}
        if i == marked_line:
            row["eval_only"] = True
        rows.append(json.dumps(row))
    return rows


def test_eval_only_by_line_header_and_flag_is_kept_in_parquet(tmp_path):
    from far.rollout.eval_only import EvalOnlyRegistry

    registry = EvalOnlyRegistry(tmp_path / "registry.sqlite")
    (tmp_path / "line.jsonl").write_text("\n".join(eval_only_rows(6, marked_line=2)) + "\n")
    by_line = import_jsonl(tmp_path / "line.jsonl", registry=registry)
    assert [s.eval_only for s in by_line.scenarios] == [False, False, True, False, False, False]
    (tmp_path / "header.jsonl").write_text("\n".join(['{"eval_only": true}', *eval_only_rows(6)]) + "\n")
    by_header = import_jsonl(tmp_path / "header.jsonl", registry=EvalOnlyRegistry(tmp_path / "other.sqlite"))
    assert len(by_header.scenarios) == 6 and all(s.eval_only for s in by_header.scenarios) and not by_header.errors
    from far.rollout.scenario import save_scenarios

    save_scenarios(tmp_path / "header.parquet", by_header.scenarios)
    assert all(s.eval_only for s in load_scenarios(tmp_path / "header.parquet"))
    # known by content: the same rows, renamed, unmarked, under other ids, are evaluation-only again
    renamed = [json.dumps({**json.loads(r), "id": f"other-{i}"}) for i, r in enumerate(eval_only_rows(6))]
    (tmp_path / "innocent.jsonl").write_text("\n".join(renamed) + "\n")
    again = import_jsonl(tmp_path / "innocent.jsonl", registry=EvalOnlyRegistry(tmp_path / "other.sqlite"))
    assert all(s.eval_only for s in again.scenarios) and again.known_eval_only == 6
    fresh = import_jsonl(tmp_path / "innocent.jsonl", registry=EvalOnlyRegistry(tmp_path / "empty.sqlite"))
    assert not any(s.eval_only for s in fresh.scenarios)


def test_the_eval_only_header_fails_closed(tmp_path):
    import pytest
    from far.rollout.errors import FarInputError
    from far.rollout.eval_only import EvalOnlyRegistry

    rows = eval_only_rows(4)
    late = tmp_path / "late.jsonl"  # a header after some lines still marks every line
    late.write_text("\n".join([rows[0], rows[1], '{"eval_only": true}', rows[2], rows[3]]) + "\n")
    result = import_jsonl(late, registry=EvalOnlyRegistry(tmp_path / "r1.sqlite"))
    assert len(result.scenarios) == 4 and all(s.eval_only for s in result.scenarios)
    bom = tmp_path / "bom.jsonl"  # a byte-order mark before the header
    bom.write_bytes(b"\xef\xbb\xbf" + ("\n".join(['{"eval_only": true}', *rows]) + "\n").encode())
    result = import_jsonl(bom, registry=EvalOnlyRegistry(tmp_path / "r2.sqlite"))
    assert not result.errors and all(s.eval_only for s in result.scenarios)
    vague = tmp_path / "vague.jsonl"  # "yes" is not true: refused, not read as trainable
    vague.write_text("\n".join(['{"eval_only": "yes"}', *rows]) + "\n")
    with pytest.raises(FarInputError, match="true or false"):
        import_jsonl(vague, registry=EvalOnlyRegistry(tmp_path / "r3.sqlite"))


def test_a_renamed_eval_only_file_is_refused_at_load_before_any_work(tmp_path):
    (tmp_path / "private.jsonl").write_text("\n".join(eval_only_rows()) + "\n")
    marked = far(["import-scenarios", "private.jsonl", "--output", "private.parquet", "--eval-only"], tmp_path)
    assert marked.returncode == 0, marked.stderr
    assert "evaluation-only 40" in marked.stdout
    # a renamed copy of the source, imported without the flag: recognised by content
    (tmp_path / "public_benchmark.jsonl").write_text((tmp_path / "private.jsonl").read_text())
    copied = far(["import-scenarios", "public_benchmark.jsonl", "--output", "renamed.parquet"], tmp_path)
    assert copied.returncode == 0 and "40 of them known by content" in copied.stdout
    learned = {"edge": {"backend": "embedding"}, "cloud": {"backend": "oracle"}, "user": {"backend": "approves"}}
    policies = {"p": {"cloud_threshold": 0.5}}
    configs = {
        "evaluate_learned": ("evaluate", {"suite": {"name": "parquet", "path": "renamed.parquet"}, "models": learned,
                                          "policies": policies, "output": "out"}),
        "search": ("search", {"suite": {"name": "parquet", "path": "renamed.parquet"}, "models": ORACLE_MODELS,
                              "space": {"parameters": {"cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0,
                                                                       "grid": [0.3, 0.6]}}},
                              "search": {"method": "grid", "budget": 2}, "output": "out"}),
        "calibrate": ("calibrate", {"suite": {"name": "parquet", "path": "renamed.parquet"}, "models": learned}),
        "fit_on": ("evaluate", {"suite": {"name": "edge_cloud", "size": 200},
                                "models": {**learned, "edge": {"backend": "embedding", "fit_on": {
                                    "suite": {"name": "parquet", "path": "renamed.parquet"}}}},
                                "policies": policies, "output": "out"}),
    }
    for name, (command, config) in configs.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        extra = ["--output", "cal.json"] if command == "calibrate" else []
        run = far([command, f"{name}.yaml", *extra], tmp_path)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2, (name, run.stderr[-2000:])
        assert len(lines) == 1 and "evaluation-only scenario(s)" in lines[0] and "renamed.parquet" in lines[0], name
        assert "Traceback" not in run.stderr and not (tmp_path / "out").exists(), name
    # evaluating it with models that fit nothing is what evaluation-only data is for
    (tmp_path / "evaluate.yaml").write_text(yaml.safe_dump({
        "suite": {"name": "parquet", "path": "renamed.parquet"}, "models": ORACLE_MODELS, "policies": policies,
        "output": "out"}))
    evaluated = far(["evaluate", "evaluate.yaml"], tmp_path, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
