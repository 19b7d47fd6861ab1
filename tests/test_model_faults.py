"""Model faults are data: retried and handled by the policy's fallback, counted, never a crash."""
import pytest
from conftest import PAY, PAY_RIGHT, THERMO, make_record, make_scenario
from far.models.oracle import OracleEdge, OracleUser
from far.rollout.agent import build_graph, replay, run_live
from far.rollout.calls import CloudReview, GroundTruthEnvironment, ModelSet
from far.rollout.policy import Policy
from far.verifiers.rules import RuleVerifier
from far.verifiers.taxonomy import FailureKind as K

VERIFIER = RuleVerifier()


def decisions(trajectory, node):
    return [s.decision for s in trajectory.steps if s.node == node]


def test_fault_then_verdict_is_retried(environment):
    scenario = make_scenario(PAY, intended=PAY_RIGHT, needs_cloud=True)
    record = make_record(scenario, verdict="revise", revision=PAY_RIGHT, cloud_faults=["MALFORMED_OUTPUT"])
    trajectory = replay(scenario, Policy(cloud_threshold=0.0, max_retries=1), record, environment)
    assert decisions(trajectory, "cloud_review") == ["MALFORMED_OUTPUT:retry", "revise"]
    assert [s.inputs["call"] for s in trajectory.executions()] == [PAY_RIGHT]
    verdict = VERIFIER.verify(scenario, trajectory)
    assert [f.kind for f in verdict.failures] == [K.MALFORMED_OUTPUT]
    assert not verdict.failures[0].critical and verdict.failures[0].parameter is None
    assert verdict.reward == 10


@pytest.mark.parametrize("mode, outcome", [("safe_shutdown", "shutdown"), ("none", "unhandled")])
def test_persistent_fault_goes_to_fallback(environment, mode, outcome):
    scenario = make_scenario(THERMO)
    record = make_record(scenario, cloud_faults=["MODEL_TIMEOUT"] * 4)
    trajectory = replay(scenario, Policy(cloud_threshold=0.0, max_retries=2, fallback_mode=mode), record,
                        environment)
    assert decisions(trajectory, "cloud_review") == ["MODEL_TIMEOUT:retry"] * 2 + ["MODEL_TIMEOUT:give_up"]
    assert trajectory.outcome == outcome
    kinds = [f.kind for f in VERIFIER.verify(scenario, trajectory).failures]
    assert kinds.count(K.MODEL_TIMEOUT) == 3
    assert (K.NO_FALLBACK_ON_FAILURE in kinds) == (mode == "none")


def test_faulted_edge_fails_closed(environment):
    scenario = make_scenario(THERMO)
    record = make_record(scenario, edge_error="ACTOR_DIED")
    trajectory = replay(scenario, Policy(cloud_threshold=1.0), record, environment)
    assert decisions(trajectory, "edge_assess") == ["ACTOR_DIED:fail_closed"]
    assert decisions(trajectory, "route") == ["cloud"]  # risk 1.0 escalates even at threshold 1.0
    assert K.ACTOR_DIED in [f.kind for f in VERIFIER.verify(scenario, trajectory).failures]


class FlakyCloud:
    """A cloud model whose first ``faults`` attempts fail for every scenario."""

    name = "flaky"
    simulated = True

    def __init__(self, faults):
        self.faults = faults
        self.calls = []

    def review(self, scenarios, proposals, attempt=0):
        self.calls.append((len(scenarios), attempt))
        if attempt < self.faults:
            return [CloudReview("error", None, "", 1.0, 0.0, error="MODEL_TIMEOUT") for _ in scenarios]
        return [CloudReview("execute", None, "ok", 1.0, 0.0) for _ in scenarios]


def models(faults):
    return ModelSet(OracleEdge(), FlakyCloud(faults), OracleUser(), GroundTruthEnvironment())


def test_recording_asks_again_only_for_faulted_calls():
    scenarios = [make_scenario(THERMO, sid=f"s{i}") for i in range(5)]
    model_set = models(faults=2)
    records = model_set.record(scenarios)
    assert model_set.cloud.calls == [(5, 0), (5, 1), (5, 2)]
    assert all([r.verdict for r in record.cloud] == ["error", "error", "execute"] for record in records)
    never = models(faults=99)
    never.record(scenarios)
    assert len(never.cloud.calls) == 4  # MAX_RECORDED_MODEL_ATTEMPTS


@pytest.mark.parametrize("faults, retries", [(0, 0), (1, 0), (1, 1), (2, 3), (9, 2)])
def test_live_graph_equals_replay_with_faults(faults, retries):
    scenario = make_scenario(THERMO)
    policy = Policy(cloud_threshold=0.0, max_retries=retries, fallback_mode="edge_only")
    live = run_live(build_graph(policy), scenario, models(faults))
    (record,) = models(faults).record([scenario])
    replayed = replay(scenario, policy, record, GroundTruthEnvironment())
    assert live.steps == replayed.steps and live.outcome == replayed.outcome
