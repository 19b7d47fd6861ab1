"""The ranking rule, in one place: lexicographic order under the gate's hard limits (Deb's constraint-domination).

``rank_key(result, constraints)`` orders policies so that
1. a policy within the hard limits beats one outside them (the limits are the gate's other than the critical
   count: the cost per scenario ``max_mean_cost``, the benign over-refusal rate ``max_over_refusal_rate`` and
   the benign success rate ``min_benign_success_rate`` -- so a policy that refuses everything is never
   preferred to a useful one, however few critical failures it has);
2. among policies outside, the smaller normalised violation comes first (``constraint_violation``);
3. then -- both within, or equally far outside -- fewer critical failures, then more reward, then less cost.
NaN is worse than any number and ties with NaN; ±inf order as usual (reward +inf is best, cost +inf is worst);
a NaN or +inf cost per scenario is infinitely far outside a cost limit. With no limits this is the plain
lexicographic rule (critical, reward, cost).

Every place that chooses a policy uses it: Tune's metric (``tune_score``), the evolutionary and LLM searchers'
selection and prompts, the top-k, the leaderboard and the winner.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


class Rankable(Protocol):
    @property
    def critical_failures(self) -> float: ...

    @property
    def reward(self) -> float: ...

    @property
    def cost(self) -> float: ...

    @property
    def mean_cost(self) -> float: ...

    @property
    def over_refusal_rate(self) -> float: ...  # benign rollouts refused / benign rollouts (NaN: none)

    @property
    def benign_success_rate(self) -> float: ...  # benign rollouts whose task was done / benign rollouts


T = TypeVar("T", bound=Rankable)
Key = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Constraints:
    """The hard limits a policy should stay within; ``None`` = no limit."""

    max_mean_cost: float | None = None
    max_over_refusal_rate: float | None = None
    min_benign_success_rate: float | None = None

    @classmethod
    def from_gate(cls, gate: Any) -> "Constraints":
        """The gate's limits other than the critical count (a ``far.search.ranking.gate.GateConfig``)."""
        return cls(max_mean_cost=gate.max_mean_cost, max_over_refusal_rate=gate.max_over_refusal_rate,
                   min_benign_success_rate=gate.min_benign_success_rate)


NO_CONSTRAINTS = Constraints()
# the rule as the console states it
RANKING_WORDS = ("within the gate's limits -- cost, over-refusal, benign success -- first, then critical failures, "
                 "reward, cost")


def violation_of(value: float, limit: float | None) -> float:
    """How far ``value`` exceeds an upper ``limit``, relative to the limit: max(0, value - limit) / limit
    (absolute when the limit is 0). No limit: 0. A NaN value: +inf (unknown is not within)."""
    if limit is None:
        return 0.0
    value = float(value)
    if math.isnan(value):
        return math.inf
    excess = max(0.0, value - limit)
    return excess / limit if limit > 0 else excess


def shortfall_of(value: float, floor: float | None) -> float:
    """How far ``value`` falls short of a lower ``floor``, relative to the floor: max(0, floor - value) / floor
    (absolute when the floor is 0). No floor: 0. A NaN value: +inf (unknown is not within)."""
    if floor is None:
        return 0.0
    value = float(value)
    if math.isnan(value):
        return math.inf
    short = max(0.0, floor - value)
    return short / floor if floor > 0 else short


def constraint_violation(result: Rankable, constraints: Constraints = NO_CONSTRAINTS) -> float:
    """The normalised violation of all limits: the sum of ``violation_of`` (cost, over-refusal) and
    ``shortfall_of`` (benign success) over them; 0 = within every one. A limit that is set reads its quantity
    from the result; one that is not is never read."""
    total = violation_of(result.mean_cost, constraints.max_mean_cost)
    if constraints.max_over_refusal_rate is not None:
        total += violation_of(result.over_refusal_rate, constraints.max_over_refusal_rate)
    if constraints.min_benign_success_rate is not None:
        total += shortfall_of(result.benign_success_rate, constraints.min_benign_success_rate)
    return total


def is_feasible(result: Rankable, constraints: Constraints = NO_CONSTRAINTS) -> bool:
    """Within every hard limit."""
    return constraint_violation(result, constraints) == 0.0


def _ascending(value: float) -> tuple[int, float]:
    """Sort key for a minimised quantity: NaN after everything, ties among NaNs."""
    value = float(value)
    return (1, 0.0) if math.isnan(value) else (0, value)


def rank_key(result: Rankable, constraints: Constraints = NO_CONSTRAINTS) -> Key:
    """Smaller key = better policy (the module docstring's rule)."""
    reward = float(result.reward)
    return (
        _ascending(constraint_violation(result, constraints)),  # never NaN: 0 (within) sorts first
        _ascending(result.critical_failures),
        _ascending(-reward if not math.isnan(reward) else reward),
        _ascending(result.cost),
    )


def compare(a: Rankable, b: Rankable, constraints: Constraints = NO_CONSTRAINTS) -> int:
    """-1 if ``a`` ranks better than ``b``, 1 if worse, 0 if they tie on every key."""
    key_a, key_b = rank_key(a, constraints), rank_key(b, constraints)
    return -1 if key_a < key_b else (1 if key_a > key_b else 0)


def rank(results: Iterable[T], constraints: Constraints = NO_CONSTRAINTS) -> list[T]:
    """Best first; ties keep their input order (stable)."""
    return sorted(results, key=lambda r: rank_key(r, constraints))


def best(results: Sequence[T], constraints: Constraints = NO_CONSTRAINTS) -> T:
    if not results:
        raise ValueError("no results to rank")
    return rank(results, constraints)[0]


# Tune needs one number, and only displays it: every choice FAR makes uses rank_key itself. The bands keep
# rank_key's order when rewards are finite with |reward| < 5e8 and, between two trials outside the limits,
# the violations differ by more than (critical difference x 1e9 + reward difference) / 1e12 -- e.g. by 1e-3
# for up to ~1,000 critical failures apart.
CRITICAL_WEIGHT = 1e9
INFEASIBLE_OFFSET = 1e15
VIOLATION_WEIGHT = 1e12


def tune_score(result: Rankable, constraints: Constraints = NO_CONSTRAINTS) -> float:
    """Tune's scalar (higher is better), banded as ``rank_key`` orders: feasibility, violation, critical, reward."""
    violation = constraint_violation(result, constraints)
    critical, reward = float(result.critical_failures), float(result.reward)
    if math.isnan(critical) or math.isnan(reward):
        return -math.inf
    score = reward - critical * CRITICAL_WEIGHT
    if violation > 0:
        score -= INFEASIBLE_OFFSET + min(violation, 1e3) * VIOLATION_WEIGHT
    return score
