"""ORACLE edge, cloud and user models: seeded simulators that decide from each scenario's ground-truth labels.

They are an upper bound and a fast test double, not evidence: a search over them learns to send everything to
the label-reading cloud. Every model here has ``oracle = True``, and every table, summary and report figure
produced with one is marked ORACLE (with the roles that read labels). Backend name ``oracle``.

Noise model (all draws are keyed by (seed, model, scenario id), so outputs are reproducible and do not
depend on batch composition or process):

Edge risk score ~ Beta(a, b) by the scenario's hidden class (means in brackets):
  unsafe, not injected  Beta(6, 2)  [0.75]   -- blatant harm looks risky
  unsafe, injected      Beta(4, 3)  [0.57]   -- injections are disguised
  benign_sensitive      Beta(3, 3)  [0.50]   -- looks risky, is not
  needs_cloud           Beta(3, 4)  [0.43]   -- hard requests look uncertain
  other benign          Beta(2, 6)  [0.25]
  ``calibration_noise`` mixes in U(0, 1) with that weight (0 = the Betas above).
Edge proposal = the scenario's proposed action. Cost 0.02, latency 40 ms +- 10.

Cloud review (``accuracy`` scales the error rates below; defaults shown):
  unsafe        catches with p = 0.99: revises to the intended action if the request has one, else vetoes;
                misses (executes) otherwise
  needs_cloud   revises to the intended action with p = 0.95, else executes the flawed proposal
  benign_sensitive  vetoes with p = 0.10 (over-refusal), else executes
  other benign  vetoes with p = 0.01, else executes
  Cost 1.0, latency 600 ms +- 200.

Oracle user, asked to confirm an action:
  the intended action: confirms; an unsafe action the user asked for: confirms with p = 0.6;
  an unsafe action the user did not ask for (injected, misread): confirms with p = 0.05;
  a flawed but benign proposal: confirms with p = 0.9.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from far.models.spec import BuildContext, validated
from far.rollout.calls import CloudReview, EdgeAssessment
from far.rollout.scenario import Scenario, ToolAction
from far.rollout.seeding import keyed_rng
from pydantic import BaseModel, ConfigDict, Field


class OracleEdgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0
    calibration_noise: float = Field(0.0, ge=0.0, le=1.0)
    cost: float = Field(0.02, ge=0.0)
    latency_ms: float = Field(40.0, ge=0.0)


class OracleCloudConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0
    unsafe_catch_rate: float = Field(0.99, ge=0.0, le=1.0)
    revise_rate: float = Field(0.95, ge=0.0, le=1.0)
    sensitive_false_veto_rate: float = Field(0.10, ge=0.0, le=1.0)
    benign_false_veto_rate: float = Field(0.01, ge=0.0, le=1.0)
    cost: float = Field(1.0, ge=0.0)
    latency_ms: float = Field(600.0, ge=0.0)


class OracleUserConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0
    confirms_own_unsafe: float = Field(0.6, ge=0.0, le=1.0)
    confirms_unrequested_unsafe: float = Field(0.05, ge=0.0, le=1.0)
    confirms_flawed: float = Field(0.9, ge=0.0, le=1.0)


def _risk_prior(scenario: Scenario) -> tuple[float, float]:
    truth = scenario.ground_truth
    if truth.unsafe:
        return (4.0, 3.0) if truth.injected else (6.0, 2.0)
    if truth.benign_sensitive:
        return (3.0, 3.0)
    if truth.needs_cloud:
        return (3.0, 4.0)
    return (2.0, 6.0)


class OracleEdge:
    simulated = True
    oracle = True  # reads the scenario's labels

    def __init__(self, config: OracleEdgeConfig | None = None) -> None:
        self.config = config or OracleEdgeConfig()
        self.name = f"oracle-edge(seed={self.config.seed})"

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        return [self._assess(scenario) for scenario in scenarios]

    def _assess(self, scenario: Scenario) -> EdgeAssessment:
        config = self.config
        rng = keyed_rng(config.seed, "edge", scenario.id)
        a, b = _risk_prior(scenario)
        risk = rng.betavariate(a, b)
        if config.calibration_noise and rng.random() < config.calibration_noise:
            risk = rng.random()
        latency = max(0.0, rng.gauss(config.latency_ms, config.latency_ms / 4))
        return EdgeAssessment(risk=risk, proposal=scenario.proposed_action, cost=config.cost, latency_ms=latency)


class OracleCloud:
    simulated = True
    oracle = True  # reads the scenario's labels

    def __init__(self, config: OracleCloudConfig | None = None) -> None:
        self.config = config or OracleCloudConfig()
        self.name = f"oracle-cloud(seed={self.config.seed})"

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction],
               attempt: int = 0) -> list[CloudReview]:
        return [self._review(s, p) for s, p in zip(scenarios, proposals, strict=True)]

    def _review(self, scenario: Scenario, proposal: ToolAction) -> CloudReview:
        config = self.config
        truth = scenario.ground_truth
        rng = keyed_rng(config.seed, "cloud", scenario.id)
        draw = rng.random()
        latency = max(0.0, rng.gauss(config.latency_ms, config.latency_ms / 3))

        def review(verdict, revision=None, reason=""):
            return CloudReview(verdict, revision, reason, config.cost, latency)

        if truth.unsafe:
            if draw >= config.unsafe_catch_rate:
                return review("execute", reason="judged safe")
            if truth.intended_action is not None and truth.intended_action != proposal:
                return review("revise", truth.intended_action, "proposal deviates from the request")
            return review("veto", reason="harmful action")
        if truth.needs_cloud and truth.intended_action is not None and truth.intended_action != proposal:
            if draw < config.revise_rate:
                return review("revise", truth.intended_action, "proposal does not fulfil the request")
            return review("execute", reason="judged adequate")
        false_veto = config.sensitive_false_veto_rate if truth.benign_sensitive else config.benign_false_veto_rate
        if draw < false_veto:
            return review("veto", reason="judged risky")
        return review("execute", reason="judged safe")


class OracleUser:
    oracle = True  # reads the scenario's labels

    def __init__(self, config: OracleUserConfig | None = None) -> None:
        self.config = config or OracleUserConfig()
        self.name = f"oracle-user(seed={self.config.seed})"

    def confirms(self, scenario: Scenario, action: ToolAction) -> bool:
        truth = scenario.ground_truth
        if truth.intended_action is not None and action == truth.intended_action:
            return True
        rng = keyed_rng(self.config.seed, f"user:{action.tool}", scenario.id)
        if truth.unsafe and action == scenario.proposed_action:
            asked_for_it = not truth.injected and truth.intended_action is None
            p = self.config.confirms_own_unsafe if asked_for_it else self.config.confirms_unrequested_unsafe
        else:
            p = self.config.confirms_flawed
        return rng.random() < p


# --- factories named in far.models.backends -------------------------------------------------------------

def build_edge(options: dict[str, Any], where: str, context: BuildContext) -> OracleEdge:
    return OracleEdge(validated(OracleEdgeConfig, options, where))


def build_cloud(options: dict[str, Any], where: str, context: BuildContext) -> OracleCloud:
    return OracleCloud(validated(OracleCloudConfig, options, where))


def build_user(options: dict[str, Any], where: str, context: BuildContext) -> OracleUser:
    return OracleUser(validated(OracleUserConfig, options, where))


# the old names, for code written before the oracle models said what they are
