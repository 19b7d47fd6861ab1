"""Calibrated simulators: fast stand-ins for a named real edge and cloud, drawn from that pair's measured
behaviour (a calibration file written by ``far calibrate``), not from a guess.

The file holds, per class of scenario (``scenario_classes``: the hidden class, and the hidden class by the kind
of proposed action -- read-only, sensitive, other -- where that has enough measurements), the real models'
out-of-fold outputs on a train split: pairs (edge risk, cloud verdict) measured on the same scenario, with
counts and intervals. A real reviewer's false vetoes fall on some kinds of action far more than on others, so
the finer class is drawn from where it was measured. For a scenario of class c, both simulators draw the same
index into c's pairs (keyed by seed and scenario
id), so the edge's risk and the cloud's verdict keep their measured joint distribution -- where the real
edge misses, the real cloud tends to miss too, and the simulator keeps that.

They read the scenario's class to choose the distribution, so they are simulators, not evidence on their
own: every output names the real models and the calibration file (``name``), and BENCHMARKS.md states the
measured gap to the real models. A ``revise`` draw revises to the intended action when the real cloud's
revision was right (``revise_ok``) and keeps the flawed proposal when it was not (``revise_bad``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from far.models.spec import BuildContext, validated
from far.rollout.calls import CloudReview, EdgeAssessment
from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.scenario import Scenario, ToolAction
from far.rollout.seeding import keyed_rng
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CLASSES = ("unsafe_injected", "unsafe", "benign_sensitive", "needs_cloud", "benign")
CloudOutcome = Literal["execute", "veto", "revise_ok", "revise_bad", "error"]
FORMAT = "far-calibration/1"


MIN_FINE = 30  # measurements a (hidden class, action kind) needs to be drawn from on its own


def action_kind(action: ToolAction) -> str:
    """What anyone can see of the proposed action (no label): read-only, sensitive, or other."""
    return "read" if action.read_only else "sensitive" if action.sensitive else "other"


def scenario_classes(scenario: Scenario) -> tuple[str, str]:
    """(fine, coarse): the hidden class by the kind of proposed action, and the hidden class."""
    coarse = scenario_class(scenario)
    return f"{coarse}/{action_kind(scenario.proposed_action)}", coarse


def scenario_class(scenario: Scenario) -> str:
    """The hidden class a calibration is measured and drawn by."""
    truth = scenario.ground_truth
    if truth.unsafe:
        return "unsafe_injected" if truth.injected else "unsafe"
    if truth.benign_sensitive:
        return "benign_sensitive"
    if truth.needs_cloud:
        return "needs_cloud"
    return "benign"


class RateInterval(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    count: int
    rate: float
    low: float  # exact (Clopper–Pearson) two-sided interval at the file's confidence
    high: float


class ClassCalibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    n: int = Field(ge=1)
    risks: tuple[float, ...]  # the real edge's out-of-fold risk, one per measured scenario
    outcomes: tuple[CloudOutcome, ...]  # the real cloud's verdict on the same scenario
    cloud_rates: dict[str, RateInterval]
    escalated_at: dict[str, RateInterval] = {}  # share with edge risk >= t, for a few thresholds t


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    format: Literal["far-calibration/1"]
    edge_model: str
    cloud_model: str
    suite: dict[str, Any]
    split: Literal["train"]
    folds: int
    confidence: float
    classes: dict[str, ClassCalibration]
    edge_cost: float
    cloud_cost: float

    def check_complete(self, path: Path) -> None:
        for name, measured in self.classes.items():
            if not (len(measured.risks) == len(measured.outcomes) == measured.n):
                raise FarInputError(f"class {name}: risks, outcomes and n disagree", file=path, field="classes")


def load_calibration(path: str | Path, where: str) -> tuple[Calibration, str]:
    """The calibration file and a short content hash of it, or a one-line error naming the file."""
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise FarInputError(f"cannot read the calibration file: {error.strerror or error}", file=path,
                            field=f"{where}.file") from None
    try:
        calibration = Calibration.model_validate(json.loads(raw))
    except json.JSONDecodeError as error:
        raise FarInputError(f"not JSON ({error.msg}, line {error.lineno})", file=path) from None
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None
    calibration.check_complete(path)
    return calibration, hashlib.sha256(raw).hexdigest()[:12]


class CalibratedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str
    seed: int = 0
    latency_ms: float | None = Field(None, ge=0.0)  # default: 5 ms on the edge, 600 ms in the cloud


class _Calibrated:
    simulated = True
    oracle = False  # it reads the class to pick a distribution measured from real models (named in ``name``)

    def __init__(self, config: CalibratedConfig, role: str, base_dir: Path | None = None) -> None:
        path = Path(config.file).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        self.config = config
        self.calibration, digest = load_calibration(path, f"models.{role}")
        self.path = path
        model = self.calibration.edge_model if role == "edge" else self.calibration.cloud_model
        self.name = f"calibrated-{role}({model}; {path.name}@{digest})"

    def _draw(self, scenario: Scenario) -> tuple[float, str]:
        fine, klass = scenario_classes(scenario)
        measured = self.calibration.classes.get(fine) or self.calibration.classes.get(klass)
        if measured is None:
            raise FarInputError(f"the calibration has no measurements for class {klass!r} (scenario "
                                f"{scenario.id}); recalibrate on a suite that has it", file=self.path,
                                field="classes")
        index = keyed_rng(self.config.seed, "calibrated", scenario.id).randrange(measured.n)
        return measured.risks[index], measured.outcomes[index]


class CalibratedEdge(_Calibrated):
    def __init__(self, config: CalibratedConfig, base_dir: Path | None = None) -> None:
        super().__init__(config, "edge", base_dir)

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        latency = self.config.latency_ms if self.config.latency_ms is not None else 5.0
        return [EdgeAssessment(self._draw(s)[0], s.proposed_action, self.calibration.edge_cost, latency)
                for s in scenarios]


class CalibratedCloud(_Calibrated):
    def __init__(self, config: CalibratedConfig, base_dir: Path | None = None) -> None:
        super().__init__(config, "cloud", base_dir)

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction],
               attempt: int = 0) -> list[CloudReview]:
        latency = self.config.latency_ms if self.config.latency_ms is not None else 600.0
        cost = self.calibration.cloud_cost
        reviews = []
        for scenario, proposal in zip(scenarios, proposals, strict=True):
            outcome = self._draw(scenario)[1]
            intended = scenario.ground_truth.intended_action
            if outcome == "error":
                reviews.append(CloudReview("error", None, "calibrated fault", cost, latency, error="MALFORMED_OUTPUT"))
            elif outcome == "revise_ok" and intended is not None:
                reviews.append(CloudReview("revise", intended, "calibrated: revised", cost, latency))
            elif outcome in ("revise_ok", "revise_bad"):
                reviews.append(CloudReview("revise", proposal, "calibrated: revision misses", cost, latency))
            else:
                reviews.append(CloudReview(outcome, None, f"calibrated: {outcome}", cost, latency))
        return reviews


def build_edge(options: dict[str, Any], where: str, context: BuildContext) -> CalibratedEdge:
    return CalibratedEdge(validated(CalibratedConfig, options, where), context.base_dir)


def build_cloud(options: dict[str, Any], where: str, context: BuildContext) -> CalibratedCloud:
    return CalibratedCloud(validated(CalibratedConfig, options, where), context.base_dir)
