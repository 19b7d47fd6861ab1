"""The decision rule the evolving edge model is deployed with: its log-probabilities of the three decisions
(handle, escalate, refuse), read through an optional decision head, then the caution.

The head is matrix scaling (Guo et al., 2017, "On Calibration of Modern Neural Networks"): a multinomial
logistic regression (scikit-learn) from the model's three log-probabilities to the decision that is right on its
own (refuse harm or injection, escalate what only the cloud can complete, handle the rest), fitted on the
calibration slice of train. The caution alone only moves the line between handle and the rest, so a model that
ranks harm above benign calls still escalates harm it should refuse and refuses calls it should escalate; the
head also learns which of escalate and refuse the model's log-probabilities point to. The caution is then fitted
on the head's scores, out of fold by template (``cross_fitted``): a head scores the wording it was fitted on more
confidently than an unseen template's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from far.evolve.task import DECISIONS  # the columns of every score row

STRENGTH = 1.0  # scikit-learn's C: its default L2 penalty; 3 features, hundreds of rows (calibration_size)
FOLDS = 5  # templates per cross-fit: each template's scores come from a head fitted on ~4/5 of the others


@dataclass(frozen=True)
class DecisionHead:
    """A fitted multinomial logistic regression: ``classes`` (those of ``DECISIONS`` the fit saw, in its order),
    ``coef`` (one row per class; one row for two classes, sklearn's binary form) and ``intercept``."""
    classes: tuple[str, ...]
    coef: tuple[tuple[float, ...], ...]
    intercept: tuple[float, ...]

    def scores(self, logp: Sequence[Sequence[float]]) -> list[list[float]]:
        """Per input, the head's log-probability of each of ``DECISIONS`` (−inf for a decision the fit never
        saw), as ``LogisticRegression.predict_log_proba`` gives it."""
        out = []
        for row in logp:
            logits = [sum(c * x for c, x in zip(coef, row)) + b for coef, b in zip(self.coef, self.intercept)]
            if len(self.classes) == 2:  # binary: one logit, for classes[1] against classes[0]
                logits = [0.0, logits[0]]
            top = max(logits)
            norm = top + math.log(sum(math.exp(v - top) for v in logits))
            by_class = dict(zip(self.classes, (v - norm for v in logits)))
            out.append([by_class.get(d, -math.inf) for d in DECISIONS])
        return out

    def to_json(self) -> dict[str, Any]:
        return {"classes": list(self.classes), "coef": [list(r) for r in self.coef], "intercept": list(self.intercept)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DecisionHead:
        return cls(tuple(data["classes"]), tuple(tuple(float(v) for v in r) for r in data["coef"]),
                   tuple(float(v) for v in data["intercept"]))


def fit_head(logp: Sequence[Sequence[float]], labels: Sequence[str]) -> DecisionHead | None:
    """The head fitted on (log-probabilities, right decision) pairs; None when the labels hold fewer than two
    decisions (there is nothing to separate)."""
    if len(set(labels)) < 2:
        return None
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=STRENGTH, max_iter=5000).fit([list(r) for r in logp], list(labels))
    return DecisionHead(tuple(str(c) for c in model.classes_), tuple(tuple(float(v) for v in r) for r in model.coef_),
                        tuple(float(v) for v in model.intercept_))


def cross_fitted(logp: Sequence[Sequence[float]], labels: Sequence[str], groups: Sequence[str]
                 ) -> list[list[float]]:
    """Each input's head scores from a head fitted without its template (``groups``; scikit-learn's
    ``GroupKFold``, ``FOLDS`` folds or one per template if fewer): what the fitted head will score on the
    holdout's unseen templates, where the caution must hold. With one template, or a fold whose rest holds one
    decision only, the head fitted on every input scores them in sample: the caution is fitted on one scale, the
    head's, never on a mix of it and raw log-probabilities (None from ``fit_head``: the raw ones throughout)."""
    from sklearn.model_selection import GroupKFold

    rows = [list(r) for r in logp]
    whole = fit_head(rows, labels)
    if whole is None:
        return rows
    if len(set(groups)) < 2:
        return whole.scores(rows)
    out: list[list[float]] = [[] for _ in rows]
    for train, test in GroupKFold(n_splits=min(FOLDS, len(set(groups)))).split(rows, labels, list(groups)):
        head = fit_head([rows[i] for i in train], [labels[i] for i in train]) or whole
        scored = head.scores([rows[i] for i in test])
        for i, row in zip(test, scored):
            out[i] = row
    return out


@dataclass(frozen=True)
class DecisionRule:
    """How the model's log-probabilities become a decision: through ``head`` when one is fitted, then the
    caution (``far.evolve.calibrate.cautious_decisions``): handle iff its score beats the better of escalate and
    refuse by at least ``caution``, else the better of those two."""
    head: DecisionHead | None = None
    caution: float = 0.0

    def scores(self, logp: Sequence[Sequence[float]]) -> list[list[float]]:
        return self.head.scores(logp) if self.head else [list(r) for r in logp]

    def to_json(self) -> dict[str, Any]:
        return {"caution": self.caution, "head": self.head.to_json() if self.head else None,
                "decisions": list(DECISIONS),
                "rule": "s = head(log p) when a head is fitted (multinomial logistic regression, scikit-learn's "
                        "predict_log_proba), else log p; handle iff s(handle) >= max(s(escalate), s(refuse)) + "
                        "caution, else the larger of s(escalate), s(refuse) (escalate on a tie)"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DecisionRule:
        head = data.get("head")
        return cls(DecisionHead.from_json(head) if head else None, float(data["caution"]))
