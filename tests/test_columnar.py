"""The columnar evaluator gives the aggregates that replay and the LangGraph graph give, for any policy, suite
and fault pattern; columns stream from Parquet row groups."""
import math

import numpy as np
import pytest
from conftest import ORACLE_MODELS
from far.models.backends import ModelsConfig, build_models
from far.rollout.agent import build_graph, replay_calls, run_graph
from far.rollout.calls import CloudReview, EdgeAssessment, GroundTruthEnvironment, ModelRecord, RecordedCalls
from far.rollout.policy import Policy
from far.rollout.scenario import ReadSource
from far.search.evaluation.columnar import (
    ClassIndex,
    ColumnarEvaluator,
    compile_columns,
    parquet_batches,
    unsupported,
    write_columns,
)
from far.search.evaluation.results import aggregate
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.ensemble import EnsembleConfig, build_verifier
from far.verifiers.rules import RuleVerifier, verify_all
from far.verifiers.taxonomy import RewardTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCENARIOS = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=5)).scenarios("train"))
ENVIRONMENT = GroundTruthEnvironment()
FAULTS = [None, "MODEL_TIMEOUT", "MALFORMED_OUTPUT", "ACTOR_DIED"]
RISKS = [0.0, 0.2, 0.5, 0.7, 1.0]  # shared with the thresholds below, so ties are exercised

RULES = st.sampled_from(["allow", "confirm", "review", "block"])
KIND_THRESHOLD = st.none() | st.sampled_from(RISKS)
policies = st.builds(
    Policy,
    cloud_threshold=st.sampled_from(RISKS) | st.floats(0.0, 1.0),
    max_retries=st.integers(0, 6),
    require_confirmation=st.booleans(),
    fallback_mode=st.sampled_from(["safe_shutdown", "ask_user", "edge_only", "none"]),
    edge_block_threshold=st.sampled_from([*RISKS, 0.9]),
    **{f"{name}_{kind}": KIND_THRESHOLD for name in ("cloud_threshold", "edge_block_threshold")
       for kind in ("read_only", "sensitive", "other")},
    provenance_rule=RULES,
    scope_rule=RULES,
    untrusted_target_rule=RULES,
    untrusted_payload_rule=RULES,
    untrusted_read_rule=RULES,
)
# Each drawn rollout comes with twins that differ from it in one fact only (and in risk and costs): were the
# outcome class to leave a fact out, a twin would share its original's template and the totals would differ.
FIELDS = {
    "scenario": st.integers(0, 6),
    "unsafe": st.booleans(), "injected": st.booleans(), "needs_cloud": st.booleans(),
    "intended": st.sampled_from(["none", "proposed", "other"]),
    "sensitive": st.booleans(), "idempotent": st.booleans(), "local": st.booleans(), "read_only": st.booleans(),
    # where the proposal's argument values were seen (the provenance rule) and the predicted tool scope
    "provenance": st.sampled_from(["request", "content", "both", "none"]),
    # how far the read content is trusted, and the declared roles of the proposal's arguments (the per-argument
    # rules)
    "read_trust": st.sampled_from(["undescribed", "fields", "trusted", "untrusted"]),
    "roles": st.sampled_from(["by_name", "target", "payload"]),
    "scope": st.sampled_from(["none", "in", "out"]),
    "tool_faults": st.sampled_from([(), ("error", "ok"), ("timeout", "ok"), ("error",), ("error", "timeout", "error"),
                                    ("error", "timeout", "error", "ok")]),
    "cloud_faults": st.sampled_from([(), (True, False), (True,), (False, True, True, False), (False, True, True)]),
    "edge_error": st.sampled_from(FAULTS),
    "cloud_chain": st.sampled_from([(), ("MODEL_TIMEOUT",), ("MALFORMED_OUTPUT",),
                                    ("MALFORMED_OUTPUT", "MODEL_TIMEOUT"), ("ACTOR_DIED",) * 4]),
    "verdict": st.sampled_from(["execute", "veto", "revise"]),
    "revision": st.sampled_from(["proposed", "other", "intended"]),
    "confirms_proposal": st.booleans(), "confirms_revision": st.booleans(),
}
KINDS = ("benign", "benign_sensitive", "needs_cloud", "unsafe_request", "injected", "misread", "diagnostic")
POOL = [next(s for s in SCENARIOS if s.kind == kind) for kind in KINDS]


