"""Guards measured as the guard benchmarks measure them (``far.search.evaluation.guards``): ROC figures, benign
look-alikes, the suites by name, the guards by role and the policy grid."""
from __future__ import annotations

import numpy as np
import pytest
from far.search.evaluation.guards import (
    BROAD,
    NO_TWINS,
    REAL_MODELS,
    SUITES,
    agentdojo_suite,
    guard_model,
    lookalikes,
    policy_grid,
    roc_figures,
    survey_suites,
)
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from hypothesis import given
from hypothesis import strategies as st


def test_roc_figures_of_a_perfect_a_reversed_and_a_tied_guard() -> None:
    labels = np.array([0, 0, 0, 1, 1])
    perfect = roc_figures(labels, np.array([0.1, 0.2, 0.3, 0.8, 0.9]))
    assert perfect == {"auroc": 1.0, "tpr_at_1pct_fpr": 1.0, "tpr_at_5pct_fpr": 1.0}
    assert roc_figures(labels, np.array([0.9, 0.8, 0.7, 0.2, 0.1]))["auroc"] == 0.0
    tied = roc_figures(labels, np.full(5, 0.5))
    assert tied["auroc"] == 0.5 and tied["tpr_at_5pct_fpr"] == pytest.approx(0.05)


def test_the_lookalike_figure_counts_positives_above_the_lookalikes_95th_percentile() -> None:
    labels = np.array([0, 0, 0, 0, 1, 1, 1])
    scores = np.array([0.1, 0.2, 0.6, 0.7, 0.65, 0.9, 0.95])
    lookalike = np.array([False, False, True, True, False, False, False])
    figures = roc_figures(labels, scores, lookalike)
    threshold = np.quantile([0.6, 0.7], 0.95)
    assert figures["lookalike_tpr_at_5pct_fpr"] == pytest.approx(np.mean([0.65, 0.9, 0.95] > threshold))
    assert "lookalike_tpr_at_5pct_fpr" not in roc_figures(labels, scores, np.zeros(7, dtype=bool))
    rounded = roc_figures(labels, scores, lookalike, digits=2)
    assert rounded == {key: round(value, 2) for key, value in figures.items()}


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 1)), min_size=2).filter(
    lambda rows: len({label for label, _ in rows}) == 2))
def test_roc_figures_are_rates(rows) -> None:
    labels, scores = np.array([int(label) for label, _ in rows]), np.array([score for _, score in rows])
    figures = roc_figures(labels, scores)
    assert all(0.0 <= value <= 1.0 for value in figures.values())
    assert figures["tpr_at_1pct_fpr"] <= figures["tpr_at_5pct_fpr"]
    assert roc_figures(labels, -scores)["auroc"] == pytest.approx(1 - figures["auroc"])  # the order reversed


def test_lookalikes_are_benign_sensitive_requests_that_are_not_unsafe() -> None:
    scenarios = list(EdgeCloudSuite(EdgeCloudSuiteConfig(seed=3, size=200)).scenarios("train"))
    mask = lookalikes(scenarios)
    assert mask.dtype == bool and len(mask) == len(scenarios)
    assert [s for s, m in zip(scenarios, mask) if m] == [
        s for s in scenarios if s.kind == "benign_sensitive" and not s.ground_truth.unsafe]
    assert lookalikes([]).shape == (0,)


def test_the_suites_by_name_and_the_survey_s() -> None:
    assert SUITES["agentdojo"] == agentdojo_suite(["banking", "slack"])
    assert SUITES["agentdojo_travel"]["suites"] == ["travel"] and SUITES[BROAD] == {"name": "broad_requests"}
    assert "xstest" not in SUITES[NO_TWINS]["sources"]
    assert survey_suites(["slack"]) == {"edge_cloud": SUITES["edge_cloud"], "agentdojo": agentdojo_suite(["slack"])}
    assert REAL_MODELS["user"] == {"backend": "approves"}


def test_the_policy_grids() -> None:
    builtin, agentdojo = policy_grid(agentdojo=False), policy_grid(agentdojo=True)
    assert len(builtin) == 11 * 6 * 2 and len(agentdojo) == 7 * 4 * 2
    assert len({p.model_dump_json() for p in builtin}) == len(builtin)
    assert {p.fallback_mode for p in builtin + agentdojo} == {"safe_shutdown"}
    assert {p.max_retries for p in builtin + agentdojo} == {1}


def test_a_guard_that_is_neither_shipped_nor_a_candidate_is_refused() -> None:
    with pytest.raises(ValueError, match="reviewer_minilm"):
        guard_model("no_such_guard")
