import json
import random

import pytest
from far.models.lm import GenerateResult
from far.search.ranking.rank import Constraints
from far.search.searchers.evolutionary import (
    EvolutionarySearcher,
    RandomSearcher,
    Scored,
    config_key,
    crossover,
    mutate,
    neighbours,
    tournament,
)
from far.search.searchers.llm_proposer import LLMProposalSearcher, proposal_schema
from far.search.searchers.space import parse_space
from hypothesis import given, settings
from hypothesis import strategies as st

SPACE = parse_space({"parameters": {
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [0.0, 0.25, 0.5, 0.75, 1.0]},
    "max_retries": {"type": "int", "low": 0, "high": 3},
    "require_confirmation": {"type": "bool"},
    "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user", "edge_only", "none"]},
}})
GRID = [{k: v for k, v in p.model_dump(mode="json").items() if k in SPACE.parameters} for p in SPACE.grid()]


def objective(config):
    """A toy landscape with ties in critical failures and a unique lexicographic optimum."""
    critical = int(config["fallback_mode"] == "none") + int(not config["require_confirmation"])
    reward = -abs(config["cloud_threshold"] - 0.5) * 10 - abs(config["max_retries"] - 2)
    return {"critical_failures": critical, "reward": reward, "cost": config["max_retries"]}


@given(seed=st.integers(0, 10_000), on_grid=st.booleans(), rate=st.floats(0.0, 1.0))
def test_mutation_stays_in_the_space(seed, on_grid, rate):
    rng = random.Random(seed)
    parent = rng.choice(GRID)
    child = mutate(SPACE, parent, rng, rate, on_grid)
    assert SPACE.contains(SPACE.policy(child))
    assert isinstance(child["max_retries"], int) and isinstance(child["require_confirmation"], bool)
    if on_grid:
        assert child["cloud_threshold"] in SPACE.parameters["cloud_threshold"].grid_values()


@pytest.mark.parametrize("on_grid", [True, False])
def test_mutation_mostly_changes_the_parent(on_grid):
    """A step clamped at a grid's end can leave a parameter where it was, so a child may equal its parent, but
    rarely: most mutations move."""
    rng = random.Random(0)
    parents = [rng.choice(GRID) for _ in range(400)]
    changed = sum(mutate(SPACE, parent, rng, 0.2, on_grid) != parent for parent in parents)
    assert changed >= 0.8 * len(parents)


def test_crossover_takes_each_parameter_from_a_parent():
    rng = random.Random(1)
    a, b = GRID[0], GRID[-1]
    for _ in range(50):
        child = crossover(SPACE, a, b, rng)
        assert all(child[k] in (a[k], b[k]) for k in a)


def test_tournament_selects_lexicographically_not_by_a_sum():
    safe_poor = Scored({"n": 1}, 0, -1000.0, 9.0)
    risky_rich = Scored({"n": 2}, 1, 1e9, 0.0)
    assert tournament([safe_poor, risky_rich], random.Random(0), size=50) is safe_poor


def run(searcher, budget):
    found = []
    for i in range(budget):
        config = searcher.suggest(str(i))
        if config is None or config == searcher.FINISHED:
            break
        found.append(config)
        searcher.on_trial_complete(str(i), objective(config))
    return found


def test_finds_the_optimum_without_repeats_and_finishes_when_the_grid_is_exhausted():
    searcher = EvolutionarySearcher(SPACE, population=8, seed=3)
    found = run(searcher, len(GRID) + 5)
    keys = [config_key(c) for c in found]
    assert len(keys) == len(set(keys)) == len(GRID)  # every point once, then FINISHED
    best = min(searcher.archive, key=lambda s: (s.critical_failures, -s.reward, s.cost))
    assert best.config == {"cloud_threshold": 0.5, "max_retries": 2, "require_confirmation": True,
                           "fallback_mode": best.config["fallback_mode"]}


def test_reaches_the_optimum_faster_than_exhaustive_on_average():
    hits = []
    for seed in range(5):
        searcher = EvolutionarySearcher(SPACE, population=8, seed=seed)
        for i, config in enumerate(run(searcher, len(GRID)), start=1):
            o = objective(config)
            if o["critical_failures"] == 0 and o["reward"] == 0 and o["cost"] == 2:
                hits.append(i)
                break
    assert sorted(hits)[2] < len(GRID) * 0.6


def test_save_and_restore_continue_identically(tmp_path):
    a = EvolutionarySearcher(SPACE, population=4, seed=9)
    run(a, 10)
    path = tmp_path / "state.json"
    a.save(str(path))
    json.loads(path.read_text())  # a plain JSON file
    b = EvolutionarySearcher(SPACE, population=4, seed=123)
    b.restore(str(path))
    assert [a.suggest(f"n{i}") for i in range(5)] == [b.suggest(f"n{i}") for i in range(5)]
    assert not list(tmp_path.glob("*.tmp"))


class ScriptedLM:
    """Answers proposal requests from a script (a test double for the LM protocol)."""

    model_id = "scripted@0"

    def __init__(self, answers):
        self.answers = list(answers)
        self.prompts = []

    def generate(self, requests):
        self.prompts += [r.messages[-1].content for r in requests]
        return [GenerateResult(text=self.answers.pop(0) if self.answers else "{}") for _ in requests]

    def score(self, requests):
        raise AssertionError("not used")


