"""FATE's rules over z, exhaustively on small grids including ties, duplicates, ±inf and NaN."""
from __future__ import annotations

import itertools
import math

import pytest
from far.verifiers.pareto import (
    attainable,
    dominates,
    dominates_then_lower,
    feasible,
    pareto_front,
    r_pf,
    repairs,
    supervision_distribution,
    tie_broken_front,
)
from hypothesis import given
from hypothesis import strategies as st

INF = math.inf
VALUES = (-INF, 0.0, 0.5, 1.0, INF, math.nan)
PAIRS = list(itertools.product(itertools.product(VALUES, repeat=2), repeat=2))


def worst(x):
    return -INF if math.isnan(x) else x


def test_dominance_on_every_pair_of_the_grid():
    for a, b in PAIRS:
        at_least = all(worst(x) >= worst(y) for x, y in zip(a, b))
        strictly = any(worst(x) > worst(y) for x, y in zip(a, b))
        assert dominates(a, b) == (at_least and strictly), (a, b)
        assert not (dominates(a, b) and dominates(b, a))  # antisymmetric
        if [worst(x) for x in a] == [worst(x) for x in b]:
            assert not dominates(a, b)  # ties (and NaN against -inf) never dominate


def test_dominance_is_transitive_on_the_grid():
    points = list(itertools.product(VALUES, repeat=2))
    for a, b, c in itertools.product(points, repeat=3):
        if dominates(a, b) and dominates(b, c):
            assert dominates(a, c)


def test_front_keeps_duplicates_and_drops_dominated():
    points = [(1.0, 0.0), (0.0, 1.0), (0.5, 0.5), (0.5, 0.5), (0.4, 0.4), (1.0, 0.0), (math.nan, 1.0)]
    assert pareto_front(points) == [0, 1, 2, 3, 5]
    assert pareto_front([]) == []
    assert pareto_front([(INF, -INF), (0.0, 0.0)]) == [0, 1]


@given(st.lists(st.tuples(*[st.sampled_from(VALUES)] * 3), max_size=8))
def test_front_is_exactly_the_undominated_points(points):
    front = set(pareto_front(points))
    for i, p in enumerate(points):
        dominated = any(dominates(q, p) for j, q in enumerate(points) if j != i)
        assert (i in front) == (not dominated)
    if points:
        assert front  # a finite set always has an undominated point


KEYS = (-INF, 0.0, 0.3, INF, math.nan)


def lower(a, b):
    """The lexicographic order the tie keys are compared in, NaN as +inf."""
    return tuple(INF if math.isnan(x) else x for x in a) < tuple(INF if math.isnan(x) else x for x in b)


def test_the_key_breaks_only_exact_ties_of_z_on_every_pair_of_the_grid():
    keys = [(k,) for k in KEYS] + [(k, c) for k in (0.0, math.nan) for c in (0.0, 0.3, math.nan)]
    for (a, b), key_a, key_b in itertools.product(PAIRS, keys, keys):
        if len(key_a) != len(key_b):
            with pytest.raises(ValueError):
                dominates_then_lower(a, key_a, b, key_b)
            continue
        tied = [worst(x) for x in a] == [worst(x) for x in b]
        assert dominates_then_lower(a, key_a, b, key_b) == (dominates(a, b) or (tied and lower(key_a, key_b)))
        # antisymmetric, whatever the keys: a key never outweighs an objective
        assert not (dominates_then_lower(a, key_a, b, key_b) and dominates_then_lower(b, key_b, a, key_a))
        if dominates(b, a):
            assert not dominates_then_lower(a, key_a, b, key_b)


def test_the_tie_broken_front_drops_only_what_an_equal_point_beats_on_the_key():
    veto, refusal, handled = (1.0, 0.0, 1.0, 1.0), (1.0, 0.0, 1.0, 1.0), (0.0, 1.0, 1.0, 1.0)
    # keys (-reward, cost): the cloud veto costs a cloud call the device refusal does not; handling is better on
    # utility, worse on security, so it stays on the front whatever its key
    assert pareto_front([veto, refusal, handled]) == [0, 1, 2]
    assert tie_broken_front([veto, refusal, handled], [(0.0, 1.3), (0.0, 0.1), (INF, 9.0)]) == [1, 2]
    assert tie_broken_front([veto, refusal], [(-5.0, 1.3), (0.0, 0.1)]) == [0]  # the reward before the cost
    assert tie_broken_front([veto, refusal], [(0.0, 0.1), (0.0, 0.1)]) == [0, 1]  # equal keys: both kept
    assert tie_broken_front([veto, refusal], [(0.0, math.nan), (0.0, INF)]) == [0, 1]  # unknown is +inf
    assert tie_broken_front([], []) == []
    with pytest.raises(ValueError):
        tie_broken_front([veto], [])


