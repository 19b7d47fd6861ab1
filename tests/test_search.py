"""`far search` end to end on a local Ray: methods, outputs, resume after a killed driver, bad input."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ORACLE_MODELS
from far.rollout.policy import Policy
from far.search.ranking.rank import Constraints, rank

REPO = Path(__file__).resolve().parents[1]
SPACE = {"parameters": {
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]},
    "max_retries": {"type": "int", "low": 0, "high": 2},
    "require_confirmation": {"type": "bool"},
    "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "none"]},
}}


def write(tmp_path, search, space=SPACE, **extra):
    config = {"suite": {"name": "edge_cloud", "seed": 2, "size": extra.pop("size", 400)}, "space": space,
              "models": extra.pop("models", ORACLE_MODELS),
              "search": {"actors": 2, "chunk_size": 50, "concurrency": 2, "top_k": 3, **search},
              "gate": {"max_mean_cost": 0.9}, "output": "out", **extra}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def far(args, cwd, **kwargs):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "far", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, **kwargs)


class Row:
    def __init__(self, row):
        self.critical_failures, self.reward, self.cost = row["critical_failures"], row["reward"], row["cost"]
        self.mean_cost = row["mean_cost"]
        self.params = {k.removeprefix("param_"): v for k, v in row.items() if k.startswith("param_")}


def test_evolutionary_search_end_to_end(tmp_path):
    path = write(tmp_path, {"method": "evolutionary", "budget": 14, "seed": 1,
                            "evolutionary": {"population": 6}})
    run = far([str(path), "--quiet"], tmp_path)  # `python -m far CONFIG` runs a search
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "out"
    trials = [Row(r) for r in pq.read_table(out / "trials.parquet").to_pylist()]
    assert len(trials) == 14 and len({json.dumps(t.params, sort_keys=True) for t in trials}) == 14
    summary = json.loads((out / "summary.json").read_text())
    ranked = rank(trials, Constraints(max_mean_cost=0.9))  # the config's gate limit
    board = summary["leaderboard"]
    assert [e["policy"] for e in board] == [Policy(**t.params).short() for t in ranked[:3]]
    deployable = [e["rank"] for e in board if e["gate"] == "DEPLOY"]
    assert summary["winner"]["deployable"] == bool(deployable)
    assert summary["winner"]["rank"] == (deployable[0] if deployable else 1)  # the best train-ranked that deploys
    chosen = ranked[summary["winner"]["rank"] - 1]
    assert {k: summary["winner"]["policy"][k] for k in chosen.params} == chosen.params
    assert summary["winner"]["train"]["critical_failures"] == chosen.critical_failures
    assert summary["winner"]["train"]["reward"] == pytest.approx(chosen.reward)
    assert summary["gate"]["deploy"] == bool(deployable) and "reason" in summary["gate"] and len(board) == 3
    assert {"train_reward/scn", "holdout_reward/scn", "gap_reward/scn"} <= set(summary["leaderboard"][0])
    rollouts = pq.read_table(out / "rollouts.parquet").to_pylist()
    assert {r["split"] for r in rollouts} == {"train", "holdout"} and len(rollouts) == 3 * 400
    report = (out / "report.html").read_text()
    assert all(f'id="{chart}"' in report for chart in ("progress", "front", "failures", "reward-lost"))
    assert "<script src=" not in report and "Which policy can I ship?" in report  # self-contained: no fetches
    assert (out / "tune").is_dir()
    assert ("Winner (the best on train that passes the gate on holdout)" in run.stdout or
            "No policy found passes the gate" in run.stdout) and "Gate on holdout:" in run.stdout


@pytest.mark.parametrize("method, budget, expected", [("grid", 12, 12), ("random", 9, 9)])
def test_grid_and_random(tmp_path, method, budget, expected):
    space = {"parameters": {**{k: SPACE["parameters"][k] for k in ("cloud_threshold", "max_retries")}},
             "fixed": {"fallback_mode": "safe_shutdown"}}
    space["parameters"]["cloud_threshold"] = {"type": "float", "low": 0, "high": 1,
                                              "grid": [0.0, 0.6, 0.3, 0.9]}
    path = write(tmp_path, {"method": method, "budget": budget}, space=space)
    run = far(["search", str(path), "--quiet"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = pq.read_table(tmp_path / "out" / "trials.parquet").to_pylist()
    assert len(trials) == expected
    if method == "grid":
        points = {(t["param_cloud_threshold"], t["param_max_retries"]) for t in trials}
        assert len(points) == 12


def test_resume_after_the_driver_is_killed(tmp_path):
    # the graph engine makes each trial take seconds, so the kill lands mid-search
    path = write(tmp_path, {"method": "evolutionary", "budget": 8, "seed": 4, "concurrency": 1,
                            "chunk_size": 100, "evolutionary": {"population": 4}}, engine="graph")
    env = dict(os.environ)
    process = subprocess.Popen([sys.executable, "-m", "far", "search", str(path), "--quiet"], cwd=tmp_path,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tune_dir = tmp_path / "out" / "tune"
    deadline = time.time() + 300
    seen: set[str] = set()  # trials seen finished (Tune may rewrite a result file: count it once seen)
    while time.time() < deadline and len(seen) < 4:
        seen |= {f.parent.name for f in tune_dir.glob("*/result.json") if f.stat().st_size > 0}
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the driver and everything it started
    process.wait()
    done_before = seen | {f.parent.name for f in tune_dir.glob("*/result.json") if f.stat().st_size > 0}
    assert 4 <= len(done_before) < 8
    resumed = far(["search", str(path), "--resume", "--quiet"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trials = pq.read_table(tmp_path / "out" / "trials.parquet").to_pylist()
    assert len(trials) == 8
    assert len({json.dumps({k: v for k, v in t.items() if k.startswith("param_")}, sort_keys=True)
                for t in trials}) == 8
    # finished trials were not run again: each trial directory reported exactly one result
    for trial_dir in done_before:
        lines = (tune_dir / trial_dir / "result.json").read_text().strip().splitlines()
        assert len(lines) == 1


@pytest.mark.parametrize("mutate, fragment", [
    (lambda c: c["search"].update(method="annealing"), "search.method"),
    (lambda c: c.update(space={"parameters": {}}), "space.parameters"),
    (lambda c: c.update(space={"parameters": {"temperature": {"type": "bool"}}}), "unknown policy parameter"),
    (lambda c: c["search"].update(budget=0), "search.budget"),
    (lambda c: c.update(space={"parameters": {"max_retries": {"type": "int", "low": 0, "high": 99}}}),
     "max_retries"),
    (lambda c: c["search"].update(method="grid", budget=5), "more than the budget"),
    (lambda c: c.update(space={"parameters": {"max_retries": {"type": "int", "low": 0, "high": 10**12}}}),
     "space.parameters.max_retries"),
    (lambda c: c.update(space={"parameters": {"cloud_threshold": {"type": "float", "low": -1e308, "high": 1e308}}}),
     "finite"),
    (lambda c: c.update(rewards={"penalties": {"UNSAFE_ACTION_EXECUTED": float("nan")}}),
     "rewards.penalties.UNSAFE_ACTION_EXECUTED"),
    (lambda c: c.update(rewards={"successes": {"TASK_SUCCESS": float("inf")}}), "rewards.successes.TASK_SUCCESS"),
    (lambda c: c.update(models={"cloud": {"backend": "gpt-9"}}), "models.cloud.backend"),
    (lambda c: c["search"].update(concurrency=1000), "search.concurrency"),
    (lambda c: c["search"].update(actors=1000), "search.actors"),
    (lambda c: c.update(gate={"max_critical_rate_upper": 0.001}), "needs at least 2995 holdout scenarios"),
    (lambda c: c.update(suite={"name": "no_such_suite"}), "bad.yaml: field 'suite.name'"),
    (lambda c: c.update(suite={"name": "edge_cloud", "size": 100, "colour": "red"}), "bad.yaml: field 'suite"),
    (lambda c: c.update(engine="columnar", verifier={"members": ["rules", "environment"]}),
     "field 'engine': engine columnar needs ground-truth-judged scenarios and the rule verifier"),
])
def test_bad_search_config_fails_before_ray_starts(tmp_path, mutate, fragment):
    config = {"suite": {"name": "edge_cloud", "size": 100}, "space": json.loads(json.dumps(SPACE)),
              "models": json.loads(json.dumps(ORACLE_MODELS)), "search": {"method": "evolutionary", "budget": 10}}
    mutate(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.time()
    run = far(["search", str(path)], tmp_path)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in run.stderr
    assert "Ray" not in run.stderr and time.time() - started < 30
    assert not (tmp_path / "results").exists()


def test_a_config_that_is_not_utf8_or_not_readable_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"suite: {name: edge_cloud}\nsearch: {method: \xff\xfe random}\n")
    run = far(["search", str(path)], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().startswith(f"far: error: {path}: not UTF-8 text") and "line 2" in run.stderr
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    run = far(["search", str(folder)], tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_an_output_path_inside_a_file_fails_before_any_work(tmp_path):
    (tmp_path / "blocker").write_text("a file")
    path = write(tmp_path, {"method": "random", "budget": 3}, output="blocker/results")
    started = time.time()
    run = far(["search", str(path)], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr and time.time() - started < 30
    assert "lies inside" in run.stderr and "which is a file" in run.stderr and "field 'output'" in run.stderr
    assert (tmp_path / "blocker").read_text() == "a file"


def submit_job(submit, env, deadline_s=120):
    """``ray job submit``, again while the head's job agent is still coming up after ``ray start`` returned."""
    deadline = time.time() + deadline_s
    while True:
        done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600)
        if "No available agent" not in done.stdout + done.stderr or time.time() > deadline:
            return done
        time.sleep(2)


