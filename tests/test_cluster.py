"""`far search` on a real two-node Ray cluster on this machine (a head with the dashboard and a worker node, each
with a temp dir of its own), submitted with `ray job submit` under token auth: rollout actors are placed on both
nodes, the worker node is killed mid-search, and the search still completes with every trial counted once and
the summary of a local run (so also what it would have been with both nodes alive). The README's cluster recipe:
a job submitted without the token mode is refused."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ORACLE_MODELS, RayNode
from test_search import SPACE, far, submit_job

BUDGET = 6  # two generations of 4: the second is bred from results that crossed the lost node


def summary_of(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("versions", None)
    return summary


def trials_of(out: Path) -> list[tuple]:
    rows = pq.read_table(out / "trials.parquet").to_pylist()
    return [(r["critical_failures"], r["reward"], r["cost"], json.dumps(
        {k: v for k, v in r.items() if k.startswith("param_")}, sort_keys=True)) for r in rows]


def finished_trials(out: Path) -> int:
    """Trials that reported a result so far (Tune writes one result.json per trial directory)."""
    return sum(1 for path in (out / "tune").glob("*/result.json") if path.stat().st_size > 0)


@pytest.mark.timeout(900)
def test_search_on_two_nodes_equals_local_and_survives_losing_a_node(tmp_path):
    # the graph engine makes a trial take about a second, so the node is lost mid-search
    config = {"suite": {"name": "edge_cloud", "seed": 4, "size": 240}, "space": SPACE, "models": ORACLE_MODELS,
              "engine": "graph", "gate": {"max_mean_cost": 0.9},
              "search": {"method": "evolutionary", "budget": BUDGET, "seed": 2, "concurrency": 2, "actors": 2,
                         "chunk_size": 60, "top_k": 3, "evolutionary": {"population": 4}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    local = far(["search", "job.yaml", "--quiet", "--output", str(tmp_path / "local")], tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    expected = summary_of(tmp_path / "local")

    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}")
    head = RayNode(env)
    worker = None
    try:
        worker = RayNode(env, head_address=head.gcs)
        head.wait_for_nodes(2, env)  # the pool places one actor per alive node: both nodes must be seen
        job_env = {**env, "RAY_AUTH_MODE": "token"}

        def submit(out: Path):
            command = [str(bin_dir / "ray"), "job", "submit", "--address", head.dashboard, "--working-dir",
                       str(tmp_path), "--no-wait", "--", "python", "-m", "far", "job.yaml", "--quiet", "--output",
                       str(out)]
            return submit_job(command, job_env)

        # the head refuses a job submitted without the token mode (Ray 2.60's token auth)
        without = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
        refused = subprocess.run([str(bin_dir / "ray"), "job", "submit", "--address", head.dashboard, "--", "python",
                                  "-c", "pass"], env=without, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "auth" in (refused.stdout + refused.stderr).lower()
        out = tmp_path / "fault"
        started = submit(out)
        assert started.returncode == 0, (started.stdout + started.stderr)[-3000:]
        job_id = next(word.strip("'") for line in started.stdout.splitlines() for word in line.split()
                      if word.strip("'").startswith("raysubmit_"))
        deadline = time.time() + 300
        while finished_trials(out) < 2 and time.time() < deadline:
            time.sleep(0.5)
        assert 2 <= finished_trials(out) < BUDGET, "the worker node was not lost mid-search"
        assert worker.kill() > 0
        deadline = time.time() + 400  # the rest of the search, on the head alone (minutes on a loaded machine)
        status = ""
        while time.time() < deadline:
            status = subprocess.run([str(bin_dir / "ray"), "job", "status", "--address", head.dashboard, job_id],
                                    env=job_env, capture_output=True, text=True, timeout=60).stdout.lower()
            if any(word in status for word in ("succeeded", "failed", "stopped")):
                break
            time.sleep(2)
        logs = subprocess.run([str(bin_dir / "ray"), "job", "logs", "--address", head.dashboard, job_id],
                              env=job_env, capture_output=True, text=True, timeout=60).stdout
        assert "succeeded" in status, logs[-3000:]
        stats = json.loads((out / "run_stats.json").read_text())
        assert stats["cluster_nodes"] == 1
        # one rollout actor was pinned to each node; at the end none is on the dead worker's: the head's is alive,
        # the worker's went with its node ("lost") or Ray restarted it on the head (Ray 2.60 does either)
        placed, ended = stats["rollout_actor_placement"], stats["rollout_actor_nodes"]
        assert len(set(placed)) == 2 and set(ended) <= {*placed, "lost"}, stats
        assert len(set(placed) - set(ended)) == 1, stats
        summary = summary_of(out)
        errors = {path.parent.name: path.read_text()[-600:] for path in (out / "tune").glob("*/error.txt")}
        assert (summary["trials"], summary["failed_trials"]) == (BUDGET, 0), (stats, errors, logs[-3000:])
        assert summary == expected  # no trial lost or counted twice: the same trials, ranks and winner
        assert trials_of(out) == trials_of(tmp_path / "local")
    finally:
        if worker is not None:
            worker.kill()
        head.kill()
