"""Aggregation over a split: the benign counts the gate's usefulness limits read."""
import math

from far.rollout.policy import Policy
from far.search.evaluation.results import aggregate
from far.verifiers.taxonomy import FailureKind, SuccessKind
from far.verifiers.verdict import Failure, Verdict, ZVector
from hypothesis import given
from hypothesis import strategies as st

REFUSAL = Failure(kind=FailureKind.OVER_REFUSAL, critical=False, penalty=-10.0, step=1, node="route", cause_step=1,
                  cause_node="route", decision="block", parameter="edge_block_threshold")


def verdict(benign: bool, refused: bool, done: bool) -> Verdict:
    return Verdict((REFUSAL,) if refused else (), (SuccessKind.TASK_SUCCESS,) if done else (), 0.0,
                   ZVector(1.0, float(done), 0.0 if refused else 1.0, 1.0), benign=benign)


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=40))
def test_benign_counts_are_over_benign_rollouts_only(rows):
    verdicts = [verdict(*row) for row in rows]
    result = aggregate("p", Policy(), "holdout", verdicts, [0.0] * len(verdicts), simulated=False)
    benign = [row for row in rows if row[0]]
    assert result.benign_scenarios == len(benign)
    assert result.benign_refused == sum(refused for _, refused, _ in benign)
    assert result.benign_completed == sum(done for _, _, done in benign)
    if benign:
        assert result.over_refusal_rate == result.benign_refused / len(benign)
        assert 0.0 <= result.benign_success_rate <= 1.0
    else:  # a rate over nothing is unknown, never 0
        assert math.isnan(result.over_refusal_rate) and math.isnan(result.benign_success_rate)
    assert result.failure_counts[FailureKind.OVER_REFUSAL.value] == sum(refused for _, refused, _ in rows)


def test_stopped_by_names_what_stopped_each_attack_the_undefended_policy_let_through():
    """Only injected scenarios whose attack succeeded undefended are counted; each under the parameters that
    intervened in the guarded rollout, or "not stopped"; the counts add up to those attacks."""
    from conftest import oracle_models
    from far.models.backends import ModelsConfig, build_models
    from far.rollout.agent import replay_calls
    from far.rollout.calls import GroundTruthEnvironment, RecordedCalls
    from far.search.evaluation.results import stopped_by
    from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
    from far.verifiers.rules import RuleVerifier

    scenarios = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=400, seed=5)).scenarios("holdout"))
    records = build_models(ModelsConfig.model_validate(oracle_models())).record(scenarios)
    calls = [RecordedCalls(s, r, GroundTruthEnvironment()) for s, r in zip(scenarios, records)]
    verifier = RuleVerifier()

    def run(policy):
        trajectories = [replay_calls(c, policy) for c in calls]
        return trajectories, [verifier.verify(s, t) for s, t in zip(scenarios, trajectories)]

    _, open_verdicts = run(Policy(cloud_threshold=1.0, require_confirmation=False, fallback_mode="safe_shutdown"))
    trajectories, verdicts = run(Policy(cloud_threshold=1.0, require_confirmation=False, provenance_rule="block"))
    table = stopped_by(scenarios, open_verdicts, trajectories, verdicts)["all"]
    let_through = sum(s.kind == "injected" and v.z.security < 1.0 for s, v in zip(scenarios, open_verdicts))
    assert let_through > 0 and sum(table.values()) == let_through
    assert table.get("provenance_rule blocked", 0) > 0
    by_kind = stopped_by(scenarios, open_verdicts, trajectories, verdicts, key=lambda s: s.category)
    assert sum(n for counts in by_kind.values() for n in counts.values()) == let_through
