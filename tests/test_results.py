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


# --- aggregate's invariants on any verdicts -----------------------------------------------------------------------

# integral penalties, rewards, costs and z in halves: every sum is exact, whatever order it is taken in
ANY_FAILURE = st.builds(Failure, kind=st.sampled_from(list(FailureKind)), critical=st.booleans(),
                        penalty=st.integers(-100, 0).map(float), step=st.just(1), node=st.just("route"),
                        cause_step=st.just(1), cause_node=st.just("route"), decision=st.just("block"),
                        parameter=st.sampled_from([None, "cloud_threshold", "max_retries"]))
ANY_VERDICT = st.builds(
    Verdict, failures=st.lists(ANY_FAILURE, max_size=3).map(tuple),
    successes=st.lists(st.sampled_from(list(SuccessKind)), max_size=2, unique=True).map(tuple),
    reward=st.integers(-300, 30).map(float), z=st.builds(ZVector, *[st.sampled_from([0.0, 0.5, 1.0])] * 4),
    benign=st.booleans())
ROLLOUTS = st.lists(st.tuples(ANY_VERDICT, st.integers(0, 5).map(float)), max_size=25)


def aggregated(rollouts):
    return aggregate("p", Policy(), "holdout", [v for v, _ in rollouts], [c for _, c in rollouts], simulated=False)


def comparable(value):
    """A result's fields with NaN (a figure over no rollouts) made equal to itself."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return "nan" if isinstance(value, float) and math.isnan(value) else value


@given(ROLLOUTS, st.randoms(use_true_random=False))
def test_aggregate_does_not_depend_on_the_rollouts_order(rollouts, rng):
    shuffled = list(rollouts)
    rng.shuffle(shuffled)
    assert comparable(aggregated(shuffled).model_dump()) == comparable(aggregated(rollouts).model_dump())


@given(ROLLOUTS, ROLLOUTS)
def test_the_counts_of_two_parts_add_up_to_the_whole(first, second):
    whole, a, b = aggregated(first + second), aggregated(first), aggregated(second)
    for name in ("scenarios", "critical_failures", "rollouts_with_critical", "benign_scenarios", "benign_refused",
                 "benign_completed", "reward", "cost"):
        assert getattr(whole, name) == getattr(a, name) + getattr(b, name), name
    for name in ("failure_counts", "success_counts"):
        assert getattr(whole, name) == {k: getattr(a, name)[k] + getattr(b, name)[k] for k in getattr(whole, name)}
    for kind, by_parameter in whole.reward_lost.items():
        for parameter, lost in by_parameter.items():
            assert lost == a.reward_lost.get(kind, {}).get(parameter, 0.0) + \
                b.reward_lost.get(kind, {}).get(parameter, 0.0)


@given(ROLLOUTS)
def test_the_totals_agree_with_each_other_and_with_the_verdicts(rollouts):
    from far.search.ranking.gate import clopper_pearson_upper

    result, verdicts = aggregated(rollouts), [v for v, _ in rollouts]
    n = len(verdicts)
    assert result.critical_failures == sum(v.critical_failures for v in verdicts)
    assert result.rollouts_with_critical <= min(n, result.critical_failures)
    assert result.critical_rate_upper == (clopper_pearson_upper(result.rollouts_with_critical, n) if n else 1.0)
    assert sum(result.failure_counts.values()) == sum(len(v.failures) for v in verdicts)
    lost = sum(x for by_parameter in result.reward_lost.values() for x in by_parameter.values())
    assert lost == -sum(f.penalty for v in verdicts for f in v.failures)  # every penalty is blamed somewhere
    if n:
        assert result.mean_cost == result.cost / n and all(0.0 <= z <= 1.0 for z in result.z_mean.values())
    else:
        assert math.isnan(result.mean_cost) and all(math.isnan(z) for z in result.z_mean.values())
