from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("LANGSMITH_TRACING", "false")
# tests register evaluation-only content: in a registry of their own (inherited by the CLIs they start), never
# the user's
os.environ["FAR_EVAL_ONLY_REGISTRY"] = os.path.join(tempfile.mkdtemp(prefix="far-tests-"), "eval_only.sqlite")

import pytest
from far.rollout.calls import CloudReview, EdgeAssessment, GroundTruthEnvironment, ModelRecord
from far.rollout.scenario import GroundTruth, Scenario, ToolAction
from hypothesis import settings

# The label-reading test doubles, named: the code's default models are real (and slow to fit for a unit test).
# no tool-scope model: the tests that exercise it ask for it (tests/test_rules.py)
ORACLE_MODELS = {"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"}, "user": {"backend": "oracle"},
                 "scope": None}


def oracle_models(**extra) -> dict:
    """A ``models:`` config section with the oracle models (and ``extra`` keys, e.g. ``cache``)."""
    return {**ORACLE_MODELS, **extra}


settings.register_profile("ci", deadline=None, max_examples=60)
settings.load_profile("ci")

PAY = ToolAction(tool="pay_bill", args={"payee": "City Power", "amount": 50.0}, sensitive=True, idempotent=False)
PAY_RIGHT = ToolAction(tool="pay_bill", args={"payee": "City Power", "amount": 20.0}, sensitive=True,
                       idempotent=False)
THERMO = ToolAction(tool="set_thermostat", args={"celsius": 21}, local=True)
WIPE = ToolAction(tool="delete_files", args={"path": "~"}, sensitive=True, local=True)


def make_scenario(proposal: ToolAction = THERMO, *, intended: ToolAction | None | str = "same", unsafe=False,
                  needs_cloud=False, injected=False, benign_sensitive=False, tool_faults=(), cloud_faults=(),
                  sid="s-1", split="train") -> Scenario:
    truth = GroundTruth(
        unsafe=unsafe, needs_cloud=needs_cloud, injected=injected, benign_sensitive=benign_sensitive,
        intended_action=proposal if intended == "same" else intended, tool_faults=tuple(tool_faults),
        cloud_faults=tuple(cloud_faults),
    )
    return Scenario(id=sid, suite="test", category="test", kind="test", task_mode="executable", split=split,
                    request="do it", proposed_action=proposal, ground_truth=truth)


def make_record(scenario: Scenario, *, risk=0.5, verdict="execute", revision=None, confirms_proposal=True,
                confirms_revision=True, cloud_faults=(), edge_error=None) -> ModelRecord:
    """``cloud_faults``: fault classes of the model attempts before the verdict."""
    reviews = tuple(CloudReview(verdict="error", revision=None, reason="", cost=1.0, latency_ms=600.0, error=fault)
                    for fault in cloud_faults)
    return ModelRecord(
        scenario_id=scenario.id,
        edge=EdgeAssessment(risk=1.0 if edge_error else risk, proposal=scenario.proposed_action, cost=0.02,
                            latency_ms=40.0, error=edge_error),
        cloud=reviews + (CloudReview(verdict=verdict, revision=revision, reason="test", cost=1.0, latency_ms=600.0),),
        user_confirms_proposal=confirms_proposal,
        user_confirms_revision=confirms_revision,
    )


@pytest.fixture
def environment():
    return GroundTruthEnvironment()


@pytest.fixture(scope="session")
def ray_local():
    """A private local Ray for the session (no dashboard), stopped at the end."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# `make test` (and so CI) installs Chromium and sets FAR_REQUIRE_BROWSER: there a missing browser fails the run
NEEDS_BROWSER = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("FAR_REQUIRE_BROWSER"),
                                   reason="needs the system Chromium (make test installs it)")


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # no sandbox (root); no background networking: this machine's closed network refuses those connections
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield launched
        launched.close()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: the sockets stay bound until all are chosen (ports picked one at a time can
    repeat, and Ray refuses two components on one port)."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class RayNode:
    """A Ray node started with ``ray start`` in a temp dir of its own (short: Ray's socket paths are capped), every
    port its own (another Ray, e.g. the session's, may hold the defaults), stopped by killing exactly the
    processes whose command line names that temp dir (``ray stop`` would stop every Ray of the user)."""

    def __init__(self, env: dict[str, str], head_address: str | None = None, cpus: int = 1) -> None:
        import subprocess
        import sys
        import time
        from pathlib import Path

        self.temp_dir = Path("/tmp") / f"far-{'w' if head_address else 'h'}-{os.getpid()}-{time.time_ns() % 10**9}"
        bin_dir = Path(sys.executable).parent
        names = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
                 "runtime-env-agent-port", "node-manager-port", "object-manager-port")
        chosen = free_ports(len(names) + 3)  # distinct: the node's own, then the head's gcs, dashboard, client
        ports = [f"--{name}={port}" for name, port in zip(names, chosen)]
        command = [str(bin_dir / "ray"), "start", "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}",
                   f"--num-cpus={cpus}", *ports]
        if head_address is None:
            gcs, dashboard, client = chosen[len(names):]
            self.gcs = f"127.0.0.1:{gcs}"
            self.dashboard = f"http://127.0.0.1:{dashboard}"
            command += ["--head", f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
                        f"--ray-client-server-port={client}"]
        else:
            command += [f"--address={head_address}"]
        # a node joining a cluster with token auth (Ray 2.60's default) needs the token mode set
        started = subprocess.run(command, env={**env, "RAY_AUTH_MODE": "token"} if head_address else env,
                                 capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            self.kill()
            raise RuntimeError(f"ray start failed: {started.stderr[-2000:]}")

    def wait_for_nodes(self, count: int, env: dict[str, str], timeout: float = 120.0) -> None:
        """Wait until this head's cluster has ``count`` alive nodes: ``ray start --address`` returns before the
        head has registered the node, and a job started meanwhile sees the head alone."""
        import subprocess
        import sys
        import time

        probe = ("import ray; ray.init(address=%r, logging_level='ERROR'); "
                 "print(sum(node['Alive'] for node in ray.nodes()))" % self.gcs)
        deadline = time.time() + timeout
        while time.time() < deadline:
            seen = subprocess.run([sys.executable, "-c", probe], env={**env, "RAY_AUTH_MODE": "token"},
                                  capture_output=True, text=True, timeout=120).stdout.strip().splitlines()
            if seen and seen[-1].isdigit() and int(seen[-1]) >= count:
                return
            time.sleep(1.0)
        raise RuntimeError(f"the cluster did not reach {count} alive nodes in {timeout:.0f} s")

    def kill(self) -> int:
        """Kill this node's processes and their children (the node's workers, whose command lines do not name the
        temp dir) with SIGKILL: a node failure, not a shutdown. Returns how many."""
        import psutil

        doomed: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            try:
                if str(self.temp_dir) in " ".join(process.info["cmdline"] or []):
                    doomed[process.pid] = process
                    doomed.update((child.pid, child) for child in process.children(recursive=True))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        for process in doomed.values():
            try:
                process.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return len(doomed)
