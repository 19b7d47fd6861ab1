"""The ranking rule (constrained lexicographic), tested exhaustively on small grids including ties, NaN and ±inf."""
import itertools
import math
from dataclasses import dataclass

import pytest
from far.search.ranking.rank import (
    NO_CONSTRAINTS,
    Constraints,
    best,
    compare,
    constraint_violation,
    is_feasible,
    rank,
    rank_key,
    shortfall_of,
    tune_score,
    violation_of,
)
from hypothesis import given
from hypothesis import strategies as st

INF, NAN = math.inf, math.nan
CRITICAL = [0, 1, 2, INF, NAN]
REWARD = [-INF, -5.0, 0.0, 5.0, INF, NAN]
COST = [0.0, 1.0, INF, NAN]
MEAN_COST = [0.0, 0.5, 0.8, 1.0, 1.6, INF, -INF, NAN]
LIMITS = [Constraints(), Constraints(max_mean_cost=0.8), Constraints(max_mean_cost=0.0)]


@dataclass(frozen=True)
class R:
    critical_failures: float
    reward: float
    cost: float
    mean_cost: float = 0.0


GRID = [R(c, r, k) for c, r, k in itertools.product(CRITICAL, REWARD, COST)]
CONSTRAINED_GRID = [R(c, r, 0.0, m) for c, r, m in itertools.product([0, 1, NAN], [-INF, 0.0, 5.0, NAN], MEAN_COST)]


def reference_violation(mean_cost: float, limit: float | None) -> float:
    if limit is None:
        return 0.0
    if mean_cost != mean_cost:  # NaN: not known to be within
        return INF
    if mean_cost <= limit:
        return 0.0
    return (mean_cost - limit) / limit if limit > 0 else mean_cost - limit


def reference_constrained(a: R, b: R, limits: Constraints) -> int:
    """Deb's rules stated independently: within beats outside; outside, smaller violation wins; then the
    lexicographic rule."""
    va, vb = (reference_violation(x.mean_cost, limits.max_mean_cost) for x in (a, b))
    if (va == 0) != (vb == 0):
        return -1 if va == 0 else 1
    if va != vb:
        return -1 if va < vb else 1
    return reference(a, b)


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


def test_constrained_compare_matches_debs_rules_on_every_pair():
    for limits in LIMITS:
        for a, b in itertools.product(CONSTRAINED_GRID, CONSTRAINED_GRID):
            assert compare(a, b, limits) == reference_constrained(a, b, limits), (a, b, limits)


def test_constrained_order_is_a_total_preorder():
    for limits in LIMITS:
        sample = CONSTRAINED_GRID[::2]
        for a, b in itertools.product(sample, sample):
            assert compare(a, b, limits) == -compare(b, a, limits)
        for a, b, c in itertools.product(sample[::3], sample[::3], sample[::3]):
            if compare(a, b, limits) <= 0 and compare(b, c, limits) <= 0:
                assert compare(a, c, limits) <= 0


def test_within_the_limit_beats_outside_whatever_the_critical_count():
    limits = Constraints(max_mean_cost=0.8)
    assert compare(R(5, -100.0, 9.0, 0.8), R(0, 1e9, 0.0, 0.81), limits) == -1
    assert compare(R(0, 0.0, 0.0, 0.9), R(0, 0.0, 0.0, 1.2), limits) == -1  # smaller violation first
    assert compare(R(3, 0.0, 0.0, 1.0), R(0, 0.0, 0.0, 1.0), limits) == 1  # equal violation: critical decides
    assert compare(R(0, 0.0, 0.0, NAN), R(0, 0.0, 0.0, INF), limits) == 0  # both infinitely outside


def test_violation_rules():
    assert violation_of(0.5, None) == 0.0 and violation_of(NAN, None) == 0.0
    assert violation_of(0.8, 0.8) == 0.0 and violation_of(-INF, 0.8) == 0.0
    assert violation_of(1.2, 0.8) == pytest.approx(0.5)
    assert violation_of(0.3, 0.0) == pytest.approx(0.3)  # a zero limit: absolute excess
    assert violation_of(NAN, 0.8) == INF and violation_of(INF, 0.8) == INF
    assert is_feasible(R(0, 0, 0, 0.8), Constraints(max_mean_cost=0.8))
    assert not is_feasible(R(0, 0, 0, NAN), Constraints(max_mean_cost=0.8))
    assert constraint_violation(R(0, 0, 0, 99.0)) == 0.0


