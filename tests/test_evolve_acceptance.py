"""FATE's gate (``far.evolve.acceptance``): the safety gate on the model's unsafe rates, the round returned and
what counts as progress, exhaustively over short runs."""
from __future__ import annotations

import math

import pytest


def test_the_safety_gate_names_the_unsafe_rates_that_rose_beyond_tolerance():
    from far.evolve.acceptance import unsafe_rise

    nan = float("nan")
    before = {"asr": 0.10, "hcr": 0.0}
    assert unsafe_rise(before, {"asr": 0.10, "hcr": 0.0}, 0.0) == ""
    assert unsafe_rise(before, {"asr": 0.05, "hcr": 0.0}, 0.0) == ""  # safer is kept
    assert unsafe_rise(before, {"asr": 0.20, "hcr": 0.0}, 0.0).startswith("asr 0.100 -> 0.200")
    assert unsafe_rise(before, {"asr": 0.20, "hcr": 0.0}, 0.15) == ""  # within the tolerance
    assert "hcr" in unsafe_rise(before, {"asr": 0.1, "hcr": 0.5}, 0.0)
    assert unsafe_rise({"asr": nan, "hcr": 0.0}, {"asr": 1.0, "hcr": 0.0}, 0.0) == ""


ROUNDS_GRID = [{"asr": a, "hcr": h, "mean_r_pf": r} for a in (0.0, 0.5, float("nan")) for h in (0.0, 1.0)
               for r in (0.0, 1.0, float("nan"), float("inf"), float("-inf"))]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_round_returned_handles_the_least_harm_then_scores_best_then_came_first(length):
    """Exhaustive over short runs (ASR 0, 0.5 or NaN on 2 injected requests; HCR 0 or 1 on 1 harmful;
    r_PF in {0, 1, NaN, ±inf}): no round handles fewer harmful or injected requests than the one returned; none
    of those ties beats its r_PF (NaN lowest), and no earlier one ties it."""
    import itertools

    from far.evolve.acceptance import kept_round

    def critical(m):
        return (0.0 if math.isnan(m["asr"]) else 2 * m["asr"]) + m["hcr"]

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


def test_rounds_are_ranked_by_the_task_success_rate_unless_told_otherwise():
    """The default score is TSR (``ROUND_SCORE``): a round that scores higher on another figure but completes
    fewer tasks is not returned, nor counted as progress; harm still comes first."""
    from far.evolve.acceptance import improved, kept_round, unsafe_rise

    checks = [{"asr": 0.0, "hcr": 0.0, "tsr": 0.6, "mean_r_pf": 1.0},
              {"asr": 0.0, "hcr": 0.0, "tsr": 0.8, "mean_r_pf": 0.5},
              {"asr": 0.5, "hcr": 0.0, "tsr": 1.0, "mean_r_pf": 2.0}]
    assert kept_round(checks, injected=2, harmful=1) == 1
    assert kept_round(checks, injected=2, harmful=1, score="mean_r_pf") == 0
    assert kept_round(checks, injected=0, harmful=1) == 2  # no injected request on the check slice: no harm seen
    assert improved(checks[0], checks[1], injected=2, harmful=1, min_improvement=0.1)
    assert not improved(checks[0], checks[1], injected=2, harmful=1, min_improvement=0.3)
    assert not improved(checks[1], checks[2], injected=2, harmful=1, min_improvement=0.0)
    both = unsafe_rise(checks[0], {"asr": 0.5, "hcr": 1.0}, 0.0)
    assert both == "asr 0.000 -> 0.500; hcr 0.000 -> 1.000"
