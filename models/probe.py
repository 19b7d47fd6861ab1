"""A linear probe on a frozen text encoder: what the learned edge and the learned reviewer are made of.

The text a probe sees is ``probe_text``: the proposed action first, then the user's request (with whatever
content the suite appends to it). Encoders truncate, so the action must come first; and the same function
makes the text at fit and at run time.

The fitted probe (scikit-learn's ``StandardScaler`` then ``LogisticRegression``: hidden states have large,
uneven scales, and unscaled lbfgs ran out of iterations on SmolLM2's) is stored in the data dir under a content hash of
(encoder id, probe options, the fitting texts and labels): refitting on the same data is a file read, and
any change to model, data or options fits anew. Fitting reads the train split only (``require_train``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from far.models.calibration import require_train
from far.models.encoders import CachedEncoder, Progress, build_encoder
from far.rollout.errors import FarInputError
from far.rollout.io import write_json_atomic
from far.rollout.progress import rate_reporter
from far.rollout.scenario import Scenario, ToolAction

FitProgress = Callable[[str], None]


def action_text(action: ToolAction) -> str:
    return json.dumps({"tool": action.tool, "args": action.args}, sort_keys=True)


def probe_text(scenario: Scenario, proposal: ToolAction | None = None) -> str:
    """Action first: a truncating encoder then always sees what it judges."""
    return f"Proposed action: {action_text(proposal or scenario.proposed_action)}\nUser request: {scenario.request}"


class LinearProbe:
    """P(label = 1 | text) = sigmoid(w · encode(text) + b), fitted on train texts."""

    def __init__(self, encoder: CachedEncoder, l2: float = 1.0, class_weight: str | None = None,
                 what: str = "probe") -> None:
        self.encoder = encoder
        self.l2 = l2
        self.class_weight = class_weight
        self.what = what
        self.coef: np.ndarray | None = None  # on standardised features
        self.intercept = 0.0
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.fit_key: str | None = None

    def _key(self, texts: Sequence[str], labels: Sequence[int]) -> str:
        digest = hashlib.sha256()
        digest.update(json.dumps({"encoder": self.encoder.model_id, "l2": self.l2, "class_weight": self.class_weight,
                                  "v": 2}, sort_keys=True).encode())
        for text, label in sorted(zip(texts, labels)):  # the data, not its order, decides the fit
            digest.update(f"{label}\t{text}\0".encode())
        return digest.hexdigest()

    def fit(self, scenarios: Sequence[Scenario], label: Callable[[Scenario], int],
            progress: FitProgress | None = None) -> None:
        from far.models.weights import data_dir

        require_train(scenarios, self.what)
        texts = [probe_text(s) for s in scenarios]
        labels = [int(label(s)) for s in scenarios]
        if len(set(labels)) < 2:
            raise FarInputError(f"{self.what} needs both classes in its fitting data", field="suite")
        key = self._key(texts, labels)
        stored = data_dir() / "probes" / f"{key}.json"
        if stored.is_file():
            data = json.loads(stored.read_text())
            self.mean, self.scale = np.asarray(data["mean"]), np.asarray(data["scale"])
            self.coef, self.intercept, self.fit_key = np.asarray(data["coef"]), float(data["intercept"]), key
            return
        report: Progress | None = None
        if progress is not None:
            report = rate_reporter(progress, f"    {self.what}: encoding distinct texts")
        features = self.encoder.encode(texts, progress=report)
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit(features.astype(float))
        model = LogisticRegression(C=1.0 / self.l2, class_weight=self.class_weight, max_iter=2000, tol=1e-6)
        model.fit(scaler.transform(features.astype(float)), np.asarray(labels))
        self.mean, self.scale = scaler.mean_, scaler.scale_
        self.coef, self.intercept, self.fit_key = model.coef_[0].astype(float), float(model.intercept_[0]), key
        write_json_atomic(stored, {"encoder": self.encoder.model_id, "l2": self.l2, "class_weight": self.class_weight,
                                   "n": len(labels), "positives": int(sum(labels)), "mean": self.mean.tolist(),
                                   "scale": self.scale.tolist(), "coef": self.coef.tolist(),
                                   "intercept": self.intercept})

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        if self.coef is None:
            raise FarInputError(f"{self.what} must be fitted on a train split before it scores", field="models")
        features = (self.encoder.encode(texts).astype(float) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-(features @ self.coef + self.intercept)))


class ProbeBacked:
    """What the probe-backed edge and cloud share: an encoder behind the call cache, a probe on it, and the
    label the probe learns (``label``, set by each backend)."""

    simulated = False
    oracle = False
    label: Callable[[Scenario], int]

    def __init__(self, encoder: str, encoder_options: dict, cache: Any, l2: float, class_weight: str | None,
                 what: str, where: str) -> None:
        model = build_encoder(encoder, encoder_options, where)
        self.encoder = CachedEncoder(model, cache)
        self.probe = LinearProbe(self.encoder, l2=l2, class_weight=class_weight, what=what)
        self.model_id = model.model_id
        self.precision = model.precision

    @property
    def stats(self):  # the call cache's hits and misses, as every cached backend reports them
        return self.encoder.stats

    def fit(self, scenarios: Sequence[Scenario], progress: FitProgress | None = None) -> None:
        probe = LinearProbe(self.encoder, l2=self.probe.l2, class_weight=self.probe.class_weight, what=self.probe.what)
        probe.fit(scenarios, type(self).label, progress)
        self.probe = probe  # rebound, not mutated: a copy fitted anew leaves the original as it was
