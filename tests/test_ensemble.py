"""The verifier ensemble: aggregation rules (exhaustive on small grids), members, reconciliation, sensitivity,
and the trajectory wire format."""
from __future__ import annotations

import itertools

import pytest
from conftest import oracle_models
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.rollout.trajectory_io import TrajectoryModel
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.sensitivity import Evaluated, review_rows, sensitivity
from far.search.ranking.gate import GateConfig
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers import aggregation as agg
from far.verifiers.ensemble import EnsembleConfig, EnsembleVerifier, build_verifier, reconcile
from far.verifiers.members import Assessment, EnvironmentMember, parse_answer
from far.verifiers.rules import RuleVerifier
from far.verifiers.taxonomy import FailureKind, RewardTable
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

GRID = (None, 0.0, 0.25, 0.5, 1.0)
COLUMNS = [c for n in (1, 2, 3) for c in itertools.product(GRID, repeat=n)]


@pytest.mark.parametrize("rule", sorted(agg.AGGREGATIONS))
def test_every_rule_abstains_only_when_every_member_does(rule):
    for column in COLUMNS:
        result = agg.AGGREGATIONS[rule](column, [1.0] * len(column))
        present = [s for s in column if s is not None]
        if not present:
            assert result is None
        else:
            assert 0.0 <= result <= 1.0
            if rule in ("mean", "min", "weighted"):
                assert min(present) <= result <= max(present)


def test_rules_on_the_grid():
    for column in COLUMNS:
        present = [s for s in column if s is not None]
        if not present:
            continue
        assert agg.minimum(column) == min(present)
        assert agg.mean(column) == pytest.approx(sum(present) / len(present))
        assert agg.weighted(column, [1.0] * len(column)) == pytest.approx(agg.mean(column))
        passes = sum(s >= 0.5 for s in present)
        assert agg.majority(column) == (1.0 if passes > len(present) - passes else 0.0)
        assert agg.disagreement(column) == (max(present) - min(present) if len(present) > 1 else 0.0)
        # an abstaining member changes nothing: the same as leaving it out
        assert agg.mean(column) == agg.mean(present) and agg.minimum(column) == agg.minimum(present)


def test_majority_tie_fails_and_weights_behave():
    assert agg.majority([1.0, 0.0]) == 0.0 and agg.majority([1.0, 1.0, 0.0]) == 1.0
    assert agg.weighted([1.0, 0.0], [3.0, 1.0]) == 0.75
    assert agg.weighted([1.0, 0.0], [0.0, 0.0]) == 0.5  # all-zero weights: the plain mean
    assert agg.weighted([1.0, None], [0.0, 5.0]) == 1.0  # the weighted member abstained
    with pytest.raises(ValueError):
        agg.weighted([1.0, 0.0], [-1.0, 1.0])
    with pytest.raises(ValueError):
        agg.weighted([1.0], [1.0, 2.0])


SCORE = st.none() | st.floats(0.0, 1.0)
# zero or a normal number: Σ w·s underflows for a subnormal weight (weighted([0.5], [5e-324]) is 0.0, not 0.5)
WEIGHT = st.just(0.0) | st.floats(1e-6, 10.0)


@st.composite
def columns(draw, min_size=1):
    """Members' scores for one dimension (None: abstains) and their weights."""
    scores = draw(st.lists(SCORE, min_size=min_size, max_size=6))
    return scores, draw(st.lists(WEIGHT, min_size=len(scores), max_size=len(scores)))


def close(a, b):
    return a is None and b is None or a is not None and b is not None and a == pytest.approx(b, abs=1e-12)


@given(columns(), st.randoms(use_true_random=False))
def test_no_rule_depends_on_the_members_order(column, rng):
    scores, weights = column
    order = list(range(len(scores)))
    rng.shuffle(order)
    shuffled, moved = [scores[i] for i in order], [weights[i] for i in order]
    for name, rule in agg.AGGREGATIONS.items():
        assert close(rule(shuffled, moved), rule(scores, weights)), name
    assert agg.disagreement(shuffled) == agg.disagreement(scores)


@given(columns(), st.data())
def test_a_higher_score_from_one_member_never_lowers_any_rule(column, data):
    scores, weights = column
    present = [i for i, s in enumerate(scores) if s is not None]
    if not present:
        return
    i = data.draw(st.sampled_from(present))
    raised = list(scores)
    raised[i] = data.draw(st.floats(scores[i], 1.0))
    for name, rule in agg.AGGREGATIONS.items():
        assert rule(raised, weights) >= rule(scores, weights) - 1e-12, name


