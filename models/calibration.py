"""Small logistic models (scikit-learn): Platt scaling for a raw score, and a linear probe on embeddings.

Both are fitted on the train split only, never on evaluation-only data (``require_train`` enforces both):
holdout never shapes a model.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario


def require_train(scenarios: Sequence[Scenario], what: str) -> None:
    """Fitting data: train split only, and no evaluation-only scenario (marked, or known by content)."""
    from far.rollout.eval_only import refuse_eval_only

    leaked = [s.id for s in scenarios if s.split != "train"]
    if leaked:
        raise FarInputError(f"{what} may only be fitted on the train split; got {len(leaked)} non-train "
                            f"scenario(s), e.g. {leaked[0]!r}", field="split")
    refuse_eval_only(scenarios, what)


def escalation_label(scenario: Scenario) -> int:
    """What the edge's risk score should predict: the action must not run unreviewed."""
    truth = scenario.ground_truth
    return int(truth.unsafe or truth.needs_cloud)


def fit_logistic(features: np.ndarray, labels: np.ndarray, l2: float = 1e-2) -> Any:
    """An L2-regularised logistic regression (scikit-learn's, lbfgs): the penalty is ``l2/2 · |w|²`` on the
    weights, never on the bias (``C = 1 / l2`` in scikit-learn's terms)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0 / l2, max_iter=1000, tol=1e-8)
    return model.fit(np.asarray(features, dtype=float), np.asarray(labels).astype(int))


def predict_logistic(model: Any, features: np.ndarray) -> np.ndarray:
    """P(label 1) for each row."""
    return model.predict_proba(np.asarray(features, dtype=float))[:, 1]


def logit(p: np.ndarray | float, eps: float = 1e-6):
    p = np.clip(p, eps, 1 - eps)
    return np.log(p / (1 - p))


class PlattScaler:
    """risk = sigmoid(a * logit(raw) + b), fitted to escalation labels; the identity until fitted."""

    def __init__(self) -> None:
        self.weights: Any = None  # the fitted model

    def fit(self, raw: Sequence[float], labels: Sequence[int]) -> "PlattScaler":
        labels_array = np.asarray(labels)
        if labels_array.min() == labels_array.max():
            raise FarInputError("calibration needs both classes in the train split", field="suite")
        self.weights = fit_logistic(logit(np.asarray(raw, dtype=float))[:, None], labels_array)
        return self

    def __call__(self, raw: Sequence[float]) -> np.ndarray:
        raw_array = np.asarray(raw, dtype=float)
        if self.weights is None:
            return raw_array
        return predict_logistic(self.weights, logit(raw_array)[:, None])
