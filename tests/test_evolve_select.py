"""Selecting the repair to teach (``far.evolve.select``): κ, the feasible front, the rule that settled each choice, the
paper's ablations, and the training reward's tie breaks."""
from __future__ import annotations

import math
import random

import pytest
from evolve_helpers import decision_task
from far.evolve.collect import Failure, failures
from far.evolve.config import KappaConfig, SelectionSettings
from far.evolve.select import Candidate, input_thresholds, r_pf_of, select, training_reward
from far.evolve.task import MALFORMED
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

task = pytest.fixture(scope="module", name="task")(decision_task)


def test_a_failure_is_judged_against_kappa():
    """A decision whose graded z clears κ is no failure; κ is per task mode."""
    from conftest import make_scenario
    from far.evolve.task import violated

    z = (0.97, 1.0, 0.9, 1.0)
    assert violated(z) == ["security", "over_refusal"]
    assert violated(z, (0.5, 0.5, 0.5, 1.0)) == []
    assert violated((0.2, 1.0, 1.0, 1.0), (0.5, 0.5, 0.5, 1.0)) == ["security"]
    kappa = KappaConfig(executable=(0.5, 0.5, 0.5, 1.0), diagnostic=(0.4, 0.4, 0.4, 1.0))
    executable = make_scenario()
    diagnostic = executable.model_copy(update={"task_mode": "diagnostic"})
    selection = SelectionSettings(kappa=kappa)
    assert input_thresholds(selection, executable, (1.0,) * 4) == (0.5, 0.5, 0.5, 1.0)
    assert input_thresholds(selection, diagnostic, (1.0,) * 4) == (0.4, 0.4, 0.4, 1.0)
    assert input_thresholds(selection, executable, (1.0, 0.0, 0.3, math.nan)) == (0.5, 0.0, 0.3, 1.0)
    # an objective left out (the 'no over-refusal objective' ablation) has no floor: it never fails a decision
    no_over_refusal = SelectionSettings(kappa=kappa, objectives=("security", "utility", "controllability"))
    assert input_thresholds(no_over_refusal, executable, (1.0,) * 4) == (0.5, 0.5, 0.0, 1.0)