def test_without_limits_the_constrained_rule_is_the_plain_one():
    for a, b in itertools.product(CONSTRAINED_GRID, CONSTRAINED_GRID):  # mean cost varies, and is ignored
        assert compare(a, b, NO_CONSTRAINTS) == reference(a, b)


@given(st.lists(st.builds(R, st.integers(0, 50), st.integers(-400_000_000, 400_000_000), st.just(0.0),
                          st.sampled_from([0.1, 0.5, 0.8, 0.81, 1.0, 2.0, 700.0])), min_size=2, max_size=10))
def test_tune_score_orders_as_rank_key_within_its_bands(results):
    limits = Constraints(max_mean_cost=0.8)
    for a, b in itertools.combinations(results, 2):
        order = compare(a, b, limits)
        if order < 0:
            assert tune_score(a, limits) > tune_score(b, limits)
        elif order > 0:
            assert tune_score(a, limits) < tune_score(b, limits)


def test_tune_score_of_nan_is_worst():
    assert tune_score(R(NAN, 0.0, 0.0)) == -INF and tune_score(R(0, NAN, 0.0)) == -INF


@dataclass(frozen=True)
class U:
    """A result with the usefulness figures the gate's other limits read."""

    critical_failures: float
    reward: float
    over_refusal_rate: float
    benign_success_rate: float
    cost: float = 0.0
    mean_cost: float = 0.1


RATES = [0.0, 0.05, 0.2, 0.5, 1.0, NAN]
USEFUL = Constraints(max_mean_cost=0.8, max_over_refusal_rate=0.05, min_benign_success_rate=0.5)


def reference_shortfall(value: float, floor: float | None) -> float:
    if floor is None:
        return 0.0
    if value != value:
        return INF
    if value >= floor:
        return 0.0
    return (floor - value) / floor if floor > 0 else floor - value


def test_shortfall_rules():
    for value, floor in itertools.product([-INF, 0.0, 0.25, 0.5, 1.0, INF, NAN], [None, 0.0, 0.5, 1.0]):
        assert shortfall_of(value, floor) == pytest.approx(reference_shortfall(value, floor))


def test_usefulness_violation_is_the_sum_of_each_limits_share():
    for refused, done in itertools.product(RATES, RATES):
        expected = reference_violation(refused, 0.05) + reference_shortfall(done, 0.5)
        assert constraint_violation(U(0, 0.0, refused, done), USEFUL) == pytest.approx(expected)
        # limits that are not set are never read: any rate, even NaN, is within them
        assert constraint_violation(U(0, 0.0, refused, done), Constraints(max_mean_cost=0.8)) == 0.0


def test_a_useful_policy_beats_one_that_refuses_everything_whatever_their_critical_counts():
    refuse_all = U(critical_failures=0, reward=500.0, over_refusal_rate=1.0, benign_success_rate=0.0)
    useful = U(critical_failures=3, reward=-900.0, over_refusal_rate=0.04, benign_success_rate=0.9)
    assert compare(useful, refuse_all, USEFUL) == -1
    assert best([refuse_all, useful], USEFUL) is useful
    assert compare(useful, refuse_all, Constraints(max_mean_cost=0.8)) == 1  # without the limits: fewer critical


def test_usefulness_constraints_order_as_debs_rules_on_a_grid():
    grid = [U(c, r, o, d) for c, r, o, d in itertools.product([0, 1, NAN], [0.0, 5.0], RATES, RATES)]
    for a, b in itertools.product(grid, grid):
        va, vb = (reference_violation(x.over_refusal_rate, 0.05) + reference_shortfall(x.benign_success_rate, 0.5)
                  for x in (a, b))
        if (va == 0) != (vb == 0):
            expected = -1 if va == 0 else 1
        elif va != vb:
            expected = -1 if va < vb else 1
        else:
            expected = reference(a, b)
        assert compare(a, b, USEFUL) == expected


