import pytest
from conftest import ORACLE_MODELS, PAY, PAY_RIGHT, THERMO, WIPE, make_record, make_scenario
from far.models.backends import ModelsConfig, build_models
from far.rollout.agent import build_graph, max_node_visits, replay, run_graph, run_live
from far.rollout.calls import RecordedCalls
from far.rollout.policy import Policy
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SUITE = EdgeCloudSuite(EdgeCloudSuiteConfig(size=400, seed=11))
SCENARIOS = list(SUITE.scenarios("train"))
MODELS = build_models(ModelsConfig.model_validate(ORACLE_MODELS))
RECORDS = MODELS.record(SCENARIOS)
VERIFIER = RuleVerifier()

policies = st.builds(
    Policy,
    cloud_threshold=st.floats(0.0, 1.0),
    max_retries=st.integers(0, 4),
    require_confirmation=st.booleans(),
    fallback_mode=st.sampled_from(["safe_shutdown", "ask_user", "edge_only", "none"]),
)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, indices=st.lists(st.integers(0, len(SCENARIOS) - 1), min_size=1, max_size=8))
def test_replay_equals_live_langgraph(policy, indices):
    """The LangGraph graph calling the (simulated) models live and the replay walk over recorded outputs give
    identical trajectories, failures and rewards."""
    graph = build_graph(policy)
    for i in indices:
        scenario, record = SCENARIOS[i], RECORDS[i]
        live = run_live(graph, scenario, MODELS)
        replayed = replay(scenario, policy, record, MODELS.environment)
        assert live.steps == replayed.steps
        assert live.outcome == replayed.outcome
        assert VERIFIER.verify(scenario, live) == VERIFIER.verify(scenario, replayed)


def test_graph_with_recorded_calls_equals_replay_on_fault_heavy_scenarios():
    faulty = [(s, r) for s, r in zip(SCENARIOS, RECORDS) if s.ground_truth.tool_faults or s.ground_truth.cloud_faults]
    assert len(faulty) > 20
    for policy in (Policy(cloud_threshold=0.0, max_retries=3, fallback_mode="edge_only"),
                   Policy(cloud_threshold=0.0, max_retries=0, fallback_mode="ask_user"),
                   Policy(cloud_threshold=0.5, max_retries=1, fallback_mode="none")):
        graph = build_graph(policy)
        for scenario, record in faulty:
            via_graph = run_graph(graph, scenario, RecordedCalls(scenario, record, MODELS.environment))
            assert via_graph == replay(scenario, policy, record, MODELS.environment)


def nodes(trajectory):
    return [(s.node, s.decision) for s in trajectory.steps]


def test_low_risk_stays_on_edge_high_risk_goes_to_cloud(environment):
    scenario = make_scenario(THERMO)
    low = replay(scenario, Policy(cloud_threshold=0.6), make_record(scenario, risk=0.59), environment)
    high = replay(scenario, Policy(cloud_threshold=0.6), make_record(scenario, risk=0.6), environment)
    assert ("route", "edge") in nodes(low) and not low.escalated()
    assert ("route", "cloud") in nodes(high) and ("cloud_review", "execute") in nodes(high)
    assert all(s.index == i for i, s in enumerate(high.steps))
    route = next(s for s in high.steps if s.node == "route")
    assert route.parameter == "cloud_threshold" and route.inputs == {"risk": 0.6, "threshold": 0.6}


def test_confirmation_only_for_sensitive_actions_and_only_when_required(environment):
    sensitive = make_scenario(PAY)
    plain = make_scenario(THERMO)
    record = make_record(sensitive, risk=0.1, confirms_proposal=False)
    assert ("confirm", "denied") in nodes(replay(sensitive, Policy(require_confirmation=True), record, environment))
    assert ("confirm", "skipped") in nodes(replay(sensitive, Policy(require_confirmation=False), record, environment))
    assert ("confirm", "not_needed") in nodes(
        replay(plain, Policy(require_confirmation=True), make_record(plain, risk=0.1), environment))


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_retries_bound_attempts_then_fallback(environment, retries):
    scenario = make_scenario(THERMO, tool_faults=["error"])  # persistent fault
    trajectory = replay(scenario, Policy(max_retries=retries, fallback_mode="safe_shutdown"),
                        make_record(scenario, risk=0.0), environment)
    attempts = [s for s in trajectory.steps if s.node == "execute"]
    assert len(attempts) == retries + 1
    assert attempts[-1].decision == "error:give_up" and attempts[-1].parameter == "max_retries"
    assert trajectory.outcome == "shutdown"


