"""``far calibrate CONFIG``: measure the config's real edge and cloud on the train split and write a calibration
file for the ``calibrated`` simulators (``far.models.calibrated``).

The measurement is out-of-fold: the train split's fitting data are cut into ``folds`` by group (the scenario's
template where the suite names one, else its request text; scikit-learn's ``GroupKFold``: a group never sits
on both sides), the learned models are fitted on all groups
but one and their outputs recorded on that one. So the rates are those of a model judging text it was not
fitted on -- as on holdout -- while holdout itself is never read (and train scenarios with holdout content
are dropped first, as for any fit).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from far.models.calibrated import (
    CLASSES,
    FORMAT,
    MIN_FINE,
    Calibration,
    ClassCalibration,
    RateInterval,
    scenario_classes,
)
from far.rollout.calls import ModelRecord, ModelSet
from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario, model_input
from far.search.evaluation.fitting import FitPlan, fit_data, group_folds, without_content
from far.search.ranking.gate import clopper_pearson_interval

OUTCOMES = ("execute", "veto", "revise_ok", "revise_bad", "error")
ESCALATION_THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.7)


def rate_interval(count: int, n: int, confidence: float) -> RateInterval:
    """count/n with its exact two-sided Clopper–Pearson interval at ``confidence``."""
    low, high = clopper_pearson_interval(count, n, confidence)
    return RateInterval(count=count, rate=count / n if n else 0.0, low=low, high=high)


def cloud_outcome(scenario: Scenario, record: ModelRecord) -> str:
    review = record.decisive_review
    if review.verdict != "revise":
        return review.verdict
    return "revise_ok" if review.revision == scenario.ground_truth.intended_action else "revise_bad"


def out_of_fold(models: ModelSet, data: Sequence[Scenario], folds: int, plan: FitPlan,
                progress: Callable[[str], None]) -> list[ModelRecord]:
    """Each scenario's model outputs from copies of the models fitted without its group (template or text)."""
    parts = group_folds(data, folds)
    if len(parts) < folds:
        raise FarInputError(f"{len({s.group_key for s in data})} distinct templates or texts in train: too few for "
                            f"{folds} folds", field="--folds")
    records: list[ModelRecord | None] = [None] * len(data)
    for fold, (fit_index, measure_index) in enumerate(parts):
        progress(f"  fold {fold + 1}/{folds}: fit on {len(fit_index)}, measure {len(measure_index)}")
        fold_data = [data[i] for i in fit_index]
        fold_models = models.refitted(fold_data, by_role=plan.by_role(fold_data), progress=progress)
        for i, record in zip(measure_index, fold_models.record([data[i] for i in measure_index]), strict=True):
            records[i] = record
    return records  # type: ignore[return-value]


def calibrate(suite: Any, models: ModelSet, folds: int, confidence: float, progress: Callable[[str], None],
              fit_on: dict[str, Any] | None = None) -> Calibration:
    if models.simulated or models.oracle_roles:
        raise FarInputError("calibrate measures real models: the config's edge and cloud must not be simulators "
                            f"(edge {models.edge.name}, cloud {models.cloud.name})", field="models")
    holdout = {model_input(s) for s in fit_data(suite, "holdout", progress)}
    data, dropped = without_content(fit_data(suite, "train", progress), holdout)
    plan = FitPlan(fit_on or {}, holdout, progress)
    progress(f"far calibrate: {len(data)} train scenarios ({dropped} dropped: same content as holdout), "
             f"{folds} folds; edge {models.edge.name}, cloud {models.cloud.name}")
    records = out_of_fold(models, data, folds, plan, progress)
    by_class: dict[str, list[tuple[float, str]]] = {}
    for scenario, record in zip(data, records, strict=True):
        pair = (record.edge.risk, cloud_outcome(scenario, record))
        for name in scenario_classes(scenario):
            by_class.setdefault(name, []).append(pair)
    classes = {}
    fine = sorted(name for name in by_class if "/" in name and len(by_class[name]) >= MIN_FINE)
    for name in [*CLASSES, *fine]:
        pairs = by_class.get(name)
        if not pairs:
            continue
        n = len(pairs)
        risks = np.array([risk for risk, _ in pairs])
        counts = Counter(outcome for _, outcome in pairs)
        classes[name] = ClassCalibration(
            n=n, risks=tuple(round(float(r), 6) for r in risks), outcomes=tuple(o for _, o in pairs),
            cloud_rates={o: rate_interval(counts.get(o, 0), n, confidence) for o in OUTCOMES},
            escalated_at={f"{t:g}": rate_interval(int((risks >= t).sum()), n, confidence)
                          for t in ESCALATION_THRESHOLDS},
        )
    first = records[0]
    return Calibration(format=FORMAT, edge_model=models.edge.name, cloud_model=models.cloud.name,
                       suite=suite.describe(), split="train", folds=folds, confidence=confidence, classes=classes,
                       edge_cost=first.edge.cost, cloud_cost=first.cloud[0].cost)


def calibration_table(calibration: Calibration) -> str:
    """Per class: n, the cloud's veto / execute rates and the edge's escalation rate at 0.3, with intervals."""
    def cell(rate: RateInterval) -> str:
        return f"{rate.rate:6.1%} [{rate.low:.1%}, {rate.high:.1%}]"

    lines = [f"{'class':<17}{'n':>6}  {'cloud veto':<24}{'cloud execute':<24}{'edge risk >= 0.3':<24}"]
    for name, measured in calibration.classes.items():
        lines.append(f"{name:<17}{measured.n:>6}  {cell(measured.cloud_rates['veto']):<24}"
                     f"{cell(measured.cloud_rates['execute']):<24}{cell(measured.escalated_at['0.3']):<24}")
    return "\n".join(lines)
