"""Scale of policy evaluation (issue 18): graph : replay : columnar per rollout, then the columnar evaluator
over 10k -> 1M scenarios and 1 -> 1,000 policies (time, peak memory), and an exhaustive grid of 10,000
policies x 100,000 scenarios. One run, one machine; ratios are the figures to trust.

    python bench/bench_scale.py [--quick]

Model outputs: the calibrated simulators drawn from the real MiniLM edge's and SmolLM2 reviewer's measured
outputs (``bench/data/calibration-edge_cloud.json``, written by ``far calibrate``), so the outcome classes --
what the columnar evaluator's cost depends on besides the row count -- are as many as real outputs give.
Timings do not depend on who produced the outputs; no safety figure is reported here.

Each scale cell runs in a fresh process (peak RSS is that process's), streaming the columns from a Parquet
file one row group (50,000 rows) at a time.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from far.harness import read_result, run, write_result

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "bench" / "data" / "calibration-edge_cloud.json"
ROW_GROUP = 50_000
SEED = 21  # not the calibration suite's seed (7): other scenarios than those the models were measured on


def models():
    from far.models.backends import ModelsConfig, build_models

    spec = {"backend": "calibrated", "file": str(CALIBRATION)}
    return build_models(ModelsConfig.model_validate({"edge": spec, "cloud": spec, "user": {"backend": "approves"}}))


def prepared(start: int, stop: int, model_set):
    from far.rollout.calls import RecordedCalls
    from far.suites.edge_cloud import generate_scenario

    scenarios = [generate_scenario(SEED, i, 0.3) for i in range(start, stop)]
    return [RecordedCalls(s, r, model_set.environment) for s, r in zip(scenarios, model_set.record(scenarios))]


def grid(n: int):
    """``n`` policies of a product grid (10,000 = 25 thresholds x 5 block thresholds x 10 retries x 2 x 4)."""
    from far.rollout.policy import Policy

    full = [Policy(cloud_threshold=t / 24, edge_block_threshold=b, max_retries=r, require_confirmation=c,
                   fallback_mode=f)
            for t, b, r, c, f in itertools.product(range(25), (0.8, 0.9, 0.95, 0.99, 1.0), range(10), (True, False),
                                                   ("safe_shutdown", "ask_user", "edge_only", "none"))]
    step = max(1, len(full) // n)
    return full[::step][:n]


def best_of(call, repeat: int) -> tuple[float, Any]:
    """The fastest of ``repeat`` calls of ``call`` (seconds) and the value it returned."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        value = call()
        times.append(time.perf_counter() - started)
    return min(times), value


def graph_seconds(items: list, policy, verifier, n: int) -> tuple[float, int]:
    """The LangGraph graph over recorded outputs (roll out, verify, aggregate) on the first 2,000 of ``items``:
    the seconds scaled to all ``n``, and how many were timed."""
    from far.rollout.agent import build_graph, run_graph
    from far.search.evaluation.results import aggregate
    from far.verifiers.rules import verify_all

    graph = build_graph(policy)
    timed = min(n, 2000)
    started = time.perf_counter()
    trajectories = [run_graph(graph, c.scenario, c) for c in items[:timed]]
    aggregate("p", policy, "train", verify_all(verifier, [c.scenario for c in items[:timed]], trajectories),
              [t.cost for t in trajectories], False)
    return (time.perf_counter() - started) / timed * n, timed


def columnar_timings(items: list, policy, verifier) -> dict:
    """Column-wise evaluation of one policy: compiling the columns, the first evaluation (walking the templates
    included) and the best of 5 warm ones, with the evaluator and the warm result."""
    from far.search.evaluation.columnar import ColumnarEvaluator, compile_columns

    started = time.perf_counter()
    compiled = compile_columns(items)
    compile_s = time.perf_counter() - started
    evaluator = ColumnarEvaluator(compiled.exemplars, verifier)

    def evaluate():
        [totals] = evaluator.evaluate([policy], compiled.batches())
        return evaluator.result("p", policy, "train", totals, False)

    cold_s, _ = best_of(evaluate, 1)
    warm_s, result = best_of(evaluate, 5)
    return {"compile_s": compile_s, "cold_s": cold_s, "warm_s": warm_s, "result": result, "evaluator": evaluator,
            "classes": len(compiled.exemplars)}