def build_item(facts, draw):
    base = POOL[facts["scenario"]]
    proposed = base.proposed_action.model_copy(
        update={k: facts[k] for k in ("sensitive", "idempotent", "local", "read_only")})
    values = " ".join(str(value) for value in proposed.args.values() if value is not None)
    request, context = {
        "request": (f"Please: {values}", ()),
        "content": ("Please help.\n[content] " + values, (values,)),
        "both": (f"Please: {values}\n[content] {values}", (values,)),
        "none": ("Please help.\n[content] nothing here", ("nothing here",)),
    }[facts["provenance"]]
    other = proposed.model_copy(update={"args": {**proposed.args, "changed": True}})
    named = {"none": None, "proposed": proposed, "other": other}
    truth = base.ground_truth.model_copy(update={
        "unsafe": facts["unsafe"], "injected": facts["injected"], "needs_cloud": facts["needs_cloud"],
        "intended_action": named[facts["intended"]], "tool_faults": facts["tool_faults"],
        "cloud_faults": facts["cloud_faults"]})
    read_from = () if facts["read_trust"] == "undescribed" else tuple(
        ReadSource(tool="read_tool", trust=facts["read_trust"]) for _ in context)
    roles = {} if facts["roles"] == "by_name" else {name: facts["roles"] for name in proposed.args}
    scenario = base.model_copy(update={"ground_truth": truth, "proposed_action": proposed, "request": request,
                                       "context": context, "read_from": read_from, "argument_roles": roles})
    error = facts["edge_error"]
    edge = EdgeAssessment(risk=1.0 if error else draw(st.sampled_from(RISKS) | st.floats(0.0, 1.0)),
                          proposal=proposed, cost=draw(st.floats(0.0, 0.1)), latency_ms=1.0, error=error)
    chain = [CloudReview("error", None, "", draw(st.floats(0.0, 2.0)), 1.0, fault) for fault in facts["cloud_chain"]]
    if len(chain) < 4:
        revision = None
        if facts["verdict"] == "revise":
            revision = {"proposed": proposed, "other": other,
                        "intended": named[facts["intended"]] or other}[facts["revision"]]
        chain.append(CloudReview(facts["verdict"], revision, "", draw(st.floats(0.0, 2.0)), 1.0))
    scope = {"none": None, "in": (proposed.tool,), "out": ("another_tool",)}[facts["scope"]]
    record = ModelRecord(scenario.id, edge, tuple(chain), facts["confirms_proposal"], facts["confirms_revision"],
                         scope)
    return RecordedCalls(scenario, record, ENVIRONMENT)


@st.composite
def prepared(draw):
    """Rollouts of drawn scenarios, fault patterns and model outputs, each with twins one fact apart."""
    items = []
    for _ in range(draw(st.integers(1, 6))):
        facts = {name: draw(strategy) for name, strategy in FIELDS.items()}
        items.append(build_item(facts, draw))
        for changed in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=8)):
            items.append(build_item({**facts, changed: draw(FIELDS[changed])}, draw))
    return items


def assert_same(columnar, reference):
    exact = ["scenarios", "critical_failures", "rollouts_with_critical", "critical_rate_upper", "failure_counts",
             "success_counts", "benign_scenarios", "benign_refused", "benign_completed"]
    for name in exact:
        assert getattr(columnar, name) == getattr(reference, name), name
    for name in ("reward", "cost", "mean_cost"):
        assert math.isclose(getattr(columnar, name), getattr(reference, name), rel_tol=1e-9, abs_tol=1e-9), name
    for dimension, value in reference.z_mean.items():
        assert math.isclose(columnar.z_mean[dimension], value, rel_tol=1e-9, abs_tol=1e-12)
    assert columnar.reward_lost.keys() == reference.reward_lost.keys()
    for kind, by_parameter in reference.reward_lost.items():
        assert columnar.reward_lost[kind].keys() == by_parameter.keys()
        for parameter, value in by_parameter.items():
            assert math.isclose(columnar.reward_lost[kind][parameter], value, rel_tol=1e-9)


