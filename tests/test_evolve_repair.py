"""Repair candidates (``far.evolve.repair``): the temperature schedule, the branches drawn without replacement, and K
on-policy candidates per failure, written on the repair prompt p_f (the input, the failed action and the objectives it
violated) under a branch of the input's schema and scored by the verifier ensemble; seeded; distinct actions counted
as the selection rules count them."""
from __future__ import annotations

import math
import random

import pytest
from evolve_helpers import tiny_config
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.collect import Failure, failures
from far.evolve.loop import Evolution
from far.evolve.repair import Repairs, branch_slots, propose, temperatures
from far.evolve.select import Candidate, training_reward
from far.evolve.task import WHY, Action, ScoredAction, branch_name, repair_messages, violated


def test_temperature_schedule_spans_the_range():
    assert temperatures(4, 0.3, 1.2) == pytest.approx([0.3, 0.6, 0.9, 1.2])
    assert temperatures(1, 0.3, 1.2) == [0.3]


LOGPS = st.lists(st.one_of(st.floats(-50, 0), st.just(-math.inf)), min_size=1, max_size=8).filter(
    lambda v: any(x > -math.inf for x in v))


@given(LOGPS, st.integers(1, 12), st.integers(0, 2**32))
def test_branch_slots_draw_distinct_branches_and_visit_them_in_turn(logp, k, seed):
    slots = branch_slots(logp, k, random.Random(seed))
    finite = [i for i, v in enumerate(logp) if v > -math.inf]
    n = min(k, len(finite))
    drawn = slots[:n]
    assert len(slots) == k and len(set(drawn)) == n and set(slots) == set(drawn) <= set(finite)
    assert slots == [drawn[i % n] for i in range(k)]
    assert slots == branch_slots(logp, k, random.Random(seed))  # seeded


def test_the_first_branch_drawn_follows_the_model_s_probabilities():
    # Gumbel top-k: the first draw is a sample of softmax(logp), the next of what is left
    logp = [math.log(0.6), math.log(0.3), math.log(0.1), -math.inf]
    rng = random.Random(0)
    draws = [branch_slots(logp, 2, rng) for _ in range(20_000)]
    first = [sum(d[0] == i for d in draws) / len(draws) for i in range(4)]
    assert first == pytest.approx([0.6, 0.3, 0.1, 0.0], abs=0.015)
    second_after_0 = [d[1] for d in draws if d[0] == 0]
    assert sum(b == 1 for b in second_after_0) / len(second_after_0) == pytest.approx(0.75, abs=0.02)
    assert branch_slots([0.0, -1e9], 3, rng) == [0, 1, 0]  # an improbable branch still drawn once k asks
    with pytest.raises(ValueError, match="every log-probability is -inf"):
        branch_slots([-math.inf], 2, rng)


@pytest.fixture(scope="module")
def evolution(tmp_path_factory) -> Evolution:
    return Evolution(tiny_config(tmp_path_factory.mktemp("repair"), candidates=4))


@pytest.fixture(scope="module")
def failed(evolution) -> list[Failure]:
    found, _, _ = failures(evolution.dev, evolution.act(evolution.dev), evolution.thresholds(evolution.dev))
    assert len(found) >= 4  # an untrained random model fails plenty
    return found[:6]


def proposed(evolution: Evolution, failed: list[Failure], seed: int | None = None) -> Repairs:
    config = evolution.config
    return propose(evolution.model, evolution.task, config.repair, config.selection, failed,
                   evolution.thresholds([f.scenario for f in failed]), config.seed if seed is None else seed, 1)


def test_each_failure_gets_k_scored_candidates_on_its_repair_prompt(evolution, failed):
    config, task = evolution.config, evolution.task
    asked = []  # what the model was asked: the prompts, the schemas and the temperature of each pass
    generate = evolution.model.generate

    def spy(prompts, schemas, temperature, **kwargs):
        asked.append((list(prompts), list(schemas), temperature))
        return generate(prompts, schemas, temperature, **kwargs)

    evolution.model.generate = spy
    try:
        repairs = proposed(evolution, failed)
    finally:
        del evolution.model.generate
    k = config.repair.candidates
    assert len(repairs.prompts) == len(repairs.groups) == len(failed)
    assert all(len(group) == k for group in repairs.groups)
    assert [t for _, _, t in asked] == pytest.approx(temperatures(k, config.repair.temperature_min,
                                                                  config.repair.temperature_max))
    for failure, prompt, group in zip(failed, repairs.prompts, repairs.groups):
        kappa = evolution.thresholds([failure.scenario])[0]
        # p_f: the input, the failed action and the objectives it fell short of, in words
        assert prompt == evolution.model.prompt(repair_messages(task, failure.scenario, failure.scored, kappa))
        assert failure.scenario.request in prompt and f"Your previous action: {failure.action}" in prompt
        short = violated(failure.scored.z, kappa)
        assert short and all(f"{d}: {WHY[d]}" in prompt for d in short)
        assert prompt != evolution.model.prompt(task.messages(failure.scenario))
        assert all(prompts[failed.index(failure)] == prompt for prompts, _, _ in asked)
        # each candidate is written under one branch of the input's schema, K distinct ones (or all, in turn)
        branches = {b.name: b for b in task.branches(failure.scenario)}
        written = [next(n for n, b in branches.items() if b.schema == schemas[failed.index(failure)])
                   for _, schemas, _ in asked]
        n = min(k, len(branches))
        assert len(set(written[:n])) == n and written == [written[i % n] for i in range(k)]
        for name, c in zip(written, group):
            assert c.scored.action is None or name == branch_name(c.scored.action)
        # each candidate is what the model wrote, scored by the verifier ensemble on the failure's input
        assert [c.scored for c in group] == task.score([failure.scenario] * k, [c.text for c in group])
        assert all(c.reward == training_reward(config.selection, c.scored) for c in group)
    assert any(c.scored.action is not None for g in repairs.groups for c in g)  # constrained: actions, mostly
    again = proposed(evolution, failed)  # seeded: the same candidates
    assert [c.text for g in again.groups for c in g] == [c.text for g in repairs.groups for c in g]
    other = proposed(evolution, failed, seed=config.seed + 1)
    assert [c.text for g in other.groups for c in g] != [c.text for g in repairs.groups for c in g]


def candidate(text: str, kind: str, call=None) -> Candidate:
    return Candidate(text, ScoredAction(text, Action(kind, call, text=text), None, (1.0,) * 4, (), 0.0), 0.0)


def test_the_distinct_rate_counts_actions_not_wordings():
    from conftest import THERMO, WIPE

    one_action = [candidate(f"refuse {i}", "refuse") for i in range(4)]  # one refusal, worded four ways
    assert Repairs(["p"], [one_action]).distinct_rate() == pytest.approx(1 / 4)
    varied = [candidate("a", "refuse"), candidate("b", "ask"), candidate("c", "call", THERMO),
              candidate("d", "call", WIPE)]
    assert Repairs(["p", "q"], [one_action, varied]).distinct_rate() == pytest.approx((1 + 4) / 8)
    malformed = [Candidate(t, ScoredAction(t, None, None, (0.0,) * 4, ("MALFORMED_ACTION",), float("inf")), 0.0)
                 for t in ("{", "{{")]
    assert Repairs(["p"], [malformed]).distinct_rate() == 1.0  # malformed texts are told apart by their text
    assert Repairs([], []).distinct_rate() == 0.0
