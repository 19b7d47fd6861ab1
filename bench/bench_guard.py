"""The runtime guard's decision latency (``far.rollout.guard``), one process, one thread.

    python bench/bench_guard.py [--size 2000] [--out bench/results/guard-latency.json]

Two paths over the built-in suite's holdout calls, the searched rules on (every per-argument rule at review,
provenance and scope at confirm: each call walks its provenance and every rule):
- ``decide_recorded``: the model outputs recorded already (the model-call cache's hits): the guard's own work --
  building the provenance, walking the node functions, the Decision, the audit-log line (fsync'd);
- ``decide``: a live call from (request, read, call): the call's scenario built from the raw inputs, then the
  same, with label-free constant models in place of the encoders (a cache hit costs a lookup, measured apart in
  BENCHMARKS.md's model-call cache figures).
Both beside a trivial function call, in the same run. The cloud call the guard saves is the reviewer's forward
pass (SmolLM2-135M on CPU, BENCHMARKS.md), tens of milliseconds and up.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from far.harness import run, write_result
from far.rollout.calls import CloudReview, EdgeAssessment, ModelSet
from far.rollout.guard import Guard
from far.rollout.policy import Policy
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

ROOT = Path(__file__).resolve().parents[1]
POLICY = Policy(cloud_threshold=0.5, require_confirmation=True, provenance_rule="confirm", scope_rule="confirm",
                untrusted_target_rule="review", untrusted_payload_rule="review", untrusted_read_rule="review")


class ConstantModels:
    """Label-free stand-ins: risk 0.3, the cloud executes, the user approves (latency of the guard alone)."""

    name, simulated, oracle = "constant", True, False

    def assess(self, scenarios):
        return [EdgeAssessment(0.3, s.proposed_action, 0.0, 0.0) for s in scenarios]

    def review(self, scenarios, proposals, attempt=0):
        return [CloudReview("execute", None, "", 0.0, 0.0) for _ in scenarios]

    def confirms(self, scenario, action):
        return True


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 4),
            "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 4),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 4)}


def timed(fn, items) -> list[float]:
    samples = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "guard-latency.json"))
    args = parser.parse_args()
    holdout = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=args.size, seed=7)).scenarios("holdout"))
    constant = ConstantModels()
    models = ModelSet(constant, constant, constant, None)
    records = models.record(holdout)
    with tempfile.TemporaryDirectory() as folder:
        guard = Guard(POLICY, models, audit_log=Path(folder) / "audit.jsonl")
        unlogged = Guard(POLICY, models)
        raw = [(s.request, [c for c in s.context], s.proposed_action.model_dump()) for s in holdout]
        figures = {
            "trivial_call": percentiles(timed(lambda pair: len(pair), list(zip(holdout, records)))),
            "decide_recorded": percentiles(timed(lambda pair: unlogged.decide_recorded(*pair),
                                                 list(zip(holdout, records)))),
            "decide_recorded_with_audit_log": percentiles(timed(lambda pair: guard.decide_recorded(*pair),
                                                                list(zip(holdout, records)))),
            "decide_live": percentiles(timed(lambda item: unlogged.decide(*item), raw)),
        }
    report = {"calls": len(holdout), "policy": POLICY.short(), **figures}
    write_result(args.out, report)
    for name, value in figures.items():
        print(f"{name}: {value}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run(main)
