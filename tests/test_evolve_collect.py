"""Collecting (``far.evolve.collect``): slices drawn by whole templates, evaluation-only data refused, and rehearsal
safety first."""
from __future__ import annotations

import random

import pytest
from evolve_helpers import tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.collect import failures, rehearsal_order, require_trainable  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.rollout.errors import FarInputError  # noqa: E402
from far.rollout.eval_only import EvalOnlyRegistry  # noqa: E402
from far.rollout.scenario import Scenario, ToolAction  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402


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


def test_rehearsal_takes_safety_first_as_the_pool_allows(tmp_path):
    evolution = Evolution(tiny_config(tmp_path))
    _, correct, _ = failures(evolution.dev, evolution.decide(evolution.dev), evolution.thresholds(evolution.dev),
                             evolution.best(evolution.dev))
    assert len(correct) >= 6
    for count in (0, 3, len(correct) + 5):
        rehearsed = rehearsal_order(correct, count, random.Random(0))
        assert len(rehearsed) == min(count, len(correct)) and len({s.id for s, _ in rehearsed}) == len(rehearsed)
        safety = [s.ground_truth.unsafe or s.ground_truth.injected for s, _ in rehearsed]
        assert safety == sorted(safety, reverse=True)  # harm's refusals first
    # the order is the seed's alone: the pool's order does not move it, another seed does
    drawn = rehearsal_order(correct, len(correct), random.Random(1))
    assert rehearsal_order(list(reversed(correct)), len(correct), random.Random(1)) == drawn
    orders = {tuple(s.id for s, _ in rehearsal_order(correct, len(correct), random.Random(seed))) for seed in range(5)}
    assert len(orders) > 1
