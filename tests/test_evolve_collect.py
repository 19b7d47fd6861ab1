"""Collecting (``far.evolve.collect``): slices drawn by whole templates, dev and check apart and the holdout sample by
its own seed, evaluation-only data refused, failures f = (x, a, z) below κ, and rehearsal safety first."""
from __future__ import annotations

import random

import pytest
from evolve_helpers import action_task, harmful, suite_scenarios, tiny_config
from far.evolve.collect import Failure, draw_slices, failures, rehearsal_order, require_trainable
from far.evolve.select import input_thresholds
from far.evolve.task import Action, ScoredAction, action_text, right_action
from far.rollout.errors import FarInputError
from far.rollout.eval_only import EvalOnlyRegistry
from far.rollout.scenario import Scenario, ToolAction
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from hypothesis import given, settings
from hypothesis import strategies as st

task = pytest.fixture(scope="module", name="task")(action_task)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcdefg"), max_size=30), st.integers(0, 35), st.integers(0, 9))
def test_a_slice_drawn_by_template_takes_whole_templates_up_to_its_size(groups, size, seed):
    """Every template drawn is taken whole, but the last one when the size cuts it; the size is reached when
    the pool allows; the draw is a function of the seed."""
    from far.evolve.collect import whole_templates

    pool = [Scenario(id=f"s{i}", suite="t", category="c", kind="benign", task_mode="executable", split="train",
                     request="r", proposed_action=ToolAction(tool="t"), group=g) for i, g in enumerate(groups)]
    drawn = whole_templates(pool, size, random.Random(seed))
    assert len(drawn) == min(size, len(pool)) and len({s.id for s in drawn}) == len(drawn)
    taken = list(dict.fromkeys(s.group for s in drawn))
    for g in taken[:-1]:  # whole, but the last
        assert sum(s.group == g for s in drawn) == groups.count(g)
    assert drawn == whole_templates(pool, size, random.Random(seed))


def test_dev_and_check_share_no_template_and_the_holdout_sample_has_its_own_seed(tmp_path):
    """The check slice (the gate's judge) is written from templates dev never taught; the holdout sample does not
    move when train is sliced otherwise, and moves with the seed."""
    train, holdout = suite_scenarios(size=200, seed=3)
    config = tiny_config(tmp_path, dev_size=20, check_size=30)
    slices = draw_slices(config, train, holdout)
    assert len(slices.dev) == 20 and len(slices.check) == 30 and len(slices.holdout) == 16
    assert not {s.group_key for s in slices.dev} & {s.group_key for s in slices.check}
    assert all(s.split == "train" for s in slices.dev + slices.check)
    assert all(s.split == "holdout" for s in slices.holdout)
    other = draw_slices(tiny_config(tmp_path, dev_size=30, check_size=20), train, holdout)
    assert other.holdout == slices.holdout and other.dev != slices.dev
    reseeded = draw_slices(tiny_config(tmp_path, dev_size=20, check_size=30, seed=1), train, holdout)
    assert reseeded.holdout != slices.holdout and reseeded.dev != slices.dev
    assert draw_slices(config, train, holdout) == slices  # seeded


def test_evaluation_only_data_is_refused():
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=200, seed=4))
    require_trainable(list(suite.scenarios("train")))
    with pytest.raises(FarInputError, match="holdout"):
        require_trainable([suite.scenarios("holdout")[0]])
    flagged = suite.scenarios("train")[0].model_copy(update={"eval_only": True})
    with pytest.raises(FarInputError, match="1 evaluation-only"):
        require_trainable([flagged])
    # known by content: a copy under another id and suite name, with the mark stripped, is refused too
    known = suite.scenarios("train")[1]
    EvalOnlyRegistry().add([known], source="test")
    renamed = known.model_copy(update={"id": "renamed-1", "suite": "innocent-name", "category": "other"})
    with pytest.raises(FarInputError, match="evaluation-only"):
        require_trainable([renamed])


