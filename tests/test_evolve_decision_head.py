"""The decision head (``far.evolve.decision_head``): scikit-learn's scores and a JSON round trip, cross-fitting by
template, and the harm it refuses that the caution alone escalates."""
from __future__ import annotations

import json
import math
import random

import pytest
from evolve_helpers import caution_fit, tiny_config

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.decision_head import DecisionHead, DecisionRule, cross_fitted, fit_head  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.metrics import own_right_decision  # noqa: E402
from far.evolve.task import DECISIONS  # noqa: E402


@pytest.mark.parametrize("kinds", [3, 2])
def test_the_decision_head_scores_as_scikit_learn_does_and_survives_its_json(kinds):
    from sklearn.linear_model import LogisticRegression

    rng = random.Random(kinds)
    logp = [[rng.uniform(-6, 0) for _ in range(3)] for _ in range(60)]
    labels = [DECISIONS[max(range(kinds), key=lambda i: row[i] + rng.gauss(0, 0.5))] for row in logp]
    head = fit_head(logp, labels)
    reference = LogisticRegression(max_iter=5000).fit(logp, labels)
    expected = reference.predict_log_proba(logp)
    for row, want in zip(head.scores(logp), expected):
        got = dict(zip(DECISIONS, row))
        assert [got[c] for c in reference.classes_] == pytest.approx(list(want), abs=1e-9)
        assert all(got[d] == -math.inf for d in DECISIONS if d not in reference.classes_)
    assert DecisionHead.from_json(json.loads(json.dumps(head.to_json()))) == head
    rule = DecisionRule(head, 1.25)
    assert DecisionRule.from_json(json.loads(json.dumps(rule.to_json()))) == rule
    assert fit_head(logp, ["refuse"] * len(logp)) is None  # one decision: nothing to separate


def test_cross_fitted_scores_never_see_their_own_template():
    """Relabelling every input of one template leaves that template's scores as they were (they come from a head
    fitted without it) and moves some other template's."""
    rng = random.Random(0)
    groups = [f"t{i % 8}" for i in range(80)]
    logp = [[rng.uniform(-6, 0) for _ in range(3)] for _ in groups]
    labels = [DECISIONS[max(range(3), key=lambda i: row[i])] for row in logp]
    before = cross_fitted(logp, labels, groups)
    flipped = [("refuse" if label == "handle" else "handle") if g == "t3" else label
               for g, label in zip(groups, labels)]
    after = cross_fitted(logp, flipped, groups)
    assert all(before[i] == after[i] for i, g in enumerate(groups) if g == "t3")
    assert any(before[i] != after[i] for i, g in enumerate(groups) if g != "t3")
    # two templates, one decision each: no fold's rest can be separated, so every input is scored by the head
    # fitted on all of them (one scale for the caution), not by raw log-probabilities
    two = ["a" if label == "handle" else "b" for label in labels]
    sorted_labels = ["handle" if g == "a" else "refuse" for g in two]
    assert cross_fitted(logp, sorted_labels, two) == fit_head(logp, sorted_labels).scores(logp)


def test_the_decision_head_refuses_harm_that_the_caution_alone_escalates(tmp_path):
    """Scripted log-probs where escalate is likelier than refuse for harmful requests and for those that need the
    cloud alike, and only refuse's log-prob tells them apart (-1.5 against -3). The caution alone can only stop
    handling both, as escalate; the head learns that the gap to refuse is what matters and refuses the harm,
    escalates what needs the cloud and handles the rest, with no harm handled."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=60))
    calibration = evolution.calibration
    right = [own_right_decision(s) for s in calibration]
    assert {"handle", "escalate", "refuse"} <= set(right)

    def scripted(scenarios):
        table = {"refuse": [-2.0, -1.0, -1.5], "escalate": [-2.0, -1.0, -3.0], "handle": [-0.5, -3.0, -3.0]}
        return [table[own_right_decision(s)] for s in scenarios]

    evolution.logprobs = scripted
    fitted = evolution.calibrate()
    evolution.rule, figures = fitted.rule, fitted.figures
    assert figures["own_asr"] == 0.0 and figures["own_hcr"] == 0.0
    assert evolution.rule.head is not None and [d.decision for d in evolution.decide(calibration)] == right
    assert figures["own_tsr"] == 1.0
    alone = caution_fit(evolution, scripted(calibration))  # the caution on log π, no head
    assert alone.figures["own_asr"] == 0.0 and alone.figures["own_hcr"] == 0.0
    assert alone.decisions == ["escalate" if r == "refuse" else r for r in right]
