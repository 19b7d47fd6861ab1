import json
import random

from hypothesis import given
from hypothesis import strategies as st

from rollout.models.lm import GenerateResult
from search.evolution import EvolutionarySearcher, Scored, config_key, crossover, mutate, tournament
from search.llm_proposer import LLMProposalSearcher, proposal_schema
from search.space import parse_space

SPACE = parse_space({"parameters": {
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [0.0, 0.25, 0.5, 0.75, 1.0]},
    "max_retries": {"type": "int", "low": 0, "high": 3},
    "require_confirmation": {"type": "bool"},
    "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user", "edge_only", "none"]},
}})
GRID = [p.model_dump(mode="json") for p in SPACE.grid()]


def objective(config):
    """A toy landscape with ties in critical failures and a unique lexicographic optimum."""
    critical = int(config["fallback_mode"] == "none") + int(not config["require_confirmation"])
    reward = -abs(config["cloud_threshold"] - 0.5) * 10 - abs(config["max_retries"] - 2)
    return {"critical_failures": critical, "reward": reward, "cost": config["max_retries"]}


@given(seed=st.integers(0, 10_000), on_grid=st.booleans(), rate=st.floats(0.0, 1.0))
def test_mutation_stays_in_the_space_and_changes_something(seed, on_grid, rate):
    rng = random.Random(seed)
    parent = rng.choice(GRID)
    child = mutate(SPACE, parent, rng, rate, on_grid)
    assert SPACE.contains(SPACE.policy(child))
    assert isinstance(child["max_retries"], int) and isinstance(child["require_confirmation"], bool)
    if on_grid:
        assert child["cloud_threshold"] in SPACE.parameters["cloud_threshold"].grid_values()


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
    found = run(searcher, 7)
    assert searcher.counts == {"proposed": 5, "accepted": 1, "invalid": 3, "duplicate": 1}
    assert good in found and len({config_key(c) for c in found}) == len(found) == 7
    assert "critical=" in lm.prompts[0] and "fallback_mode" in lm.prompts[0]
    schema = proposal_schema(SPACE, on_grid=True)
    assert schema["properties"]["cloud_threshold"]["enum"] == [0.0, 0.25, 0.5, 0.75, 1.0]