def scored_by_hand(text: str, z: tuple[float, ...], found: tuple[str, ...] = (), done: bool = True) -> ScoredAction:
    from far.verifiers.taxonomy import SuccessKind
    from far.verifiers.verdict import Verdict, ZVector

    verdict = Verdict((), (SuccessKind.TASK_SUCCESS,) if done else (), 0.0, ZVector(*z))
    return ScoredAction(text, Action("ask", text=text), verdict, z, found, 1.0)


def test_failures_are_the_actions_below_kappa_and_correct_ones_met_it_with_no_taxonomy_failure():
    train, _ = suite_scenarios()
    executable = [s for s in train if s.task_mode == "executable"][:4]
    selection = tiny_config(".").selection
    kappa = [input_thresholds(selection, s) for s in executable]
    assert kappa[0] == tuple(selection.kappa.executable)
    scored = [scored_by_hand("low security", (0.0, 1.0, 1.0, 1.0)),
              scored_by_hand("all met", (1.0, 1.0, 1.0, 1.0)),
              scored_by_hand("met, but a failure z does not see", (1.0, 1.0, 1.0, 1.0), ("UNNECESSARY_CLOUD_CALL",)),
              scored_by_hand("just below control", (1.0, 1.0, 1.0, 0.99)),
              scored_by_hand("met, but the task not done", (1.0, 0.25, 1.0, 1.0), done=False)]
    executable = [s for s in train if s.task_mode == "executable"][:5]
    kappa = [input_thresholds(selection, s) for s in executable]
    failed, correct, other = failures(executable, scored, kappa)
    assert [(f.scenario, f.action, f.scored) for f in failed] == [(executable[0], "low security", scored[0]),
                                                                  (executable[3], "just below control", scored[3])]
    assert all(isinstance(f, Failure) for f in failed)
    assert correct == [(executable[1], "all met")]
    # no longer rehearsed as correct: failed, a failure z does not see, or a partial call (right tool, some
    # arguments wrong: it meets utility's floor as a repair, and is no example of the task done)
    assert other == [executable[0].id, executable[2].id, executable[3].id, executable[4].id]
    # the same z meets a lower floor: κ decides, not a fixed bar
    failed, correct, _ = failures(executable[3:4], scored[3:4], [(0.5, 0.5, 0.5, 0.5)])
    assert not failed and correct == [(executable[3], "just below control")]
    with pytest.raises(ValueError):
        failures(executable, scored[:2], kappa)


def test_rehearsal_takes_safety_first_as_the_pool_allows(task):
    """The pool: the right actions on train inputs that meet κ with no taxonomy failure (what a round rehearses)."""
    train, _ = suite_scenarios()
    inputs = train[:80]
    scored = task.score(inputs, [action_text(right_action(s)) for s in inputs])
    selection = tiny_config(".").selection
    _, correct, _ = failures(inputs, scored, [input_thresholds(selection, s) for s in inputs])
    assert sum(harmful(s) for s, _ in correct) >= 3 and sum(not harmful(s) for s, _ in correct) >= 3
    for count in (0, 3, len(correct) + 5):
        rehearsed = rehearsal_order(correct, count, random.Random(0))
        assert len(rehearsed) == min(count, len(correct)) and len({s.id for s, _ in rehearsed}) == len(rehearsed)
        safety = [harmful(s) for s, _ in rehearsed]
        assert safety == sorted(safety, reverse=True)  # harm's refusals first
    few = sum(harmful(s) for s, _ in correct) - 1
    assert all(harmful(s) for s, _ in rehearsal_order(correct, few, random.Random(2)))
    # the order is the seed's alone: the pool's order does not move it, another seed does
    drawn = rehearsal_order(correct, len(correct), random.Random(1))
    assert rehearsal_order(list(reversed(correct)), len(correct), random.Random(1)) == drawn
    orders = {tuple(s.id for s, _ in rehearsal_order(correct, len(correct), random.Random(seed))) for seed in range(5)}
    assert len(orders) > 1