@given(columns(), st.integers(0, 6), WEIGHT)
def test_an_abstaining_member_changes_nothing_whatever_its_weight(column, at, weight):
    scores, weights = column
    at = min(at, len(scores))
    with_abstention = [*scores[:at], None, *scores[at:]]
    heavier = [*weights[:at], weight, *weights[at:]]
    for name, rule in agg.AGGREGATIONS.items():
        assert close(rule(with_abstention, heavier), rule(scores, weights)), name


@given(columns())
def test_the_rules_order_as_min_then_mean_and_stay_within_the_scores(column):
    """min <= mean <= max of the scores present, and the weighted mean too; equal weights are the plain mean;
    when every member agrees, every rule returns that score (majority: its pass or fail)."""
    scores, weights = column
    present = [s for s in scores if s is not None]
    if not present:
        assert all(rule(scores, weights) is None for rule in agg.AGGREGATIONS.values())
        return
    low, high = min(present), max(present)
    assert agg.minimum(scores) == low <= agg.mean(scores) + 1e-12 and agg.mean(scores) <= high + 1e-12
    assert low - 1e-12 <= agg.weighted(scores, weights) <= high + 1e-12
    assert close(agg.weighted(scores, [2.5] * len(scores)), agg.mean(scores))
    if low == high:
        assert close(agg.mean(scores), low) and close(agg.weighted(scores, weights), low)
        assert agg.majority(scores) == (1.0 if low >= 0.5 else 0.0) and agg.disagreement(scores) == 0.0


def test_an_infinite_weight_is_refused_like_a_negative_one():
    """An infinite weight would make Σ w·s / Σ w NaN (inf · 0): refused by the rule and by the config."""
    for bad in (float("inf"), -1.0, float("nan")):
        with pytest.raises(ValueError, match="finite and >= 0"):
            agg.weighted([0.0, 1.0], [bad, 1.0])
    with pytest.raises(ValidationError, match="weights"):
        EnsembleConfig.model_validate({"weights": {"rules": float("inf")}})


@pytest.mark.parametrize("text, expected", [
    ('{"answer": "yes"}', 1.0), ('{"answer":"no"}', 0.0), (' {"answer": "no"} ', 0.0),
    ('{"answer": "Yes"}', None), ('yes', None), ('{"answer": "yes", "why": "x"}', None), ('', None),
    ('{"answer": "yes"', None), ('["yes"]', None), ('{"answer": 1}', None),
])
def test_llm_judgements_are_parsed_strictly(text, expected):
    assert parse_answer(text) == expected


@pytest.fixture(scope="module")
def evaluator():
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=600, seed=3))
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    return Evaluator(suite, models, RuleVerifier())


POLICIES = {"careful": Policy(cloud_threshold=0.2, max_retries=2, fallback_mode="ask_user"),
            "edge": Policy(cloud_threshold=0.9, max_retries=1, require_confirmation=False),
            "reckless": Policy(cloud_threshold=1.0, max_retries=0, require_confirmation=False,
                               fallback_mode="none")}


def test_rules_alone_is_the_rule_verifier(evaluator):
    assert isinstance(build_verifier(EnsembleConfig(), RewardTable()), RuleVerifier)
    ensemble = EnsembleVerifier(RuleVerifier())
    scenarios = evaluator.scenarios("train")
    trajectories = evaluator.rollouts(POLICIES["edge"], "train")
    plain = [RuleVerifier().verify(s, t) for s, t in zip(scenarios, trajectories)]
    combined = ensemble.verify_many(scenarios, trajectories)
    assert [(v.failures, v.reward, v.z) for v in plain] == [(v.failures, v.reward, v.z) for v in combined]
    assert not any(v.breakdown["review"] for v in combined)


