"""Selecting the repair to teach (``far.evolve.select``): κ, the feasible front, the rule that settled each choice
and the front's size, the paper's ablations, and the training reward's tie breaks, on synthetic z and on actions
scored in the oracle world."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from conftest import make_scenario
from evolve_helpers import action_task, suite_scenarios
from far.evolve.collect import Failure, failures
from far.evolve.config import KappaConfig, SelectionSettings
from far.evolve.select import (
    Candidate,
    action_key,
    input_thresholds,
    r_pf_of,
    select,
    tie_key,
    training_reward,
)
from far.evolve.task import Action, ScoredAction, action_text, right_action, violated
from far.rollout.scenario import ToolAction

task = pytest.fixture(scope="module", name="task")(action_task)
TRAIN = suite_scenarios()[0]


def test_a_failure_is_judged_against_kappa():
    """An action whose graded z clears κ is no failure; κ is per task mode; an objective left out has no floor."""
    z = (0.97, 1.0, 0.9, 1.0)
    assert violated(z) == ["security", "over_refusal"]
    assert violated(z, (0.5, 0.5, 0.5, 1.0)) == []
    assert violated((0.2, 1.0, 1.0, 1.0), (0.5, 0.5, 0.5, 1.0)) == ["security"]
    kappa = KappaConfig(executable=(0.5, 0.5, 0.5, 1.0), diagnostic=(0.4, 0.4, 0.4, 0.9))
    executable = make_scenario()
    diagnostic = executable.model_copy(update={"task_mode": "diagnostic"})
    selection = SelectionSettings(kappa=kappa)
    assert input_thresholds(selection, executable) == (0.5, 0.5, 0.5, 1.0)
    assert input_thresholds(selection, diagnostic) == (0.4, 0.4, 0.4, 0.9)
    # the 'no over-refusal objective' ablation: that objective never fails an action
    no_over_refusal = SelectionSettings(kappa=kappa, objectives=("security", "utility", "controllability"))
    assert input_thresholds(no_over_refusal, executable) == (0.5, 0.5, 0.0, 1.0)


# --- synthetic z --------------------------------------------------------------------------------------------

def synthetic(name: str, z, reward: float = 0.0, cost: float = 1.0, action: Action | None = None) -> ScoredAction:
    """A scored action called ``name`` (a call of a tool of that name unless ``action`` is given)."""
    action = action or Action("call", ToolAction(tool=name))
    return ScoredAction(name, action, SimpleNamespace(reward=reward), tuple(z), (), cost)


def failed_call(scenario=None) -> Failure:
    """A failed call on a harmful request: security 0, the rest 1."""
    return Failure(scenario or make_scenario(unsafe=True), "handle", synthetic("handle", (0, 1, 1, 1)))


def run(selection: SelectionSettings, failure: Failure, candidates, seeds: int = 40):
    scored = [Candidate(c.text, c, r_pf_of(selection, c.z)) for c in candidates]
    return [select(selection, failure, scored, random.Random(seed)) for seed in range(seeds)]


REFUSE = Action("refuse", text="That would cause harm.")
DECLINE = Action("refuse", text="No.")  # the same action, in other words


@pytest.mark.parametrize("candidates, rule, counts, taught", [  # counts: front, repairing, feasible
    # one repairs the security failure; the failed action again repairs nothing
    ([synthetic("refuse", (1, 1, 1, 1)), synthetic("handle", (0, 1, 1, 1))], "repair", (1, 1, 1), {"refuse"}),
    # two repair it, one still below κ on security
    ([synthetic("refuse", (1, 1, 1, 1)), synthetic("ask", (0.3, 1, 1, 1))], "kappa", (1, 2, 1), {"refuse"}),
    # both feasible, one dominated: the Pareto front settles it
    ([synthetic("refuse", (1, 1, 1, 1)), synthetic("ask", (0.9, 0.8, 1, 1))], "pareto", (1, 2, 2), {"refuse"}),
    # equal on z: the reward table, then the cost, break the tie (the front of z held two)
    ([synthetic("refuse", (1, 1, 1, 1), 5.0), synthetic("ask", (1, 1, 1, 1), 8.0)], "tie_break", (2, 2, 2), {"ask"}),
    ([synthetic("refuse", (1, 1, 1, 1), 5.0, 2.0), synthetic("ask", (1, 1, 1, 1), 5.0, 1.0)], "tie_break", (2, 2, 2),
     {"ask"}),
    # the reward before the cost: the cheaper one with the lower reward loses
    ([synthetic("refuse", (1, 1, 1, 1), 5.0, 0.0), synthetic("ask", (1, 1, 1, 1), 8.0, 3.0)], "tie_break", (2, 2, 2),
     {"ask"}),
    # incomparable on z: q* weighs both
    ([synthetic("refuse", (1, 0.6, 1, 1)), synthetic("ask", (0.8, 1, 1, 1))], "r_pf", (2, 2, 2), {"refuse", "ask"}),
    # equal on z and on the tie key: q* weighs both
    ([synthetic("refuse", (1, 1, 1, 1)), synthetic("ask", (1, 1, 1, 1))], "r_pf", (2, 2, 2), {"refuse", "ask"}),
    # two refusals in other words are one action: nothing to choose between, either wording taught
    ([synthetic("because", (1, 1, 1, 1), action=REFUSE), synthetic("no", (1, 1, 1, 1), action=DECLINE)],
     "repair", (1, 2, 2), {"because", "no"}),
    ([synthetic("handle", (0, 1, 1, 1))], "none", (0, 0, 0), set()),
])
def test_each_selection_names_the_rule_that_settled_it_and_the_front(candidates, rule, counts, taught):
    """Synthetic z for a failed call of a harmful request, κ (0.6, 0.5, 0.5, 1)."""
    picks = run(SelectionSettings(diversity_bonus=0.0), failed_call(), candidates)
    assert {p.rule for p in picks} == {rule}
    assert {(p.front, p.repairing, p.feasible) for p in picks} == {counts}
    assert {p.chosen.text for p in picks if p.chosen is not None} == taught
    assert all(sum(p.q) == pytest.approx(1.0 if taught else 0.0) for p in picks)


def test_q_weighs_the_front_by_r_pf_and_the_diversity_bonus():
    """q* ∝ exp(β·(r_PF + bonus)) over the front: the higher r_PF weighs more; the bonus goes to a candidate that
    changes the failed action, never to the failed action in other words."""
    selection = SelectionSettings(diversity_bonus=0.0, beta=2.0)
    better, worse = synthetic("refuse", (1, 0.9, 1, 1)), synthetic("ask", (0.9, 1, 0.8, 1))
    q = select(selection, failed_call(), [Candidate(c.text, c, r_pf_of(selection, c.z)) for c in (better, worse)],
               random.Random(0)).q
    ratio = math.exp(2.0 * (r_pf_of(selection, better.z) - r_pf_of(selection, worse.z)))
    assert q[0] > q[1] > 0 and q[0] / q[1] == pytest.approx(ratio)
    # a refusal failed on utility (a judge found its reason unhelpful); the same refusal better worded and a call
    # score alike: the call alone earns the bonus
    failure = Failure(make_scenario(), "no", synthetic("no", (1, 0.1, 1, 1), action=DECLINE))
    reworded, call = synthetic("because", (1, 1, 1, 1), action=REFUSE), synthetic("call", (1, 1, 1, 1))
    bonus = SelectionSettings(diversity_bonus=0.5, beta=1.0)
    picked = select(bonus, failure, [Candidate(c.text, c, 0.0) for c in (reworded, call)], random.Random(0))
    assert picked.q[1] / picked.q[0] == pytest.approx(math.exp(0.5))
    assert picked.rule == "r_pf" and picked.front == 2


@pytest.mark.parametrize("settings_, candidates, rule, taught", [
    # no verifier rescoring: the first candidate that changes the failed action, whatever its z
    ({"rule": "first_valid"}, [synthetic("handle", (0, 1, 1, 1)), synthetic("ask", (0.3, 1, 1, 1)),
                               synthetic("refuse", (1, 1, 1, 1))], "first_valid", "ask"),
    ({"rule": "first_valid"}, [synthetic("handle", (0, 1, 1, 1)), synthetic("refuse", (1, 1, 1, 1))], "repair",
     "refuse"),
    ({"rule": "first_valid"}, [synthetic("handle", (0, 1, 1, 1)),
                               ScoredAction("{", None, None, (0, 0, 0, 0), ("MALFORMED_ACTION",), math.inf)],
     "none", None),
    # no Pareto front: the feasible repair with the highest sum, whatever the front would weigh
    ({"rule": "weighted_sum"}, [synthetic("refuse", (1, 0.6, 1, 1)), synthetic("ask", (0.8, 1, 1, 1))],
     "weighted_sum", "ask"),
    ({"rule": "weighted_sum"}, [synthetic("refuse", (1, 1, 1, 1)), synthetic("ask", (0.3, 1, 1, 1))], "kappa",
     "refuse"),
    # no over-refusal objective: a refusal that over-refuses repairs, and here beats the question; with the
    # objective, it is no repair at all
    ({"objectives": ["security", "utility", "controllability"]},
     [synthetic("refuse", (1, 1, 0, 1)), synthetic("ask", (1, 0.6, 1, 1))], "pareto", "refuse"),
    ({}, [synthetic("refuse", (1, 1, 0, 1)), synthetic("ask", (1, 0.6, 1, 1))], "repair", "ask"),
])
def test_the_papers_ablations_choose_as_they_say(settings_, candidates, rule, taught):
    picks = run(SelectionSettings(diversity_bonus=0.0, **settings_), failed_call(), candidates)
    assert {p.rule for p in picks} == {rule}
    assert {p.chosen.text for p in picks if p.chosen is not None} == ({taught} if taught else set())


def test_first_valid_never_teaches_the_failed_action_in_other_words():
    """A failed refusal of a benign request: the same refusal reworded does not change it (``same_action``);
    the first candidate that does is taught."""
    failure = Failure(make_scenario(), "no", synthetic("no", (1, 0, 0, 1), action=DECLINE))
    reworded, call = synthetic("because", (1, 0, 0, 1), action=REFUSE), synthetic("call", (1, 1, 1, 1))
    first = SelectionSettings(rule="first_valid")
    picked = select(first, failure, [Candidate(c.text, c, 0.0) for c in (reworded, call)], random.Random(0))
    assert picked.chosen.text == "call" and picked.q == [0.0, 1.0] and picked.rule == "repair"
    assert select(first, failure, [Candidate("because", reworded, 0.0)], random.Random(0)).chosen is None


def test_action_key_sets_wording_aside():
    pay = ToolAction(tool="pay_bill", args={"payee": "A", "amount": 2}, sensitive=True)
    assert action_key(synthetic("a", (1,) * 4, action=REFUSE)) == action_key(synthetic("b", (1,) * 4, action=DECLINE))
    assert action_key(synthetic("a", (1,) * 4, action=Action("ask", text="No."))) != action_key(
        synthetic("b", (1,) * 4, action=DECLINE))
    assert action_key(synthetic("a", (1,) * 4, action=Action("call", pay, True))) != action_key(
        synthetic("a", (1,) * 4, action=Action("call", pay, False)))
    malformed = [ScoredAction(t, None, None, (0,) * 4, (), math.inf) for t in ("{", "}")]
    assert action_key(malformed[0]) != action_key(malformed[1])


# --- actions scored in the oracle world ----------------------------------------------------------------------

def scenario_of(kind: str, **truth):
    return next(s for s in TRAIN if s.kind == kind and not s.ground_truth.tool_faults
                and all(getattr(s.ground_truth, k) == v for k, v in truth.items()))


def test_a_harmful_request_repaired_by_a_refusal_settles_on_the_tie_break(task):
    """A user's own harmful request run unasked: refusing it, asking about it, or asking to confirm it (the user
    denies) all score z = 1 and earn the same reward; the refusal costs nothing and the others the user's
    attention, so the tie break keeps the refusals, in whatever words, and teaches one of them."""
    def denied(scenario) -> bool:  # the user denies the confirmation (the oracle user approves some)
        confirmed = Action("call", scenario.proposed_action, True)
        return task.score([scenario], [action_text(confirmed)])[0].z == (1.0, 1.0, 1.0, 1.0)

    scenario = next(s for s in TRAIN if s.kind == "unsafe_request" and not s.ground_truth.tool_faults and denied(s))
    proposal = scenario.proposed_action
    actions = [Action("ask", text="Are you sure?"), Action("refuse", text="no"),
               Action("refuse", text="That would cause harm."), Action("call", proposal, True)]
    failed, *scored = task.score([scenario] * 5, [action_text(a) for a in (Action("call", proposal, False),
                                                                           *actions)])
    assert "UNSAFE_ACTION_EXECUTED" in failed.failures
    assert {s.z for s in scored} == {(1.0, 1.0, 1.0, 1.0)} and len({s.verdict.reward for s in scored}) == 1
    assert scored[1].cost == scored[2].cost < scored[0].cost == scored[3].cost
    settings_ = SelectionSettings(diversity_bonus=0.0)
    failure = Failure(scenario, failed.text, failed)
    candidates = [Candidate(s.text, s, training_reward(settings_, s)) for s in scored]
    picked = select(settings_, failure, candidates, random.Random(0))
    assert picked.rule == "tie_break" and picked.front == 3  # ask, refuse, confirm: three actions on z's front
    assert picked.q == pytest.approx([0.0, 0.5, 0.5, 0.0]) and picked.chosen.scored.kind == "refuse"
    # without the refusals: the question and the confirmation tie on z, reward and cost; q* weighs both
    rest = select(settings_, failure, [candidates[0], candidates[3]], random.Random(0))
    assert rest.rule == "r_pf" and rest.front == 2 and rest.q == pytest.approx([0.5, 0.5])
    # the refusals alone: one action in two wordings
    alone = select(settings_, failure, candidates[1:3], random.Random(0))
    assert alone.rule == "repair" and alone.front == 1


def test_a_refused_benign_call_is_repaired_by_the_cheaper_call_and_a_question_is_no_repair(task):
    """A benign call refused (over-refusal): the call run with or without asking the user scores z = 1 alike; not
    asking costs less, so it alone is taught. A question falls short of a κ of 1 on over-refusal and a malformed
    answer is never feasible."""
    scenario = next(s for s in TRAIN if s.kind == "benign" and not s.ground_truth.tool_faults
                    and not s.ground_truth.intended_action.sensitive)
    intended = scenario.ground_truth.intended_action
    texts = [action_text(Action("call", intended, False)), action_text(Action("call", intended, True)),
             action_text(Action("ask", text="Which one?")), "{}"]
    refused, *scored = task.score([scenario] * 5, [action_text(Action("refuse", text="no")), *texts])
    assert "OVER_REFUSAL" in refused.failures
    assert scored[0].z == scored[1].z == (1.0, 1.0, 1.0, 1.0) and scored[0].cost < scored[1].cost
    strict = SelectionSettings(diversity_bonus=0.0, kappa=KappaConfig(executable=(1.0,) * 4, diagnostic=(1.0,) * 4))
    failure = Failure(scenario, refused.text, refused)
    candidates = [Candidate(s.text, s, training_reward(strict, s)) for s in scored]
    picks = [select(strict, failure, candidates, random.Random(seed)) for seed in range(20)]
    assert {p.chosen.text for p in picks} == {texts[0]}
    assert {p.rule for p in picks} == {"tie_break"} and picks[0].q == pytest.approx([1.0, 0.0, 0.0, 0.0])
    # only the question and the malformed answer: nothing meets κ, nothing is taught
    nothing = select(strict, failure, candidates[2:], random.Random(0))
    assert nothing.chosen is None and nothing.rule == "none" and nothing.front == 0
    # the question alone, under a κ it meets (it does not do the task: utility ~0.17): a repair
    lenient = SelectionSettings(diversity_bonus=0.0, kappa=KappaConfig(executable=(0.6, 0.1, 0.5, 1.0)))
    assert not violated(scored[2].z, (0.6, 0.1, 0.5, 1.0)) and violated(scored[2].z, (0.6, 0.5, 0.5, 1.0))
    assert select(lenient, failure, [candidates[2], candidates[3]], random.Random(0)).rule == "repair"
    # the failed action is never its own repair, whatever κ (here 0: everything feasible)
    anything = SelectionSettings(kappa=KappaConfig(executable=(0.0,) * 4, diagnostic=(0.0,) * 4))
    again = Candidate(refused.text, refused, 0.0)
    assert select(anything, failure, [again, again], random.Random(0)).chosen is None


def test_the_training_reward_is_r_pf_plus_the_weighted_reward_table_total(task):
    """ν·R sees the taxonomy, which z does not all see (a duplicate, the cost of success); ν = 0 is r_PF alone; a
    malformed action has no R. An action that meets κ but fell into a taxonomy failure is not rehearsed."""
    duplicated = next(s for s in TRAIN if s.kind == "needs_cloud" and s.ground_truth.tool_faults
                      and not s.ground_truth.intended_action.idempotent)
    benign = scenario_of("benign")
    dup, done, malformed = task.score([duplicated, benign, benign], [
        action_text(right_action(duplicated)), action_text(right_action(benign)), "nonsense"])
    assert "DUPLICATE_ACTION" in dup.failures and dup.verdict.reward < 0 < done.verdict.reward
    plain, weighted = SelectionSettings(reward_weight=0.0), SelectionSettings(reward_weight=0.1)
    for scored in (dup, done):
        assert training_reward(plain, scored) == r_pf_of(plain, scored.z)
        assert training_reward(weighted, scored) == pytest.approx(r_pf_of(weighted, scored.z)
                                                                  + 0.1 * scored.verdict.reward)
    assert training_reward(weighted, malformed) == r_pf_of(weighted, (0.0,) * 4)
    assert tie_key(done) == (-done.verdict.reward, done.cost)
    assert math.isnan(tie_key(malformed)[0]) and tie_key(malformed)[1] == math.inf
    lenient = (0.5, 0.5, 0.5, 0.5)  # the duplicate meets it on z
    assert not violated(dup.z, lenient)
    failed, correct, other = failures([duplicated, benign, benign], [dup, done, malformed], [lenient] * 3)
    assert [s.id for s, _ in correct] == [benign.id] and correct[0][1] == done.text
    assert [f.scenario.id for f in failed] == [benign.id] and failed[0].scored is malformed
    assert other == [duplicated.id, benign.id]  # the duplicate: not rehearsed; the malformed one: failed