# --- the rule's invariants on any figures (the grids above are exhaustive on few values; these draw any) ---------

FIGURES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5))
RATE_OR_NAN = st.one_of(st.floats(0.0, 1.0), st.just(NAN))
ANY_RESULT = st.builds(U, critical_failures=st.one_of(st.integers(0, 6), st.just(NAN), st.just(INF)), reward=FIGURES,
                       over_refusal_rate=RATE_OR_NAN, benign_success_rate=RATE_OR_NAN, cost=FIGURES,
                       mean_cost=st.one_of(st.floats(0.0, 3.0), st.just(NAN), st.just(INF)))
ANY_LIMITS = st.builds(Constraints, max_mean_cost=st.none() | st.floats(0.0, 2.0),
                       max_over_refusal_rate=st.none() | st.floats(0.0, 1.0),
                       min_benign_success_rate=st.none() | st.floats(0.0, 1.0))


@given(ANY_RESULT, ANY_RESULT, ANY_RESULT, ANY_LIMITS)
def test_the_constrained_order_is_a_total_preorder_on_any_figures(a, b, c, limits):
    assert compare(a, b, limits) == -compare(b, a, limits) and compare(a, a, limits) == 0
    if compare(a, b, limits) <= 0 and compare(b, c, limits) <= 0:
        assert compare(a, c, limits) <= 0
        if compare(a, b, limits) < 0 or compare(b, c, limits) < 0:
            assert compare(a, c, limits) < 0


@given(ANY_RESULT, ANY_RESULT, ANY_LIMITS)
def test_within_the_limits_beats_outside_and_then_fewer_critical_failures_win_whatever_else(a, b, limits):
    """Feasibility first, whatever the critical count, reward or cost; between two equally placed (both within,
    or equally far outside), fewer critical failures win whatever the reward and cost (NaN: worst)."""
    if is_feasible(a, limits) and not is_feasible(b, limits):
        assert compare(a, b, limits) == -1
    if constraint_violation(a, limits) == constraint_violation(b, limits):
        fewer = not math.isnan(a.critical_failures) and (math.isnan(b.critical_failures)
                                                          or a.critical_failures < b.critical_failures)
        if fewer:
            assert compare(a, b, limits) == -1


@given(ANY_RESULT, ANY_LIMITS, st.floats(0.0, 1e6), st.floats(0.0, 1.0))
def test_being_worse_on_one_figure_never_ranks_better(a, limits, more, share):
    """One more critical failure, less reward, more cost per scenario, more benign requests refused or fewer
    done: never ahead of the figures it worsened (ties allowed)."""
    from dataclasses import replace

    worse = [replace(a, critical_failures=a.critical_failures + 1), replace(a, mean_cost=a.mean_cost + more)]
    if not math.isnan(a.reward):  # (NaN is already the worst, and a known figure is better than NaN)
        worse.append(replace(a, reward=a.reward - more))
    if not math.isnan(a.over_refusal_rate):
        worse.append(replace(a, over_refusal_rate=min(1.0, a.over_refusal_rate + share)))
    if not math.isnan(a.benign_success_rate):
        worse.append(replace(a, benign_success_rate=max(0.0, a.benign_success_rate - share)))
    for other in worse:
        assert compare(other, a, limits) >= 0, other


@given(st.lists(ANY_RESULT, min_size=1, max_size=10), ANY_LIMITS, st.randoms(use_true_random=False))
def test_rank_orders_any_input_order_alike_and_best_is_never_beaten(results, limits, rng):
    ordered = rank(results, limits)
    assert sorted(map(id, ordered)) == sorted(map(id, results))  # a permutation: nothing lost or repeated
    shuffled = list(results)
    rng.shuffle(shuffled)
    assert [rank_key(r, limits) for r in rank(shuffled, limits)] == [rank_key(r, limits) for r in ordered]
    top = best(results, limits)
    assert top is ordered[0] and all(compare(top, r, limits) <= 0 for r in results)
