"""The ranking rule, in one place.

Policies compare lexicographically on (critical failures ascending, total reward descending, cost
ascending): fewer critical failures always wins; reward only breaks ties in critical failures; cost only
breaks ties in both. NaN is worse than any number (including the worst infinity) and ties with NaN;
±inf order as usual (reward +inf is best, cost +inf is worst).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar


class Rankable(Protocol):
    @property
    def critical_failures(self) -> float: ...

    @property
    def reward(self) -> float: ...

    @property
    def cost(self) -> float: ...


T = TypeVar("T", bound=Rankable)


def _ascending(value: float) -> tuple[int, float]:
    """Sort key for a minimised quantity: NaN after everything, ties among NaNs."""
    value = float(value)
    return (1, 0.0) if math.isnan(value) else (0, value)


def rank_key(result: Rankable) -> tuple[tuple[int, float], tuple[int, float], tuple[int, float]]:
    """Smaller key = better policy."""
    reward = float(result.reward)
    return (
        _ascending(result.critical_failures),
        _ascending(-reward if not math.isnan(reward) else reward),
        _ascending(result.cost),
    )


def compare(a: Rankable, b: Rankable) -> int:
    """-1 if ``a`` ranks better than ``b``, 1 if worse, 0 if they tie on all three keys."""
    key_a, key_b = rank_key(a), rank_key(b)
    return -1 if key_a < key_b else (1 if key_a > key_b else 0)


def rank(results: Iterable[T]) -> list[T]:
    """Best first; ties keep their input order (stable)."""
    return sorted(results, key=rank_key)


def best(results: Sequence[T]) -> T:
    if not results:
        raise ValueError("no results to rank")
    return rank(results)[0]