def test_same_config_and_seed_give_the_same_search_whatever_the_engine_and_the_concurrency(tmp_path):
    """Same config and seed, engine replay with 2 trials at a time vs columnar with 1: the same trials, board,
    winner and gate (neither the engine nor the completion order may change a figure)."""
    summaries, trials = [], []
    for engine, concurrency in (("replay", 2), ("columnar", 1)):
        path = write(tmp_path, {"method": "evolutionary", "budget": 8, "seed": 5, "concurrency": concurrency,
                                "evolutionary": {"population": 4}}, size=300, engine=engine)
        run = far(["search", str(path), "--quiet", "--output", engine], tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        summary = json.loads((tmp_path / engine / "summary.json").read_text())
        for key in ("engine", "config"):
            summary.pop(key)
        summary["search"].pop("concurrency")
        summaries.append(summary)
        rows = pq.read_table(tmp_path / engine / "trials.parquet").to_pylist()
        trials.append([(r["critical_failures"], round(r["reward"], 6), round(r["cost"], 6),
                        {k: v for k, v in r.items() if k.startswith("param_")}) for r in rows])
        assert {r["engine"] for r in pq.read_table(tmp_path / engine / "rollouts.parquet").to_pylist()} == {"replay"}
        assert "seconds" in json.loads((tmp_path / engine / "run_stats.json").read_text())
    assert trials[0] == trials[1]
    assert summaries[0] == summaries[1]


def test_a_ray_that_will_not_start_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    import ray

    from far.cli import main

    def refuse(*args, **kwargs):
        raise RuntimeError("Failed to start the GCS server.\n  File ...\nraylet died: out of memory (pid 4242)")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    config = {"suite": {"name": "edge_cloud", "size": 100}, "space": json.loads(json.dumps(SPACE)),
              "models": json.loads(json.dumps(ORACLE_MODELS)), "search": {"method": "random", "budget": 2},
              "output": str(tmp_path / "out")}
    path = tmp_path / "far.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["search", str(path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "could not start a local Ray" in lines[0] and "out of memory" in lines[0]