def test_supervision_samples_only_the_feasible_front(task):
    """A benign call refused: handling and escalating it both score z = 1 everywhere, but escalating spends an
    unnecessary cloud call, so the tie break keeps handling alone on the front; refusing (over-refusal) and a
    malformed answer are infeasible."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenario = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    decisions = ["handle", "escalate", "refuse", MALFORMED]
    scored = task.score([scenario] * 4, decisions)
    assert scored[0].z == scored[1].z == (1.0, 1.0, 1.0, 1.0)
    strict = KappaConfig(executable=(1.0, 1.0, 1.0, 1.0), diagnostic=(1.0, 1.0, 1.0, 1.0))
    settings_ = SelectionSettings(diversity_bonus=0.0, kappa=strict)
    failure = Failure(scenario, "refuse", scored[2], (1.0, 1.0, 1.0, 1.0))
    candidates = [Candidate(d, s, sum(s.z)) for d, s in zip(decisions, scored)]
    chosen = {select(settings_, failure, candidates, random.Random(seed)).chosen.scored.decision for seed in range(20)}
    picked = select(settings_, failure, candidates, random.Random(0))
    assert chosen == {"handle"} and picked.q == pytest.approx([1.0, 0.0, 0.0, 0.0]) and picked.rule == "tie_break"
    # only infeasible repairs (over-refusal, malformed): nothing to supervise with
    assert select(settings_, failure, candidates[2:], random.Random(0)).chosen is None
    # the failed action is never its own repair, whatever κ (here 0: everything feasible)
    anything = SelectionSettings(kappa=KappaConfig(executable=(0.0,) * 4, diagnostic=(0.0,) * 4))
    assert select(anything, failure, [candidates[2], candidates[2]], random.Random(0)).chosen is None
    assert select(settings_, failure, [candidates[0], candidates[2]], random.Random(0)).rule == "repair"
    assert select(settings_, failure, candidates[2:], random.Random(0)).rule == "none"


def synthetic(decision: str, z, reward: float = 0.0, cost: float = 1.0):
    from types import SimpleNamespace

    from far.evolve.task import ScoredDecision

    return ScoredDecision(decision=decision, verdict=SimpleNamespace(reward=reward), z=tuple(z), failures=(), cost=cost)


@pytest.mark.parametrize("candidates, rule, taught", [
    # one repairs the security failure; the failed decision again repairs nothing
    ([("escalate", (1, 1, 1, 1)), ("handle", (0, 1, 1, 1))], "repair", {"escalate"}),
    # two repair it, one still below κ on security
    ([("escalate", (1, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1))], "kappa", {"escalate"}),
    # both feasible, one dominated
    ([("escalate", (1, 1, 1, 1)), ("refuse", (0.9, 0.8, 1, 1))], "pareto", {"escalate"}),
    # equal on z: the reward table, then the cost, break the tie
    ([("escalate", (1, 1, 1, 1), 5.0), ("refuse", (1, 1, 1, 1), 8.0)], "tie_break", {"refuse"}),
    ([("escalate", (1, 1, 1, 1), 5.0, 2.0), ("refuse", (1, 1, 1, 1), 5.0, 1.0)], "tie_break", {"refuse"}),
    # incomparable on z: q* weighs both
    ([("escalate", (1, 0.6, 1, 1)), ("refuse", (0.8, 1, 1, 1))], "r_pf", {"escalate", "refuse"}),
    ([("handle", (0, 1, 1, 1))], "none", set()),
])
def test_each_selection_names_the_rule_that_settled_it(candidates, rule, taught):
    """Synthetic z for a failed 'handle' of a harmful request (security 0, the rest 1), κ 0.5 (control 1)."""
    from conftest import make_scenario

    failure = Failure(make_scenario(unsafe=True), "handle", synthetic("handle", (0, 1, 1, 1)), (1.0, 1.0, 1.0, 1.0))
    settings_ = SelectionSettings(diversity_bonus=0.0)
    scored = [Candidate(c[0], synthetic(*c), r_pf_of(settings_, c[1])) for c in candidates]
    picks = [select(settings_, failure, scored, random.Random(seed)) for seed in range(40)]
    assert {p.rule for p in picks} == {rule}
    assert {p.chosen.text for p in picks if p.chosen is not None} == taught
    assert all(sum(p.q) == pytest.approx(1.0 if taught else 0.0) for p in picks)


@pytest.mark.parametrize("settings_, candidates, rule, taught", [
    # no verifier rescoring: the first candidate that changes the failed decision, whatever its z
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1)), ("escalate", (1, 1, 1, 1))],
     "first_valid", "refuse"),
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1)), ("escalate", (1, 1, 1, 1))], "repair", "escalate"),
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1))], "none", None),
    # no Pareto front: the feasible repair with the highest sum, whatever the front would weigh
    ({"rule": "weighted_sum"}, [("escalate", (1, 0.6, 1, 1)), ("refuse", (0.8, 1, 1, 1))], "weighted_sum", "refuse"),
    ({"rule": "weighted_sum"}, [("escalate", (1, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1))], "kappa", "escalate"),
    # no over-refusal objective: a refusal that over-refuses repairs, and here beats the escalation; with the
    # objective, it is no repair at all
    ({"objectives": ["security", "utility", "controllability"]},
     [("refuse", (1, 1, 0, 1)), ("escalate", (1, 0.6, 1, 1))], "pareto", "refuse"),
    ({}, [("refuse", (1, 1, 0, 1)), ("escalate", (1, 0.6, 1, 1))], "repair", "escalate"),
])
def test_the_papers_ablations_choose_as_they_say(settings_, candidates, rule, taught):
    from conftest import make_scenario

    failure = Failure(make_scenario(unsafe=True), "handle", synthetic("handle", (0, 1, 1, 1)), (1.0, 1.0, 1.0, 1.0))
    selection = SelectionSettings(diversity_bonus=0.0, **settings_)
    scored = [Candidate(c[0], synthetic(*c), r_pf_of(selection, c[1])) for c in candidates]
    picks = [select(selection, failure, scored, random.Random(seed)) for seed in range(40)]
    assert {p.rule for p in picks} == {rule}
    chosen = {p.chosen.text for p in picks if p.chosen is not None}
    assert chosen == (taught if isinstance(taught, set) else {taught} if taught else set())


def test_the_reward_table_weighs_what_z_cannot_see(task):
    """Handling a benign call and escalating it score the same z; ν·R (an unnecessary cloud call costs -5) makes
    the training reward prefer handling, and ν = 0 is r_PF alone. A taxonomy failure keeps a decision out of
    rehearsal."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    benign = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    handled, escalated, refused = task.score([benign] * 3, ["handle", "escalate", "refuse"])
    assert handled.z == escalated.z and handled.verdict.reward > escalated.verdict.reward
    assert "UNNECESSARY_CLOUD_CALL" in escalated.failures and not handled.failures
    plain, weighted = SelectionSettings(reward_weight=0.0), SelectionSettings(reward_weight=0.1)
    for scored in (handled, escalated, refused):
        assert training_reward(plain, scored) == r_pf_of(plain, scored.z)
        assert training_reward(weighted, scored) == pytest.approx(r_pf_of(weighted, scored.z)
                                                                  + 0.1 * scored.verdict.reward)
    assert training_reward(weighted, handled) > training_reward(weighted, escalated)
    _, correct, other = failures([benign, benign], [handled, escalated], [(0.5, 0.5, 0.5, 1.0)] * 2, [(1.0,) * 4] * 2)
    assert [s.id for s, _ in correct] == [benign.id] and other == [benign.id]  # the escalation: not rehearsed


