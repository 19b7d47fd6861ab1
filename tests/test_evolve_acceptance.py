"""FATE's gate (``far.evolve.acceptance``): the safety gate on the own rates, the pass kept, the round returned
and what counts as progress, exhaustively over short runs."""
from __future__ import annotations

import math

import pytest


def test_the_safety_gate_names_the_own_rates_that_rose_beyond_tolerance():
    from far.evolve.acceptance import unsafe_rise

    nan = float("nan")
    before = {"own_asr": 0.10, "own_hcr": 0.0}
    assert unsafe_rise(before, {"own_asr": 0.10, "own_hcr": 0.0}, 0.0) == ""
    assert unsafe_rise(before, {"own_asr": 0.05, "own_hcr": 0.0}, 0.0) == ""  # safer is kept
    assert unsafe_rise(before, {"own_asr": 0.20, "own_hcr": 0.0}, 0.0).startswith("own_asr 0.100 -> 0.200")
    assert unsafe_rise(before, {"own_asr": 0.20, "own_hcr": 0.0}, 0.15) == ""  # within the tolerance
    assert "own_hcr" in unsafe_rise(before, {"own_asr": 0.1, "own_hcr": 0.5}, 0.0)
    assert unsafe_rise({"own_asr": nan, "own_hcr": 0.0}, {"own_asr": 1.0, "own_hcr": 0.0}, 0.0) == ""


GRID = [{"own_asr": a, "own_hcr": h, "mean_r_pf": r} for a in (0.0, 0.5) for h in (0.0, 0.5)
        for r in (0.0, 1.0, float("nan"), float("inf"), float("-inf"))]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_pass_kept_is_the_best_safe_one_and_the_earliest_on_a_tie(length):
    """Exhaustive over short runs of passes (own rates 0 or 0.5, r_PF in {0, 1, NaN, ±inf}), before = 0.25:
    None iff every pass raised a rate; else a safe pass that no safe pass beats, and no earlier safe pass
    ties (NaN ranks below -inf's peers: lowest)."""
    import itertools

    from far.evolve.acceptance import kept_pass

    before = {"own_asr": 0.25, "own_hcr": 0.25}

    def safe(m):
        return m["own_asr"] <= 0.25 and m["own_hcr"] <= 0.25

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for passes in itertools.product(GRID, repeat=length):
        kept = kept_pass(passes, before, 0.0)
        if not any(safe(m) for m in passes):
            assert kept is None
            continue
        assert kept is not None and safe(passes[kept])
        assert all(score(m) <= score(passes[kept]) for m in passes if safe(m))
        assert all(score(passes[i]) < score(passes[kept]) for i in range(kept) if safe(passes[i]))
    assert kept_pass([{"own_asr": 0.4, "own_hcr": 0.0, "mean_r_pf": 1.0}], before, 0.2) == 0  # within tolerance


ROUNDS_GRID = [{"own_asr": a, "own_hcr": h, "mean_r_pf": r} for a in (0.0, 0.5, float("nan")) for h in (0.0, 1.0)
               for r in (0.0, 1.0, float("nan"), float("inf"), float("-inf"))]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_round_returned_handles_the_least_harm_then_scores_best_then_came_first(length):
    """Exhaustive over short runs (own-ASR 0, 0.5 or NaN on 2 injected requests; own-HCR 0 or 1 on 1 harmful;
    r_PF in {0, 1, NaN, ±inf}): no round handles fewer harmful or injected requests than the one returned; none
    of those ties beats its r_PF (NaN lowest), and no earlier one ties it."""
    import itertools

    from far.evolve.acceptance import kept_round

    def critical(m):
        return (0.0 if math.isnan(m["own_asr"]) else 2 * m["own_asr"]) + m["own_hcr"]

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for checks in itertools.product(ROUNDS_GRID, repeat=length):
        kept = kept_round(checks, injected=2, harmful=1, score="mean_r_pf")
        least = min(critical(m) for m in checks)
        assert critical(checks[kept]) == least
        peers = [i for i, m in enumerate(checks) if critical(m) == least]
        assert all(score(checks[i]) <= score(checks[kept]) for i in peers)
        assert all(score(checks[i]) < score(checks[kept]) for i in peers if i < kept)


@pytest.mark.parametrize("min_improvement", [0.0, 0.5])
def test_a_round_is_progress_when_it_handles_less_harm_or_as_much_and_scores_higher(min_improvement):
    """Exhaustive over pairs (best round before, latest) of the grid above: handling fewer harmful or injected
    requests is progress whatever the score; more never is; as many, progress iff the score rose by at least
    ``min_improvement`` (NaN lowest). At 0 it agrees with ``kept_round`` but for exact ties, which
    ``kept_round`` gives to the earlier round."""
    from far.evolve.acceptance import handled_harm, improved, kept_round

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for best in ROUNDS_GRID:
        for latest in ROUNDS_GRID:
            result = improved(best, latest, injected=2, harmful=1, score="mean_r_pf", min_improvement=min_improvement)
            before, after = handled_harm(best, 2, 1), handled_harm(latest, 2, 1)
            if after != before:
                assert result == (after < before)
                continue
            gain = score(latest) - score(best)
            assert result == (not math.isnan(gain) and gain >= min_improvement)
            if min_improvement == 0.0:
                tie = score(latest) == score(best)
                returned = kept_round([best, latest], injected=2, harmful=1, score="mean_r_pf")
                assert result == (returned == 1 or tie and not math.isinf(score(best)))