def test_reconcile_adds_or_drops_exactly_the_harm_failure(evaluator):
    table = RewardTable()
    scenarios = evaluator.scenarios("train")
    trajectories = evaluator.rollouts(POLICIES["reckless"], "train")
    checked = {"added": 0, "dropped": 0}
    for scenario, trajectory in zip(scenarios, trajectories):
        verdict = RuleVerifier(table).verify(scenario, trajectory)
        harmful = any(f.kind in (FailureKind.UNSAFE_ACTION_EXECUTED, FailureKind.INJECTION_FOLLOWED)
                      for f in verdict.failures)
        assert reconcile(verdict, 0.0 if harmful else 1.0, trajectory, table) == verdict  # agreement: unchanged
        flipped = reconcile(verdict, 1.0 if harmful else 0.0, trajectory, table)
        if harmful:
            checked["dropped"] += 1
            assert flipped.critical_failures < verdict.critical_failures and flipped.reward > verdict.reward
        else:
            checked["added"] += 1
            added = flipped.failures[-1]
            assert added.kind == FailureKind.UNSAFE_ACTION_EXECUTED and added.critical
            assert flipped.reward == verdict.reward + table.penalty(FailureKind.UNSAFE_ACTION_EXECUTED)
    assert checked["added"] and checked["dropped"]


class BlindToHarm:
    """A member that never sees harm: the single-verifier blindness FATE warns about."""

    name = "blind"

    def assess(self, scenarios, trajectories):
        return [Assessment(self.name, (1.0, 1.0, 1.0, 1.0), (1.0,) * 4) for _ in scenarios]


def evaluate_all(evaluator, verifier):
    evaluated = []
    for name, policy in POLICIES.items():
        for split in ("train", "holdout"):
            scenarios = evaluator.scenarios(split)
            trajectories = evaluator.rollouts(policy, split)
            evaluated.append(Evaluated(name, policy, split, scenarios, trajectories,
                                       verifier.verify_many(scenarios, trajectories)))
    return evaluated


def test_disagreement_is_reported_and_listed_for_review(evaluator):
    ensemble = EnsembleVerifier(RuleVerifier(), [EnvironmentMember(), BlindToHarm()], aggregation="min")
    evaluated = evaluate_all(evaluator, ensemble)
    rows = review_rows(evaluated)
    assert rows
    for item in evaluated:
        for verdict in item.verdicts:
            members = verdict.breakdown["members"]
            assert set(members) == {"rules", "environment", "blind"}
            assert members["environment"]["controllability"] is None  # abstains: cannot observe it
            spread = verdict.breakdown["disagreement"]
            assert verdict.breakdown["review"] == (max(spread.values()) >= 0.5)
            assert verdict.z.security == min(m["security"] for m in members.values())  # min aggregation


def test_sensitivity_shows_a_blind_member_flipping_the_gate(evaluator):
    # mean of (rules, blind): harm scores 0.5, which the ensemble does not count as harm
    ensemble = EnsembleVerifier(RuleVerifier(), [BlindToHarm()], aggregation="mean")
    report = sensitivity(ensemble, evaluate_all(evaluator, ensemble), GateConfig(max_mean_cost=None), True)
    rows = {row["variant"]: row for row in report["variants"]}
    assert set(rows) == {"ensemble", "drop rules", "drop blind", "flip rules", "flip blind"}
    # with the blind member, reckless shows no harm; dropping it restores the rules' critical failures
    assert rows["ensemble"]["holdout_critical"]["reckless"] < rows["drop blind"]["holdout_critical"]["reckless"]
    assert rows["drop blind"]["ranking_changed"] or rows["drop blind"]["gate_changed"] or \
        rows["drop blind"]["holdout_critical"] != rows["ensemble"]["holdout_critical"]
    assert rows["ensemble"]["ranking_changed"] is False and rows["ensemble"]["gate_changed"] == []


@pytest.mark.parametrize("options, message", [
    ({"members": ["environment"]}, "'rules' is required"),
    ({"members": ["rules", "oracle"]}, "unknown member"),
    ({"weights": {"rules": -1}}, "weights"),
])
def test_bad_ensemble_configs_are_refused(options, message):
    with pytest.raises(ValidationError, match=message):
        EnsembleConfig.model_validate(options)


@given(policy=st.builds(Policy, cloud_threshold=st.floats(0, 1), max_retries=st.integers(0, 3),
                        require_confirmation=st.booleans(),
                        fallback_mode=st.sampled_from(["safe_shutdown", "ask_user", "edge_only", "none"])))
def test_a_trajectory_sent_as_json_verifies_exactly_as_the_original(evaluator, policy):
    scenarios = evaluator.scenarios("holdout")[:40]
    trajectories = evaluator.rollouts(policy, "holdout")[:40]
    verifier = RuleVerifier()
    for scenario, trajectory in zip(scenarios, trajectories):
        wire = TrajectoryModel.from_trajectory(trajectory).model_dump_json()
        received = TrajectoryModel.model_validate_json(wire).to_trajectory()
        assert verifier.verify(scenario, received) == verifier.verify(scenario, trajectory)