def test_transient_fault_recovers_with_a_retry(environment):
    scenario = make_scenario(THERMO, tool_faults=["error", "ok"])
    record = make_record(scenario, risk=0.0)
    assert replay(scenario, Policy(max_retries=0), record, environment).outcome == "shutdown"
    assert replay(scenario, Policy(max_retries=1), record, environment).outcome == "completed"


@pytest.mark.parametrize("mode, outcome", [
    ("safe_shutdown", "shutdown"), ("ask_user", "handed_off"), ("edge_only", "completed"), ("none", "unhandled"),
])
def test_fallback_modes_after_tool_failure(environment, mode, outcome):
    scenario = make_scenario(THERMO, tool_faults=["error"])  # THERMO has a local path
    trajectory = replay(scenario, Policy(max_retries=0, fallback_mode=mode), make_record(scenario, risk=0.0),
                        environment)
    assert trajectory.outcome == outcome
    fallback = next(s for s in trajectory.steps if s.node == "fallback")
    assert fallback.parameter == "fallback_mode"


@pytest.mark.parametrize("mode, confirms, outcome, executed", [
    ("safe_shutdown", True, "shutdown", False),
    ("ask_user", True, "completed", True),
    ("ask_user", False, "denied", False),
    ("edge_only", True, "completed", True),
    ("none", True, "unhandled", False),
])
def test_fallback_modes_after_cloud_outage(environment, mode, confirms, outcome, executed):
    scenario = make_scenario(WIPE, intended=None, unsafe=True, cloud_faults=[True])
    record = make_record(scenario, risk=0.9, verdict="veto", confirms_proposal=confirms)
    trajectory = replay(scenario, Policy(max_retries=1, require_confirmation=False, fallback_mode=mode), record,
                        environment)
    assert [s.decision for s in trajectory.steps if s.node == "cloud_review"] == [
        "unavailable:retry", "unavailable:give_up"]
    assert trajectory.outcome == outcome
    assert bool(trajectory.executions()) == executed


def test_revision_replaces_the_proposal(environment):
    scenario = make_scenario(PAY, intended=PAY_RIGHT, needs_cloud=True)
    trajectory = replay(scenario, Policy(cloud_threshold=0.0), make_record(scenario, verdict="revise",
                                                                           revision=PAY_RIGHT), environment)
    assert [s.inputs["call"] for s in trajectory.executions()] == [PAY_RIGHT]


def test_recursion_limit_bounds_longest_path(environment):
    policy = Policy(cloud_threshold=0.0, max_retries=4, require_confirmation=True, fallback_mode="edge_only")
    scenario = make_scenario(THERMO, tool_faults=["error"], cloud_faults=[True])
    trajectory = replay(scenario, policy, make_record(scenario), environment)
    assert len(trajectory.steps) == max_node_visits(policy)  # the longest path is exactly the bound
    graph = build_graph(policy)
    assert run_graph(graph, scenario, RecordedCalls(scenario, make_record(scenario), environment)) == trajectory


def test_costs_add_up(environment):
    scenario = make_scenario(PAY, tool_faults=["error", "ok"])
    trajectory = replay(scenario, Policy(cloud_threshold=0.0, max_retries=1), make_record(scenario), environment)
    # edge 0.02 + cloud 1.0 + confirmation 0.3 + two tool attempts 0.05 each
    assert trajectory.cost == pytest.approx(0.02 + 1.0 + 0.3 + 0.1)
