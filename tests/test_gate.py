import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import beta

from search.gate import GateConfig, clopper_pearson_upper, gate, holdout_needed


@pytest.mark.parametrize("k, n", [(0, 1), (0, 10), (0, 1000), (1, 10), (3, 100), (50, 100), (99, 100), (7, 5000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_matches_beta_quantile(k, n, confidence):
    assert clopper_pearson_upper(k, n, confidence) == pytest.approx(beta.ppf(confidence, k + 1, n - k), abs=1e-9)


def test_zero_in_n_is_not_zero():
    upper = clopper_pearson_upper(0, 1000)
    assert upper == pytest.approx(1 - 0.05 ** (1 / 1000))
    assert 0.0029 < upper < 0.0031  # the rule of three
    assert clopper_pearson_upper(0, 0) == 1.0 and clopper_pearson_upper(5, 5) == 1.0


@given(st.integers(1, 400), st.data())
def test_monotone_in_failures_and_trials(n, data):
    k = data.draw(st.integers(0, n - 1))
    assert clopper_pearson_upper(k, n) < clopper_pearson_upper(k + 1, n)
    assert clopper_pearson_upper(k, n + 1) < clopper_pearson_upper(k, n)
    assert k / n <= clopper_pearson_upper(k, n) <= 1.0


def test_rejects_impossible_counts():
    for k, n in [(-1, 5), (6, 5)]:
        with pytest.raises(ValueError):
            clopper_pearson_upper(k, n)


def test_gate_passes_and_names_each_failed_condition():
    config = GateConfig(max_mean_cost=1.0, max_critical_rate_upper=0.01)
    ok = gate(0, 0, 1000, 0.5, config)
    assert ok.deploy and ok.reason.startswith("all conditions met")
    critical = gate(2, 2, 1000, 0.5, config)
    assert not critical.deploy and "critical_failures 2 > limit 0" in critical.reason
    costly = gate(0, 0, 1000, 1.5, config)
    assert not costly.deploy and "mean_cost" in costly.reason and "critical_failures" not in costly.reason
    too_few = gate(0, 0, 100, 0.5, config)  # zero seen in 100 is not evidence of < 1%
    assert not too_few.deploy and "critical_rate_upper" in too_few.reason
    nothing = gate(0, 0, 0, math.nan, GateConfig())
    assert not nothing.deploy and "no holdout scenarios" in nothing.reason


def test_gate_without_cost_budget_ignores_cost():
    assert gate(0, 0, 10, 1e9, GateConfig()).deploy


@pytest.mark.parametrize("limit, confidence, expected", [(0.01, 0.95, 299), (0.05, 0.95, 59), (0.001, 0.95, 2995),
                                                         (0.01, 0.99, 459), (0.5, 0.95, 5), (1.0, 0.95, 0)])
def test_holdout_needed_is_the_smallest_n_whose_zero_failure_bound_meets_the_limit(limit, confidence, expected):
    n = holdout_needed(limit, confidence)
    assert n == expected
    assert clopper_pearson_upper(0, max(n, 1), confidence) <= limit
    if n > 1:
        assert clopper_pearson_upper(0, n - 1, confidence) > limit
        assert n == math.ceil(math.log(1 - confidence) / math.log(1 - limit))


@given(st.floats(1e-4, 0.9), st.floats(0.5, 0.999))
def test_holdout_needed_is_exact_everywhere(limit, confidence):
    n = holdout_needed(limit, confidence)
    assert clopper_pearson_upper(0, n, confidence) <= limit
    assert n == 1 or clopper_pearson_upper(0, n - 1, confidence) > limit
    with pytest.raises(ValueError):
        holdout_needed(0.0)
