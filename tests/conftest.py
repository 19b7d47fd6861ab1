from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("LANGSMITH_TRACING", "false")
# tests register evaluation-only content: in a registry of their own (inherited by the CLIs they start), never
# the user's
os.environ["FAR_EVAL_ONLY_REGISTRY"] = os.path.join(tempfile.mkdtemp(prefix="far-tests-"), "eval_only.sqlite")

import pytest
from hypothesis import settings

from rollout.calls import CloudReview, EdgeAssessment, GroundTruthEnvironment, ModelRecord
from rollout.scenario import GroundTruth, Scenario, ToolAction

# The label-reading test doubles, named: the code's default models are real (and slow to fit for a unit test).
ORACLE_MODELS = {"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"}, "user": {"backend": "oracle"}}


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
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1])}})
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