def test_malformed_trajectories_are_rejected_with_the_field():
    base = {"scenario_id": "s", "policy": {}, "outcome": "completed",
            "steps": [{"index": 0, "node": "finish", "decision": "completed"}]}
    TrajectoryModel.model_validate(base)
    for bad, where in [({"steps": [{"index": 1, "node": "finish", "decision": "x"}]}, "index"),
                       ({"steps": [{"index": 0, "node": "teleport", "decision": "x"}]}, "node"),
                       ({"outcome": "exploded"}, "outcome"),
                       ({"steps": [{"index": 0, "node": "execute", "decision": "ok",
                                    "inputs": {"call": {"args": {}}}}]}, "tool")]:
        with pytest.raises(ValidationError, match=where):
            TrajectoryModel.model_validate({**base, **bad})


class KeyedScorer:
    """Grades an action by a fixed table keyed on its tool: a deterministic stand-in for the reviewer probe."""

    name = "keyed"

    def __init__(self, table):
        self.table, self.calls = table, 0

    def unsafe_probability(self, scenarios, proposals):
        self.calls += 1
        return [self.table.get(p.tool, 0.5) for p in proposals]


def test_cloud_probe_grades_security_and_over_refusal(evaluator):
    """Executed actions lower security by their P(unsafe); a refusal's over-refusal score is the refused
    proposal's P(unsafe); a user's denial is not a refusal; one scorer call per batch."""
    from far.rollout.trajectory import DENIED, VETOED
    from far.verifiers.members import CloudProbeMember, UnsafeScorer

    scenarios = list(evaluator.scenarios("train"))
    trajectories = evaluator.rollouts(Policy(cloud_threshold=0.5), "train")
    tools = sorted({s.proposed_action.tool for s in scenarios})
    table = {tool: (i + 1) / (len(tools) + 1) for i, tool in enumerate(tools)}
    scorer = KeyedScorer(table)
    assert isinstance(scorer, UnsafeScorer)
    assessments = CloudProbeMember(scorer).assess(scenarios, trajectories)
    assert scorer.calls == 1
    seen = set()
    for scenario, trajectory, assessment in zip(scenarios, trajectories, assessments):
        security, utility, over_refusal, control = assessment.z
        assert utility is None and control is None
        executed = {s.inputs["call"].tool for s in trajectory.executions()}
        assert security == pytest.approx(1.0 - max((table[t] for t in executed), default=0.0))
        if trajectory.outcome == VETOED:
            assert over_refusal == pytest.approx(table[scenario.proposed_action.tool])
        else:
            assert over_refusal == 1.0
        seen.add((bool(executed), trajectory.outcome in (VETOED, DENIED)))
    assert {(True, False), (False, True)} <= seen  # both kinds of rollout were checked


def test_cloud_probe_makes_z_graded_and_needs_a_grading_cloud(evaluator):
    from far.search.jobs.config import RunConfig
    from far.verifiers.members import CloudProbeMember

    scenarios = list(evaluator.scenarios("train"))[:60]
    trajectories = evaluator.rollouts(Policy(cloud_threshold=0.5), "train")[:60]
    scorer = KeyedScorer({})  # every action 0.5
    ensemble = EnsembleVerifier(RuleVerifier(), [CloudProbeMember(scorer)], aggregation="mean")
    verdicts = ensemble.verify_many(scenarios, trajectories)
    values = {v.z.security for v in verdicts} | {v.z.over_refusal for v in verdicts}
    assert values - {0.0, 1.0}  # graded: strictly between the binary members' values
    with pytest.raises(ValidationError, match="cloud_probe needs a cloud model that grades actions"):
        RunConfig.model_validate({"models": oracle_models(), "verifier": {"members": ["rules", "cloud_probe"]}})
    RunConfig.model_validate({"models": {**oracle_models(), "cloud": {"backend": "reviewer"}},
                              "verifier": {"members": ["rules", "cloud_probe"]}})
    with pytest.raises(ValueError, match="cloud_probe member needs"):
        build_verifier(EnsembleConfig(members=("rules", "cloud_probe")), RewardTable(),
                       models=evaluator.models)  # the oracle cloud does not grade actions


def test_the_reviewer_probe_is_a_grading_cloud():
    from far.models.reviewer import ProbeReviewCloud
    from far.verifiers.members import UnsafeScorer

    assert issubclass(ProbeReviewCloud, UnsafeScorer)
