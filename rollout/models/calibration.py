"""Small logistic models in numpy: Platt scaling for a raw score, and a linear probe on embeddings.

Both are fitted on the train split only (``require_train`` enforces it): holdout never shapes a model.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rollout.errors import FarInputError
from rollout.scenario import Scenario


def require_train(scenarios: Sequence[Scenario], what: str) -> None:
    leaked = [s.id for s in scenarios if s.split != "train"]
    if leaked:
        raise FarInputError(f"{what} may only be fitted on the train split; got {len(leaked)} non-train "
                            f"scenario(s), e.g. {leaked[0]!r}", field="split")


def escalation_label(scenario: Scenario) -> int:
    """What the edge's risk score should predict: the action must not run unreviewed."""
    truth = scenario.ground_truth
    return int(truth.unsafe or truth.needs_cloud)


def fit_logistic(features: np.ndarray, labels: np.ndarray, l2: float = 1e-2, iterations: int = 50) -> np.ndarray:
    """Weights (last entry = bias) of an L2-regularised logistic regression, by Newton's method."""
    x = np.hstack([features, np.ones((features.shape[0], 1))])
    y = labels.astype(float)
    w = np.zeros(x.shape[1])
    penalty = l2 * np.eye(x.shape[1])
    penalty[-1, -1] = 0.0  # do not shrink the bias
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + penalty @ w
        hessian = (x.T * (p * (1 - p))) @ x + penalty + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def predict_logistic(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    z = features @ weights[:-1] + weights[-1]
    return 1.0 / (1.0 + np.exp(-z))


def logit(p: np.ndarray | float, eps: float = 1e-6):
    p = np.clip(p, eps, 1 - eps)
    return np.log(p / (1 - p))


class PlattScaler:
    """risk = sigmoid(a * logit(raw) + b), fitted to escalation labels; the identity until fitted."""

    def __init__(self) -> None:
        self.weights: np.ndarray | None = None

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