def per_rollout(n: int) -> dict:
    """One policy over the same n scenarios: LangGraph graph over recorded outputs, replay, columnar (each:
    roll out, verify, aggregate). Columnar cold = compiling the columns and walking the templates included."""
    from far.rollout.policy import Policy
    from far.search.evaluation.evaluate import replay_all
    from far.search.evaluation.results import aggregate
    from far.verifiers.rules import RuleVerifier, verify_all

    items = prepared(0, n, models())
    scenarios = [c.scenario for c in items]
    verifier = RuleVerifier()
    policy = Policy(cloud_threshold=0.4, max_retries=2, require_confirmation=True, fallback_mode="ask_user")

    def replay_eval():
        trajectories = replay_all(items, policy)
        return aggregate("p", policy, "train", verify_all(verifier, scenarios, trajectories),
                         [t.cost for t in trajectories], False)

    graph_s, graph_n = graph_seconds(items, policy, verifier, n)
    replay_s, replayed = best_of(replay_eval, 3)
    columnar = columnar_timings(items, policy, verifier)
    result, warm_s = columnar["result"], columnar["warm_s"]
    same = (result.critical_failures == replayed.critical_failures and result.failure_counts == replayed.failure_counts
            and abs(result.reward - replayed.reward) < 1e-6 and abs(result.cost - replayed.cost) < 1e-6)
    us = 1e6 / n
    return {
        "scenarios": n, "graph_scenarios_timed": graph_n, "outcome_classes": columnar["classes"],
        "template_walks": columnar["evaluator"].walks, "columnar_equals_replay": same,
        "graph_us": graph_s * us, "replay_us": replay_s * us,
        "columnar_cold_us": (columnar["compile_s"] + columnar["cold_s"]) * us,
        "columnar_compile_us": columnar["compile_s"] * us, "columnar_warm_us": warm_s * us,
        "ratio_replay_over_columnar": replay_s / warm_s, "ratio_graph_over_columnar": graph_s / warm_s,
        "ratio_graph_over_replay": graph_s / replay_s,
    }


def write_suite(path: Path, n: int) -> dict:
    """Generate, record (calibrated simulators) and compile n scenarios to a columns file, one row group at a
    time; the exemplars (one per outcome class) are pickled beside it."""
    import pickle

    from far.search.evaluation.columnar import ClassIndex, write_columns

    model_set = models()
    index = ClassIndex()
    started = time.perf_counter()

    def batches():
        for start in range(0, n, ROW_GROUP):
            yield index.compile(prepared(start, min(n, start + ROW_GROUP), model_set))
            print(f"  compiled {min(n, start + ROW_GROUP):,}/{n:,} scenarios", file=sys.stderr, flush=True)

    write_columns(path, batches())
    path.with_suffix(".exemplars.pkl").write_bytes(pickle.dumps(index.exemplars))
    return {"scenarios": n, "outcome_classes": len(index.exemplars), "compile_s": time.perf_counter() - started,
            "file_mib": path.stat().st_size / 2**20}


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cell_child(path: str, scenarios: int, policies: int) -> None:
    """In a fresh process: evaluate ``policies`` grid policies over the first ``scenarios`` rows."""
    import pickle

    import numpy as np
    from far.search.evaluation.columnar import ColumnarEvaluator, parquet_batches

    exemplars = pickle.loads(Path(path).with_suffix(".exemplars.pkl").read_bytes())
    batch_policies = grid(policies)

    def limited():
        left = scenarios
        for batch in parquet_batches(path):
            if left <= 0:
                return
            yield {k: v[:left] for k, v in batch.items()}
            left -= len(batch["class_id"])

    evaluator = ColumnarEvaluator(exemplars)
    rss_before = resident_mib()  # interpreter, libraries and exemplars: what evaluating adds is the rest
    started = time.perf_counter()
    totals = evaluator.evaluate(batch_policies, limited())
    results = [evaluator.result(str(i), p, "train", t, True) for i, (p, t) in enumerate(zip(batch_policies, totals))]
    seconds = time.perf_counter() - started
    critical = np.array([r.critical_failures for r in results])
    print(json.dumps({
        "scenarios": results[0].scenarios, "policies": len(results), "seconds": seconds,
        "us_per_policy_scenario": seconds / len(results) / results[0].scenarios * 1e6,
        "template_walks": evaluator.walks, "rss_before_mib": rss_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "policies_with_zero_critical": int((critical == 0).sum()),
    }))


def cell(path: Path, scenarios: int, policies: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--cell", str(path), str(scenarios), str(policies)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  {scenarios:>9,} scenarios x {policies:>6,} policies: {result['seconds']:.2f} s, "
          f"peak {result['peak_rss_mib']:.0f} MiB ({result['rss_before_mib']:.0f} before evaluating)", file=sys.stderr,
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="100k scenarios at most, fewer policies")
    parser.add_argument("--cell", nargs=3)
    parser.add_argument("--reuse", action="store_true", help="keep the columns file of an earlier run")
    parser.add_argument("--workdir", default=str(ROOT / "bench" / "out" / "scale"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "scale.json"))
    args = parser.parse_args()
    if args.cell:
        cell_child(args.cell[0], int(args.cell[1]), int(args.cell[2]))
        return
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    largest = 100_000 if args.quick else 1_000_000
    print("per rollout: graph, replay, columnar", file=sys.stderr, flush=True)
    results: dict = {"per_rollout": per_rollout(10_000)}
    print(json.dumps(results["per_rollout"], indent=2), file=sys.stderr, flush=True)
    path = workdir / f"columns-{largest}.parquet"
    if args.reuse and path.exists() and Path(args.out).exists():
        results["suite"] = {**read_result(args.out)["suite"], "reused": True}
    else:
        results["suite"] = write_suite(path, largest)
    sizes = [s for s in (10_000, 100_000, 1_000_000) if s <= largest]
    counts = (1, 100) if args.quick else (1, 100, 1_000)
    results["scale"] = [cell(path, s, p) for s in sizes for p in counts]
    results["exhaustive"] = cell(path, 100_000, 1_000 if args.quick else 10_000)
    write_result(args.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    run(main)
