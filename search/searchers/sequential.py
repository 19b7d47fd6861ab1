"""A searcher driven one trial at a time in this process, without Tune or rollout actors: a policy search as a
baseline beside another method, on an evaluator already built (``far.search.evaluation.evaluate``).

``search_in_turn`` suggests, evaluates and completes trials in order until the budget is spent or the searcher
finishes; ``evolutionary_winner`` runs FAR's evolutionary searcher that way on the train split and returns its
winner by ``far.search.ranking.rank``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from far.search.evaluation.results import PolicyResult
from far.search.ranking.rank import rank
from far.search.searchers.evolutionary import Config, EvolutionarySearcher
from far.search.searchers.space import PolicySpace
from ray.tune.search import Searcher


def selection_view(result: PolicyResult) -> dict[str, Any]:
    """What a searcher's selection reads of a completed trial (``far.search.searchers.evolutionary.Scored``)."""
    return {"critical_failures": result.critical_failures, "reward": result.reward, "cost": result.cost,
            "mean_cost": result.mean_cost, "over_refusal_rate": result.over_refusal_rate,
            "benign_success_rate": result.benign_success_rate}


def search_in_turn(searcher: Searcher, evaluate: Callable[[str, Config], PolicyResult],
                   budget: int) -> list[PolicyResult]:
    """At most ``budget`` trials, one at a time: ``searcher`` suggests a policy's parameters, ``evaluate`` scores
    them (given the trial's id, its number), the searcher is told; stops early when the searcher finishes (its grid
    exhausted). The results, in trial order."""
    results: list[PolicyResult] = []
    for number in range(budget):
        config = searcher.suggest(str(number))
        if config is None or config == Searcher.FINISHED:
            break
        result = evaluate(str(number), config)
        searcher.on_trial_complete(str(number), selection_view(result))
        results.append(result)
    return results


def evolutionary_winner(evaluator: Any, space: PolicySpace, seed: int, budget: int,
                        population: int = 8) -> tuple[PolicyResult, int]:
    """FAR's evolutionary policy search over ``space``, ``budget`` policy evaluations on ``evaluator``'s train
    split: its winner (``far.search.ranking.rank``: fewest critical failures, then reward, then cost) and the
    number of evaluations made."""
    if budget < 1:
        raise ValueError(f"a search needs at least one evaluation, got a budget of {budget}")
    searcher = EvolutionarySearcher(space, population=population, seed=seed)
    results = search_in_turn(
        searcher, lambda trial, config: evaluator.evaluate(trial, space.policy(config), "train").result, budget)
    return rank(results)[0], len(results)
