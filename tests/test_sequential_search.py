"""A searcher driven one trial at a time (``far.search.searchers.sequential``): the budget, the searcher's end,
what the searcher is told, and the winner by ``far.search.ranking.rank``."""
from __future__ import annotations

import pytest
from conftest import oracle_models
from far.models.backends import ModelsConfig
from far.search.jobs.assemble import build_evaluator
from far.search.jobs.config import RunConfig
from far.search.ranking.rank import rank
from far.search.searchers.evolutionary import EvolutionarySearcher, config_key
from far.search.searchers.sequential import evolutionary_winner, search_in_turn, selection_view
from far.search.searchers.space import parse_space
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

SPACE = parse_space({"parameters": {
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [0.0, 0.5, 1.0]},
    "require_confirmation": {"type": "bool"},
}})


@pytest.fixture(scope="module")
def evaluator():
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=5, size=120))
    return build_evaluator(RunConfig(models=ModelsConfig.model_validate(oracle_models())), suite=suite)


def test_the_budget_bounds_the_trials_and_each_is_told_to_the_searcher(evaluator) -> None:
    searcher = EvolutionarySearcher(SPACE, population=2, seed=0)
    seen = []

    def evaluate(trial, config):
        seen.append((trial, config_key(config)))
        return evaluator.evaluate(trial, SPACE.policy(config), "train").result

    results = search_in_turn(searcher, evaluate, budget=4)
    assert [trial for trial, _ in seen] == ["0", "1", "2", "3"] and len(results) == 4
    assert len({key for _, key in seen}) == 4  # never a policy twice
    assert [s.reward for s in searcher.archive] == [r.reward for r in results]  # told in trial order
    assert selection_view(results[0])["critical_failures"] == results[0].critical_failures


def test_the_search_stops_when_the_searcher_exhausts_the_grid(evaluator) -> None:
    searcher = EvolutionarySearcher(SPACE, population=2, seed=1)
    results = search_in_turn(searcher, lambda trial, config: evaluator.evaluate(
        trial, SPACE.policy(config), "train").result, budget=50)
    assert len(results) == SPACE.grid_size() == 6


def test_the_winner_is_rank_s_first_of_the_evaluations_made(evaluator) -> None:
    winner, evaluations = evolutionary_winner(evaluator, SPACE, seed=0, budget=5, population=2)
    assert evaluations == 5
    again = search_in_turn(EvolutionarySearcher(SPACE, population=2, seed=0), lambda trial, config: evaluator.evaluate(
        trial, SPACE.policy(config), "train").result, budget=5)
    assert winner == rank(again)[0]  # same seed, same trials, same winner
    with pytest.raises(ValueError, match="budget"):
        evolutionary_winner(evaluator, SPACE, seed=0, budget=0)
