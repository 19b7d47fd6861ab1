"""REST API benchmark (issues 6 and 17), loopback only. Absolute times are noisy here: the load generator, Ray
Serve's proxy and the replicas all share the machine's 2 cores; the ratios to the floor, measured in the same
run, are the figures to read.

    python bench/bench_serve.py [--seconds 20] [--fuzz-examples 200] [--skip load,faults,fuzz]

1. load: ``POST /v1/score/trajectory`` with the rules + environment members, for 1, 4, 16 and 64 concurrent
   clients, each sending requests back to back for ``--seconds``: p50 / p99 latency, requests per second,
   errors, whether every request was answered -- for the floor (a trivial Serve FastAPI app that parses the
   same bodies and returns a constant), ``topology: ingress`` (the default) and ``topology: deployments``;
   each as a ratio to the floor at the same concurrency. Goal: p99 at 16 clients <= 1.2x the floor, 0 errors.
2. faults: under 16 clients of load with policy jobs queued, kill a replica (a verifier member's, with
   ``topology: deployments``; the ingress's, with both topologies; 2 replicas each): failed requests -- with
   FAR's client retry policy (``far.verifiers.remote``), and on the first attempt, as a client that never retries
   sees them --, the longest request (the stall), and jobs that did not finish (lost). Goal: 0 failed, 0 lost.
3. fuzz: every endpoint with schemathesis from the app's own OpenAPI: server errors (5xx). Goal: 0.

Writes bench/out/serve.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import time
from pathlib import Path

from far.harness import read_result, run, write_result

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request_bodies(n: int) -> list[bytes]:
    from far.models.backends import ModelsConfig
    from far.rollout.policy import Policy
    from far.rollout.trajectory_io import TrajectoryModel
    from far.search.jobs.assemble import build_evaluator
    from far.search.jobs.config import RunConfig
    from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

    # the bodies only need to be realistic trajectories to score: the fast label-reading models make them
    oracle = {role: {"backend": "oracle"} for role in ("edge", "cloud", "user")}
    evaluator = build_evaluator(RunConfig(models=ModelsConfig.model_validate({**oracle, "cache": {"enabled": False}})),
                                suite=EdgeCloudSuite(EdgeCloudSuiteConfig(size=n * 2, seed=4)))
    policy = Policy(cloud_threshold=0.5, max_retries=1, fallback_mode="ask_user")
    scenarios = evaluator.scenarios("train")[:n]
    trajectories = evaluator.rollouts(policy, "train")[:n]
    return [json.dumps({"scenario": s.model_dump(mode="json"),
                        "trajectory": TrajectoryModel.from_trajectory(t).model_dump(mode="json")}).encode()
            for s, t in zip(scenarios, trajectories)]


async def load(url: str, bodies: list[bytes], clients: int, seconds: float, retries: int = 0) -> dict:
    """``retries``: send a request again as FAR's own client does (``far.verifiers.remote``: a dropped connection or
    a 500/502/503/504, with backoff); ``errors`` counts requests failed after those, ``first_attempt_errors``
    what a client that never retries would have seen."""
    import httpx
    from far.verifiers.remote import BACKOFF_S, RETRYABLE_STATUS

    latencies: list[float] = []
    errors = sent = first_attempt_errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(offset: int, client: httpx.AsyncClient) -> None:
        nonlocal errors, sent, first_attempt_errors
        index = offset
        while time.perf_counter() < deadline:
            body = bodies[index % len(bodies)]
            index += clients
            started = time.perf_counter()
            sent += 1
            for attempt in range(retries + 1):
                if attempt:
                    await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
                try:
                    response = await client.post(url, content=body, headers={"content-type": "application/json"})
                    status: int | None = response.status_code
                except httpx.HTTPError:
                    status = None
                if status == 200 or (status is not None and status not in RETRYABLE_STATUS):
                    break
                first_attempt_errors += attempt == 0
            latencies.append(time.perf_counter() - started)
            errors += status != 200

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(i, client) for i in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "clients": clients, "seconds": elapsed, "requests": len(latencies), "sent": sent,
        "all_answered": len(latencies) == sent, "errors": errors, "first_attempt_errors": first_attempt_errors,
        "retries": retries, "req_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "max_ms": 1000 * latencies[-1],
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


CLIENTS = (1, 4, 16, 64)


def app_config(port: int, topology: str, output: Path, **extra):
    from far.models.backends import ModelsConfig
    from far.serve.schemas import JobsConfig, ServeConfig
    from far.verifiers.ensemble import EnsembleConfig

    oracle = {role: {"backend": "oracle"} for role in ("edge", "cloud", "user")}  # policy jobs only need speed
    return ServeConfig(port=port, suites={"small": {"name": "edge_cloud", "seed": 5, "size": 200}},
                       verifier=EnsembleConfig(members=("rules", "environment"), aggregation="min"),
                       models=ModelsConfig.model_validate({**oracle, "cache": {"enabled": False}}),
                       topology=topology, output=str(output), sync_limit=10,
                       jobs=JobsConfig(lease_s=5.0), **extra).with_absolute_paths()


def replica_names(app: str, deployment: str) -> list[str]:
    import ray

    prefix = f"SERVE_REPLICA::{app}#{deployment}#"
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix))


async def fault_run(base: str, bodies: list[bytes], seconds: float, kill: str, app: str) -> dict:
    """16 clients of load; policy jobs submitted first; one replica of ``kill`` killed a third of the way in."""
    import httpx
    import ray

    policy = {"policy": {"cloud_threshold": 0.5}, "suite": "small", "split": "train", "limit": 100}
    async with httpx.AsyncClient(timeout=60.0) as client:
        jobs = [(await client.post(f"{base}/v1/score/policy", json=policy)).json()["job_id"] for _ in range(6)]

    async def killer() -> str:
        await asyncio.sleep(seconds / 3)
        victim = replica_names(app, kill)[0]
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        return victim

    from far.verifiers.remote import RETRIES

    killed, measured = await asyncio.gather(killer(), load(f"{base}/v1/score/trajectory", bodies, 16, seconds,
                                                           retries=RETRIES))
    deadline = time.perf_counter() + 120
    async with httpx.AsyncClient(timeout=30.0) as client:
        while True:
            states = []
            for job in jobs:
                try:
                    states.append((await client.get(f"{base}/v1/jobs/{job}")).json().get("status", "unknown"))
                except httpx.HTTPError:
                    states.append("unreachable")
            if all(s in ("done", "failed") for s in states) or time.perf_counter() > deadline:
                break
            await asyncio.sleep(1.0)
    return {"killed": killed, "load": measured, "jobs": len(jobs), "jobs_done": states.count("done"),
            "jobs_lost": len(jobs) - states.count("done"), "stall_ms": measured["max_ms"]}


def ratios(rows: list[dict], floor: list[dict]) -> list[dict]:
    return [{"clients": r["clients"], "p99_vs_floor": r["p99_ms"] / f["p99_ms"],
             "p50_vs_floor": r["p50_ms"] / f["p50_ms"], "throughput_vs_floor": r["req_per_s"] / f["req_per_s"]}
            for r, f in zip(rows, floor, strict=True)]


def load_section(base: str, port: int, workdir: Path, bodies: list[bytes], seconds: float,
                 fuzz_examples: int | None) -> dict:
    """Latency and throughput per client count: this machine's floor (an endpoint that only parses the body),
    then each topology against it, and the goal at 16 clients; with ``fuzz_examples``, the API fuzzed on the
    ingress topology."""
    from far.serve.app import build_app
    from ray import serve

    section: dict = {"load": {}}
    serve.run(Floor.bind(), name="floor", route_prefix="/")  # this machine's floor, in the same run
    asyncio.run(load(f"{base}/floor", bodies, 4, 3.0))
    section["load"]["floor"] = [asyncio.run(load(f"{base}/floor", bodies, c, seconds)) for c in CLIENTS]
    serve.delete("floor")
    for topology in ("ingress", "deployments"):
        serve.run(build_app(app_config(port, topology, workdir / topology), None), name="far-bench", route_prefix="/")
        url = f"{base}/v1/score/trajectory"
        asyncio.run(load(url, bodies, 4, 3.0))  # warm-up: connections, replicas, code paths
        section["load"][topology] = [asyncio.run(load(url, bodies, c, seconds)) for c in CLIENTS]
        section["load"][f"{topology}_vs_floor"] = ratios(section["load"][topology], section["load"]["floor"])
        print(topology, json.dumps(section["load"][f"{topology}_vs_floor"]), flush=True)
        if topology == "ingress" and fuzz_examples is not None:
            section["fuzz"] = fuzz(base, fuzz_examples)
        serve.delete("far-bench")
    at16 = next(r for r in section["load"]["ingress_vs_floor"] if r["clients"] == 16)
    row16 = next(r for r in section["load"]["ingress"] if r["clients"] == 16)
    section["goal"] = {"ingress_p99_vs_floor_at_16": at16["p99_vs_floor"],
                       "met": at16["p99_vs_floor"] <= 1.2 and row16["errors"] == 0 and row16["all_answered"]}
    return section


def faults_section(base: str, port: int, workdir: Path, bodies: list[bytes], seconds: float) -> list[dict]:
    """Under 16 clients of load and running policy jobs, one replica killed per (topology, deployment)."""
    from far.serve.app import build_app
    from ray import serve

    faults = []
    for topology, victim in (("deployments", "verifier-rules"), ("deployments", "ingress"), ("ingress", "ingress")):
        config = app_config(port, topology, workdir / f"faults-{topology}-{victim}", replicas=2)
        serve.run(build_app(config, None), name="far-bench", route_prefix="/")
        asyncio.run(load(f"{base}/v1/score/trajectory", bodies, 4, 3.0))
        measured = asyncio.run(fault_run(base, bodies, seconds, victim, "far-bench"))
        faults.append({"topology": topology, "killed_deployment": victim, **measured})
        print("fault", topology, victim, json.dumps({k: v for k, v in measured.items() if k != "load"}), flush=True)
        serve.delete("far-bench")
    return faults


def main() -> None:
    import tempfile

    global Floor
    Floor = _floor_deployment()
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--fuzz-examples", type=int, default=200)
    parser.add_argument("--skip", default="", help="comma-separated: load, faults, fuzz")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    import ray
    from ray import serve

    bodies = request_bodies(400)
    ray.init(include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    base = f"http://127.0.0.1:{port}"
    workdir = Path(tempfile.mkdtemp(prefix="far-bench-serve-"))
    out = ROOT / "bench" / "out" / "serve.json"
    result = read_result(out)
    if "load" not in skip:
        result.update(load_section(base, port, workdir, bodies, args.seconds,
                                   None if "fuzz" in skip else args.fuzz_examples))
        write_result(out, result)
    if "faults" not in skip:
        result["faults"] = faults_section(base, port, workdir, bodies, args.seconds)
        write_result(out, result)
    serve.shutdown()
    ray.shutdown()
    write_result(out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "load"}, indent=2, default=str))


if __name__ == "__main__":
    run(main)
