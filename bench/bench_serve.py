"""REST API benchmark (issue 6), loopback only. Absolute times are noisy here: the load generator, Ray Serve's
proxy and the replicas all share the machine's 2 cores.

    python bench/bench_serve.py [--seconds 30] [--fuzz-examples 200]

1. ``POST /v1/score/trajectory`` with the rules + environment members (the Serve app of ``far serve``): for
   1, 4 and 16 concurrent clients, each sending requests back to back for ``--seconds``: p50 / p99 latency,
   requests per second, errors, and whether every request was answered. Goal: p99 <= 50 ms at 16
   concurrent, 0 errors. Measured for both topologies (one deployment per verifier; the ensemble inside the
   ingress) and, as this machine's floor, for a Serve FastAPI endpoint that reads the body and returns a
   constant.
2. Fuzzing every endpoint with schemathesis from the app's own OpenAPI, against the running Serve app:
   server errors (5xx). Goal: 0.

Writes bench/out/serve.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request_bodies(n: int) -> list[bytes]:
    from rollout.models.backends import ModelsConfig, build_models
    from rollout.policy import Policy
    from rollout.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
    from rollout.trajectory_io import TrajectoryModel
    from search.evaluate import Evaluator
    from verifiers.rules import RuleVerifier

    evaluator = Evaluator(EdgeCloudSuite(EdgeCloudSuiteConfig(size=n * 2, seed=4)),
                          build_models(ModelsConfig.model_validate({"cache": {"enabled": False}})), RuleVerifier())
    policy = Policy(cloud_threshold=0.5, max_retries=1, fallback_mode="ask_user")
    scenarios = evaluator.scenarios("train")[:n]
    trajectories = evaluator.rollouts(policy, "train")[:n]
    return [json.dumps({"scenario": s.model_dump(mode="json"),
                        "trajectory": TrajectoryModel.from_trajectory(t).model_dump(mode="json")}).encode()
            for s, t in zip(scenarios, trajectories)]


async def load(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors = sent = 0
    deadline = time.perf_counter() + seconds

    async def worker(offset: int, client: httpx.AsyncClient) -> None:
        nonlocal errors, sent
        index = offset
        while time.perf_counter() < deadline:
            body = bodies[index % len(bodies)]
            index += clients
            started = time.perf_counter()
            sent += 1
            try:
                response = await client.post(url, content=body, headers={"content-type": "application/json"})
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - started)
            errors += not ok

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(i, client) for i in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "clients": clients, "seconds": elapsed, "requests": len(latencies), "sent": sent,
        "all_answered": len(latencies) == sent, "errors": errors, "req_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def fuzz(base: str, examples: int) -> dict:
    """Schemathesis, from the live app's OpenAPI: every operation, ``examples`` generated requests each."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    counts = {"requests": 0, "server_errors": 0, "by_status": {}}
    for operation in schema.get_all_operations():
        operation = operation.ok()

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def probe(case) -> None:
            response = case.call(base_url=base)
            counts["requests"] += 1
            counts["by_status"][response.status_code] = counts["by_status"].get(response.status_code, 0) + 1
            counts["server_errors"] += response.status_code >= 500

        probe()
    return counts


def _floor_deployment():
    from fastapi import FastAPI
    from ray import serve

    app = FastAPI()

    @serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
    @serve.ingress(app)
    class FloorApp:
        @app.post("/floor")
        async def floor(self, body: dict) -> dict:  # parses the JSON body, as the real endpoint does
            return {"ok": True}

    return FloorApp


def main() -> None:
    global Floor
    Floor = _floor_deployment()
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--fuzz-examples", type=int, default=200)
    args = parser.parse_args()

    import ray
    from ray import serve

    from rollout.models.backends import ModelsConfig
    from serve.app import build_app
    from serve.schemas import ServeConfig
    from verifiers.ensemble import EnsembleConfig

    bodies = request_bodies(400)
    ray.init(include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    base = f"http://127.0.0.1:{port}"
    result: dict = {"load": {}}
    for topology in ("deployments", "ingress"):
        config = ServeConfig(port=port, suites={"small": {"name": "edge_cloud", "seed": 5, "size": 200}},
                             verifier=EnsembleConfig(members=("rules", "environment"), aggregation="min"),
                             models=ModelsConfig.model_validate({"cache": {"enabled": False}}), topology=topology)
        serve.run(build_app(config, None), name="far-bench", route_prefix="/")
        url = f"{base}/v1/score/trajectory"
        asyncio.run(load(url, bodies, 4, 3.0))  # warm-up: connections, replicas, code paths
        result["load"][topology] = [asyncio.run(load(url, bodies, c, args.seconds)) for c in (1, 4, 16)]
        if topology == "deployments":
            result["fuzz"] = fuzz(base, args.fuzz_examples)
        serve.delete("far-bench")
    # the floor on this machine: a Serve FastAPI endpoint that reads the same bodies and returns a constant
    serve.run(Floor.bind(), name="floor", route_prefix="/")
    asyncio.run(load(f"{base}/floor", bodies, 4, 3.0))
    result["load"]["floor"] = [asyncio.run(load(f"{base}/floor", bodies, c, args.seconds)) for c in (1, 4, 16)]
    at16 = result["load"]["deployments"][-1]
    result["goal"] = {"p99_ms_at_16": at16["p99_ms"], "met": at16["p99_ms"] <= 50 and at16["errors"] == 0
                      and at16["all_answered"], "fuzz_server_errors": result["fuzz"]["server_errors"]}
    serve.shutdown()
    ray.shutdown()
    out = ROOT / "bench" / "out" / "serve.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
