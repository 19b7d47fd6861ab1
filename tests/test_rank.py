"""The ranking rule, tested exhaustively on small grids including ties, NaN and ±inf."""
import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from search.rank import best, compare, rank, rank_key

INF, NAN = math.inf, math.nan
CRITICAL = [0, 1, 2, INF, NAN]
REWARD = [-INF, -5.0, 0.0, 5.0, INF, NAN]
COST = [0.0, 1.0, INF, NAN]


@dataclass(frozen=True)
class R:
    critical_failures: float
    reward: float
    cost: float


GRID = [R(c, r, k) for c, r, k in itertools.product(CRITICAL, REWARD, COST)]


def reference(a: R, b: R) -> int:
    """An independent statement of the rule: compare key by key; NaN is worst; reward is maximised."""
    for x, y, maximise in ((a.critical_failures, b.critical_failures, False), (a.reward, b.reward, True),
                           (a.cost, b.cost, False)):
        x_nan, y_nan = math.isnan(x), math.isnan(y)
        if x_nan and y_nan:
            continue
        if x_nan != y_nan:
            return 1 if x_nan else -1
        if x == y:
            continue
        better = x > y if maximise else x < y
        return -1 if better else 1
    return 0


def test_compare_matches_the_rule_on_every_pair():
    for a, b in itertools.product(GRID, GRID):
        assert compare(a, b) == reference(a, b), (a, b)


def test_antisymmetric_and_reflexive():
    for a, b in itertools.product(GRID, GRID):
        assert compare(a, b) == -compare(b, a)
    for a in GRID:
        assert compare(a, a) == 0


def test_transitive():
    sample = GRID[::3]
    for a, b, c in itertools.product(sample, sample, sample):
        if compare(a, b) <= 0 and compare(b, c) <= 0:
            assert compare(a, c) <= 0


def test_fewer_critical_always_wins_whatever_the_reward():
    assert compare(R(0, -1e12, INF), R(1, 1e12, 0.0)) == -1
    assert compare(R(0, -INF, NAN), R(1, INF, 0.0)) == -1


def test_reward_breaks_critical_ties_and_cost_breaks_reward_ties():
    assert compare(R(1, 10.0, 5.0), R(1, 9.0, 0.0)) == -1
    assert compare(R(1, 10.0, 1.0), R(1, 10.0, 2.0)) == -1
    assert compare(R(1, 10.0, 1.0), R(1, 10.0, 1.0)) == 0


def test_nan_is_worst_and_ties_with_nan():
    assert compare(R(NAN, 0, 0), R(INF, 0, 0)) == 1
    assert compare(R(0, NAN, 0), R(0, -INF, 0)) == 1
    assert compare(R(0, 0, NAN), R(0, 0, INF)) == 1
    assert compare(R(NAN, NAN, NAN), R(NAN, NAN, NAN)) == 0


def test_rank_sorts_best_first_and_is_stable():
    a, b, c, d = R(0, 5, 1), R(0, 5, 1), R(0, 7, 3), R(2, 100, 0)
    assert rank([d, a, c, b]) == [c, a, b, d]
    assert rank([d, b, c, a])[1] is b
    assert best([d, a, c]) is c
    with pytest.raises(ValueError):
        best([])


finite_or_special = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5))


@given(st.lists(st.builds(R, finite_or_special, finite_or_special, finite_or_special), min_size=1, max_size=12))
def test_rank_is_consistent_with_compare(results):
    ordered = rank(results)
    for first, second in zip(ordered, ordered[1:]):
        assert compare(first, second) <= 0
    assert rank_key(ordered[0]) == min(rank_key(r) for r in results)