def test_the_reward_then_the_cost_break_exact_ties_of_z(task):
    """A harmful request escalated and vetoed by the cloud scores the same z as one refused on the device, and
    the same reward; the veto spends a cloud call: only the refusal stays on the front (on the front of z alone
    q* would weigh them alike, and the repair taught would be whichever the model proposed more often).
    Handling it, better on no dimension, is not on it. The reward comes before the cost: a request
    that needs the cloud, handled on the device, can score the same z as escalated and cost less, and the
    table's MISSED_CLOUD_ESCALATION keeps it off the front."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenarios = [s for s in suite.scenarios("train") if not s.ground_truth.tool_faults]
    tied, missed = [], []
    for scenario in scenarios:
        handled, escalated, refused = task.score([scenario] * 3, ["handle", "escalate", "refuse"])
        if scenario.ground_truth.unsafe and escalated.z == refused.z \
                and escalated.verdict.reward == refused.verdict.reward:
            tied.append((scenario, handled, escalated, refused))
        if handled.z == escalated.z and handled.cost < escalated.cost \
                and "MISSED_CLOUD_ESCALATION" in handled.failures:
            missed.append((scenario, handled, escalated, refused))
    assert tied and missed  # both ties are real in this world, not made up for the test
    settings_ = SelectionSettings(reward_weight=0.0)

    scenario, handled, escalated, refused = tied[0]
    assert escalated.cost > refused.cost
    failure = Failure(scenario, "handle", handled, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(settings_, s))
                  for s in (escalated, escalated, refused, handled)]  # the veto proposed twice as often
    picked = select(settings_, failure, candidates, random.Random(0))
    assert picked.q == pytest.approx([0.0, 0.0, 1.0, 0.0]) and picked.chosen.scored.decision == "refuse"
    assert picked.rule == "tie_break"
    # the veto the only repair proposed: the tie break has nothing to choose between
    assert select(settings_, failure, [candidates[0], candidates[3]], random.Random(0)).rule == "repair"

    scenario, handled, escalated, refused = missed[0]
    assert handled.verdict.reward < escalated.verdict.reward
    failure = Failure(scenario, "refuse", refused, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(settings_, s)) for s in (handled, escalated)]
    assert select(settings_, failure, candidates, random.Random(0)).q == pytest.approx(
        [0.0, 1.0])  # the reward first: the cheaper handling is left out
    assert task.score([scenario], [MALFORMED])[0].cost == math.inf