def test_llm_proposals_are_validated_counted_and_replaced():
    good = {"cloud_threshold": 0.5, "max_retries": 2, "require_confirmation": True, "fallback_mode": "ask_user"}
    answers = ["not json", json.dumps({**good, "cloud_threshold": 0.33}),  # invalid: off the grid
               json.dumps({**good, "max_retries": 9}),  # invalid: outside the space
               json.dumps(good), json.dumps(good)]  # accepted, then a duplicate
    lm = ScriptedLM(answers)
    searcher = LLMProposalSearcher(SPACE, lm, warmup=2, population=4, seed=0)
    found = run(searcher, 9)  # generation 0 (4 random points), then one proposal per suggestion
    counts = searcher.counts  # the scripted answers, then "{}" (invalid) once the script runs out
    assert counts["proposed"] == len(lm.prompts) >= 5
    assert (counts["accepted"], counts["duplicate"], counts["invalid"]) == (1, 1, counts["proposed"] - 2)
    assert good in found and len({config_key(c) for c in found}) == len(found) == 9
    assert "critical=" in lm.prompts[0] and "fallback_mode" in lm.prompts[0]
    schema = proposal_schema(SPACE, on_grid=True)
    assert schema["properties"]["cloud_threshold"]["enum"] == [0.0, 0.25, 0.5, 0.75, 1.0]


def run_concurrently(searcher, budget, concurrency, order_seed):
    """Suggest while fewer than ``concurrency`` trials run; complete running trials in a random order (as a
    cluster would); returns the suggestions in suggestion order."""
    rng = random.Random(order_seed)
    running, found, number = [], [], 0
    while len(found) < budget:
        while len(running) < concurrency and len(found) < budget:
            config = searcher.suggest(f"t{number}")
            if config is None:
                break  # waits for the running generation
            if config == searcher.FINISHED:
                return found
            running.append((f"t{number}", config))
            found.append(config)
            number += 1
        if not running:
            break
        trial_id, config = running.pop(rng.randrange(len(running)))
        searcher.on_trial_complete(trial_id, objective(config))
    return found


@settings(max_examples=40, deadline=None)
@given(concurrency=st.integers(1, 6), order_seed=st.integers(0, 1000), seed=st.integers(0, 50))
def test_the_same_seed_gives_the_same_trials_whatever_the_concurrency_and_completion_order(concurrency, order_seed,
                                                                                          seed):
    reference = run(EvolutionarySearcher(SPACE, population=6, seed=seed, local_search=0.5), 30)
    shuffled = run_concurrently(EvolutionarySearcher(SPACE, population=6, seed=seed, local_search=0.5), 30,
                                concurrency, order_seed)
    assert shuffled == reference


def test_a_generation_waits_for_the_one_before():
    searcher = EvolutionarySearcher(SPACE, population=3, seed=0)
    first = [searcher.suggest(f"t{i}") for i in range(3)]
    assert all(isinstance(c, dict) for c in first)
    assert searcher.suggest("t3") is None  # generation 0 still running
    for i, config in enumerate(first[:2]):
        searcher.on_trial_complete(f"t{i}", objective(config))
    assert searcher.suggest("t3") is None
    searcher.on_trial_complete("t2", error=True)  # a failed trial ends its generation too
    assert isinstance(searcher.suggest("t3"), dict)


def test_local_search_tries_the_best_parents_neighbours_first():
    searcher = EvolutionarySearcher(SPACE, population=4, seed=1, local_search=0.5)
    found = run(searcher, 4)
    best = min(searcher.archive, key=lambda s: (s.critical_failures, -s.reward, s.cost))
    following = run(searcher, 2)  # continue: suggestions 4 and 5 are the local-search share of generation 1
    near = [config_key(c) for c in neighbours(SPACE, best.config)]
    assert all(config_key(c) in near for c in following) and len(found) == 4


def test_neighbours_are_one_step_in_one_parameter():
    config = {"cloud_threshold": 0.0, "max_retries": 2, "require_confirmation": True, "fallback_mode": "none"}
    around = neighbours(SPACE, config)
    assert {"cloud_threshold": 0.25, "max_retries": 2, "require_confirmation": True, "fallback_mode": "none"} in around
    assert len(around) == 1 + 2 + 1 + 3  # threshold up only (at the edge), retries ±1, flip, three other modes
    assert all(sum(c[k] != config[k] for k in config) == 1 for c in around)


@pytest.mark.parametrize("on_grid", [True, False])
def test_random_search_never_repeats_and_covers_the_grid(on_grid):
    searcher = RandomSearcher(SPACE, seed=4, on_grid=on_grid)
    found = []
    for i in range(len(GRID) + 3):
        config = searcher.suggest(str(i))
        if config == searcher.FINISHED:
            break
        found.append(config_key(config))
    assert len(found) == len(set(found))
    if on_grid:
        assert sorted(found) == sorted(config_key(c) for c in GRID)
    again = RandomSearcher(SPACE, seed=4, on_grid=on_grid)
    assert [config_key(again.suggest(str(i))) for i in range(10)] == found[:10]


def test_selection_respects_the_cost_limit():
    cheap_risky = Scored({"n": 1}, 3, 10.0, 1.0, mean_cost=0.5)
    safe_costly = Scored({"n": 2}, 0, 50.0, 9.0, mean_cost=1.5)
    assert tournament([cheap_risky, safe_costly], random.Random(0), 50, Constraints(max_mean_cost=0.8)) is cheap_risky
    assert tournament([cheap_risky, safe_costly], random.Random(0), 50) is safe_costly


def test_an_llm_proposal_is_read_as_the_policys_typed_values():
    searcher = LLMProposalSearcher(SPACE, ScriptedLM([]), population=4)
    written = '{"cloud_threshold": 1, "max_retries": 2, "require_confirmation": true, "fallback_mode": "none"}'
    parsed = searcher.parse(written)
    assert parsed is not None and isinstance(parsed["cloud_threshold"], float)
    assert config_key(parsed) == config_key({**json.loads(written), "cloud_threshold": 1.0})