@given(st.lists(st.tuples(st.tuples(*[st.sampled_from(VALUES)] * 3),
                          st.tuples(st.sampled_from(KEYS), st.sampled_from(KEYS))), max_size=8))
def test_the_tie_broken_front_is_within_the_front_and_equals_it_on_equal_keys(items):
    points, keys = [p for p, _ in items], [k for _, k in items]
    front, broken = set(pareto_front(points)), set(tie_broken_front(points, keys))
    assert broken <= front
    assert set(tie_broken_front(points, [(0.0, 0.0)] * len(points))) == front
    if points:
        assert broken  # a finite set always has a point nothing beats
    for i in front - broken:  # left out only for an equal point with a lower key
        assert any(j != i and [worst(x) for x in points[j]] == [worst(x) for x in points[i]]
                   and lower(keys[j], keys[i]) for j in range(len(points)))


def test_feasibility_thresholds_cover_every_dimension_and_refuse_nan():
    kappa = (1.0, 0.5, 1.0, 0.0)
    assert feasible((1.0, 0.5, 1.0, 0.0), kappa)
    assert not feasible((0.0, 0.5, 1.0, 0.0), kappa)  # security is thresholded too
    assert not feasible((1.0, 0.49, 1.0, 1.0), kappa)
    assert not feasible((1.0, 1.0, 0.99, 1.0), kappa)
    assert feasible((1.0, INF, 1.0, -0.0), kappa)
    assert not feasible((1.0, math.nan, 1.0, 1.0), kappa)
    assert not feasible((1.0, 1.0, 1.0, -INF), (0.0, 0.0, 0.0, 0.0))
    assert feasible((-INF, 0.0, 0.0, 0.0), (-INF, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError):
        feasible((1.0, 1.0, 1.0), kappa)
    with pytest.raises(ValueError):
        feasible((1.0, 1.0, 1.0, 1.0), (0.5, 0.5, 0.5))


def test_repairs_exhaustively_on_a_small_grid_with_ties_and_infinities():
    grid = (-INF, 0.0, 0.5, 1.0, INF, math.nan)
    for candidate in itertools.product(grid, repeat=2):
        for failed in itertools.product(grid, repeat=2):
            c = [-INF if math.isnan(x) else x for x in candidate]
            f = [-INF if math.isnan(x) else x for x in failed]
            short = [x < 1.0 for x in f]
            expected = (any(ci > fi for ci, fi, si in zip(c, f, short) if si)
                        and all(ci >= fi for ci, fi in zip(c, f)))
            assert repairs(candidate, failed) == expected, (candidate, failed)
    assert not repairs((0.0, 1.0), (0.0, 1.0))  # the failed action itself never repairs (a tie)
    assert repairs((1.0, 1.0), (0.0, 1.0)) and not repairs((1.0, 0.5), (0.0, 1.0))  # no worse elsewhere
    assert not repairs((1.0, 1.0), (1.0, 1.0))  # nothing fell short: nothing to repair
    assert repairs((1.0, 0.0), (0.0, 0.0))  # one shortfall fixed, the other no worse: a repair
    assert not repairs((1.0, -INF), (0.0, 0.0))  # ... not if the other got worse
    with pytest.raises(ValueError):
        repairs((1.0,), (1.0, 1.0))


def test_repairs_with_thresholds_exhaustively():
    """Strictly better where the failed action fell below its threshold; elsewhere at least min(failed, t)."""
    grid = (-INF, 0.0, 0.25, 0.5, 1.0, INF, math.nan)
    for thresholds in itertools.product((0.0, 0.5, 1.0), repeat=2):
        for candidate in itertools.product(grid, repeat=2):
            for failed in itertools.product(grid, repeat=2):
                c = [-INF if math.isnan(x) else x for x in candidate]
                f = [-INF if math.isnan(x) else x for x in failed]
                short = [x < t for x, t in zip(f, thresholds)]
                expected = (any(ci > fi for ci, fi, si in zip(c, f, short) if si)
                            and all(ci >= fi if si else ci >= min(fi, t)
                                    for ci, fi, si, t in zip(c, f, short, thresholds)))
                assert repairs(candidate, failed, thresholds) == expected, (candidate, failed, thresholds)
    for candidate in itertools.product(grid, repeat=2):  # thresholds of 1 are the plain rule on z in [0, 1]
        for failed in itertools.product((0.0, 0.25, 0.5, 1.0), repeat=2):
            assert repairs(candidate, failed, (1.0, 1.0)) == repairs(candidate, failed)
    # a graded refusal (over-refusal 0.9) repairs a harmful action at threshold 0.5, not at 1
    assert repairs((1.0, 0.9), (0.1, 1.0), (0.5, 0.5)) and not repairs((1.0, 0.9), (0.1, 1.0))
    assert not repairs((1.0, 0.4), (0.1, 1.0), (0.5, 0.5))  # ... unless it falls below the threshold
    with pytest.raises(ValueError):
        repairs((1.0, 1.0), (1.0, 1.0), (1.0,))


def test_attainable_kappa_exhaustively():
    """min(κ, best) per dimension; NaN best keeps κ; every lowered threshold is met by some action."""
    grid = (-INF, 0.0, 0.25, 0.5, 1.0, INF, math.nan)
    for kappa in itertools.product((0.0, 0.5, 1.0), repeat=2):
        for best in itertools.product(grid, repeat=2):
            got = attainable(kappa, best)
            for k, b, g in zip(kappa, best, got):
                assert g == (k if math.isnan(b) else min(k, b)), (kappa, best)
                assert g <= k  # never stricter than configured
    for actions in itertools.product(itertools.product((0.0, 0.25, 1.0), repeat=2), repeat=3):
        best = [max(z[d] for z in actions) for d in range(2)]
        limits = attainable((0.5, 0.5), best)
        for d in range(2):  # on each dimension some valid action meets the lowered threshold
            assert any(z[d] >= limits[d] for z in actions)
        if all(b >= 0.5 for b in best):
            assert limits == [0.5, 0.5]  # attainable thresholds are left alone
    # an injected call: no decision does the user's task (utility 0); refusing is safe, handling is not
    best = [max(a, b) for a, b in zip((1.0, 0.0), (0.0, 0.0))]
    limits = attainable((0.5, 0.5), best)
    assert feasible((1.0, 0.0, 1.0, 1.0), attainable((0.5, 0.5, 0.5, 1.0), (1.0, 0.0, 1.0, 1.0)))
    assert repairs((1.0, 0.0), (0.0, 0.0), limits) and not feasible((1.0, 0.0, 1.0, 1.0), (0.5, 0.5, 0.5, 1.0))
    with pytest.raises(ValueError):
        attainable((1.0,), (1.0, 1.0))


def test_r_pf_matches_its_formula_on_a_grid():
    grid = (0.0, 0.25, 1.0)
    for z in itertools.product(grid, repeat=4):
        for weights in ((1, 1, 1, 1), (2, 1, 0, 1), (0, 0, 0, 0)):
            for lam in (0.0, 0.5, 2.0):
                expected = sum(w * x for w, x in zip(weights, z)) - lam * max(w * (1 - x) for w, x in zip(weights, z))
                assert r_pf(z, weights, lam) == pytest.approx(expected)
    assert r_pf((1, 1, 1, 1), (1, 1, 1, 1), 5.0) == 4.0  # no shortfall, no penalty
    assert r_pf((math.nan, 1, 1, 1), (1, 1, 1, 1), 1.0) == -INF
    assert r_pf((INF, 1, 1, 1), (1, 1, 1, 1), 0.0) == INF
    with pytest.raises(ValueError):
        r_pf((1, 1, 1, 1), (1, -1, 1, 1), 1.0)


@given(st.lists(st.tuples(st.sampled_from([-INF, -3.0, 0.0, 0.7, 2.0, INF, math.nan]), st.booleans()),
                max_size=7), st.sampled_from([0.0, 1.0, 5.0]))
def test_q_star_is_a_distribution_on_the_front_or_empty(items, beta):
    rewards = [r for r, _ in items]
    front = [f for _, f in items]
    q = supervision_distribution(rewards, front, beta)
    assert len(q) == len(items) and all(x >= 0 for x in q)
    live = [i for i, (r, f) in enumerate(items) if f and worst(r) > -INF]
    if not live:
        assert sum(q) == 0
        return
    assert sum(q) == pytest.approx(1.0)
    for i, (r, f) in enumerate(items):
        if not f or worst(r) == -INF:
            assert q[i] == 0  # off the front, or worthless: never sampled
    if any(items[i][0] == INF for i in live):
        winners = [i for i in live if items[i][0] == INF]
        assert all(q[i] == pytest.approx(1 / len(winners)) for i in winners)
    elif beta == 0:
        assert all(q[i] == pytest.approx(1 / len(live)) for i in live)  # uniform over the front
    else:
        ordered = sorted(live, key=lambda i: items[i][0])
        assert all(q[a] <= q[b] + 1e-12 for a, b in zip(ordered, ordered[1:]))  # more reward, more mass


def test_q_star_exact_values():
    q = supervision_distribution([0.0, math.log(3.0), 9.0], [True, True, False], 1.0)
    assert q == pytest.approx([0.25, 0.75, 0.0])
    assert supervision_distribution([1000.0, 999.0], [True, True], 1.0) == pytest.approx(
        [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))])  # no overflow