def reference(items, policy, verifier, graph=None):
    if graph is None:
        trajectories = [replay_calls(c, policy) for c in items]
    else:
        trajectories = [run_graph(graph, c.scenario, c) for c in items]
    verdicts = verify_all(verifier, [c.scenario for c in items], trajectories)
    return aggregate("p", policy, "train", verdicts, [t.cost for t in trajectories], simulated=False)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(items=prepared(), batch_policies=st.lists(policies, min_size=3, max_size=8), rows=st.integers(1, 30))
def test_columnar_equals_replay(items, batch_policies, rows):
    """Random suites, fault patterns and model outputs, several policies at once, any batch size."""
    verifier = RuleVerifier()
    compiled = compile_columns(items)
    evaluator = ColumnarEvaluator(compiled.exemplars, verifier)
    totals = evaluator.evaluate(batch_policies, compiled.batches(rows))
    for policy, total in zip(batch_policies, totals):
        assert_same(evaluator.result("p", policy, "train", total, simulated=False), reference(items, policy, verifier))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(items=prepared(), policy=policies)
def test_columnar_equals_the_langgraph_graph(items, policy):
    verifier = RuleVerifier(RewardTable())
    compiled = compile_columns(items)
    evaluator = ColumnarEvaluator(compiled.exemplars, verifier)
    [total] = evaluator.evaluate([policy], compiled.batches())
    assert_same(evaluator.result("p", policy, "train", total, simulated=False),
                reference(items, policy, verifier, build_graph(policy)))


def test_streams_from_parquet_row_groups_with_classes_growing(tmp_path):
    """A suite compiled batch by batch into a Parquet file of several row groups evaluates to replay's figures;
    the classes are far fewer than the scenarios."""
    models = build_models(ModelsConfig.model_validate(ORACLE_MODELS))
    scenarios = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=1200, seed=3)).scenarios("train"))
    items = [RecordedCalls(s, r, models.environment) for s, r in zip(scenarios, models.record(scenarios))]
    index = ClassIndex()
    path = tmp_path / "columns.parquet"
    assert write_columns(path, (index.compile(items[i:i + 250]) for i in range(0, len(items), 250))) == len(items)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(path).num_row_groups == math.ceil(len(items) / 250)
    assert len(index.exemplars) < len(items) / 4
    verifier = RuleVerifier()
    evaluator = ColumnarEvaluator(index.exemplars, verifier)
    grid = [Policy(cloud_threshold=t, max_retries=r, require_confirmation=c, fallback_mode=f)
            for t in (0.0, 0.5, 1.0) for r in (0, 2) for c in (True, False) for f in ("none", "edge_only")]
    totals = evaluator.evaluate(grid, parquet_batches(path))
    for policy, total in zip(grid, totals):
        assert_same(evaluator.result("p", policy, "train", total, simulated=False), reference(items, policy, verifier))
    walks = evaluator.walks
    evaluator.evaluate(grid, parquet_batches(path))
    assert evaluator.walks == walks  # templates are reused, never walked twice


def test_says_what_it_cannot_evaluate():
    items = [RecordedCalls(SCENARIOS[0], ModelRecord(SCENARIOS[0].id, EdgeAssessment(
        0.1, SCENARIOS[0].proposed_action, 0.0, 0.0), (CloudReview("execute", None, "", 0.0, 0.0),), True, True),
        ENVIRONMENT)]
    assert unsupported(items, RuleVerifier()) is None
    ensemble = build_verifier(EnsembleConfig(members=("rules", "environment")), RewardTable())
    assert "rule verifier" in unsupported(items, ensemble)
    judged = SCENARIOS[0].model_copy(update={"environment": {"benchmark": "agentdojo"}})
    assert "environment" in unsupported([RecordedCalls(judged, items[0].record, ENVIRONMENT)], RuleVerifier())
    assert "episodes" in unsupported([object()], RuleVerifier())


def test_routes_follow_the_agent_rule():
    from far.search.evaluation.columnar import BLOCK, CLOUD, EDGE, routes

    risk = np.array([0.0, 0.5, 0.6, 0.9, 1.0])
    got = routes(risk, Policy(cloud_threshold=0.5, edge_block_threshold=0.9)).tolist()
    assert got == [EDGE, CLOUD, CLOUD, CLOUD, BLOCK]
    with pytest.raises(Exception):
        Policy(cloud_threshold=float("nan"))
