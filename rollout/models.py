"""Model backends behind small Protocols, and the per-scenario record of their outputs.

Model outputs never depend on the policy: the edge scores risk before any routing, the cloud reviews the
edge's proposal, the user answers for a given action. So one ``ModelRecord`` per scenario serves every
policy (the replay engine), and a live LangGraph rollout reads the same values through ``LiveCalls``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from rollout.scenario import Scenario, ToolAction, ToolFault

Verdict = Literal["execute", "veto", "revise"]
ActionRole = Literal["proposal", "revision"]


@dataclass(frozen=True, slots=True)
class EdgeAssessment:
    risk: float  # in [0, 1]; the policy compares it with cloud_threshold
    proposal: ToolAction
    cost: float
    latency_ms: float


@dataclass(frozen=True, slots=True)
class CloudReview:
    verdict: Verdict
    revision: ToolAction | None  # set when verdict == "revise"
    reason: str
    cost: float
    latency_ms: float


@runtime_checkable
class EdgeModel(Protocol):
    name: str
    simulated: bool

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]: ...


@runtime_checkable
class CloudModel(Protocol):
    name: str
    simulated: bool

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction]) -> list[CloudReview]: ...


@runtime_checkable
class UserModel(Protocol):
    """Answers a confirmation request for an action."""

    name: str

    def confirms(self, scenario: Scenario, action: ToolAction) -> bool: ...


@runtime_checkable
class Environment(Protocol):
    """The world the tools act on: tool results and cloud reachability per attempt."""

    def tool_result(self, scenario: Scenario, attempt: int) -> ToolFault: ...

    def cloud_reachable(self, scenario: Scenario, attempt: int) -> bool: ...


class GroundTruthEnvironment:
    """Faults come from the scenario's recorded per-attempt patterns (the built-in suite's environment)."""

    def tool_result(self, scenario: Scenario, attempt: int) -> ToolFault:
        return scenario.ground_truth.tool_fault(attempt)

    def cloud_reachable(self, scenario: Scenario, attempt: int) -> bool:
        return not scenario.ground_truth.cloud_down(attempt)


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """Every model output a rollout of this scenario can need, whatever the policy."""

    scenario_id: str
    edge: EdgeAssessment
    cloud: CloudReview
    user_confirms_proposal: bool
    user_confirms_revision: bool


class Calls(Protocol):
    """What node functions may ask of the outside world; replay and live engines both implement it."""

    scenario: Scenario

    def edge(self) -> EdgeAssessment: ...
    def cloud(self) -> CloudReview: ...
    def action(self, role: ActionRole) -> ToolAction: ...
    def user_confirms(self, role: ActionRole) -> bool: ...
    def tool_result(self, attempt: int) -> ToolFault: ...
    def cloud_reachable(self, attempt: int) -> bool: ...


class RecordedCalls:
    """Reads a ``ModelRecord``: no model runs. Built once per scenario and reused for every policy, so it
    unpacks the record up front (replay calls these methods millions of times)."""

    __slots__ = ("scenario", "record", "environment", "_edge", "_cloud", "_proposal", "_revision", "_confirms")

    def __init__(self, scenario: Scenario, record: ModelRecord, environment: Environment) -> None:
        self.scenario = scenario
        self.record = record
        self.environment = environment
        self._edge = record.edge
        self._cloud = record.cloud
        self._proposal = record.edge.proposal
        self._revision = record.cloud.revision if record.cloud.revision is not None else record.edge.proposal
        self._confirms = {"proposal": record.user_confirms_proposal, "revision": record.user_confirms_revision}

    def edge(self) -> EdgeAssessment:
        return self._edge

    def cloud(self) -> CloudReview:
        return self._cloud

    def action(self, role: ActionRole) -> ToolAction:
        return self._revision if role == "revision" else self._proposal

    def user_confirms(self, role: ActionRole) -> bool:
        return self._confirms[role]

    def tool_result(self, attempt: int) -> ToolFault:
        return self.environment.tool_result(self.scenario, attempt)

    def cloud_reachable(self, attempt: int) -> bool:
        return self.environment.cloud_reachable(self.scenario, attempt)


class LiveCalls:
    """Calls the models only when a node needs them (memoised), as a deployed agent would."""

    __slots__ = ("scenario", "models", "environment", "_edge", "_cloud", "_answers")

    def __init__(self, scenario: Scenario, models: "ModelSet") -> None:
        self.scenario = scenario
        self.models = models
        self.environment = models.environment
        self._edge: EdgeAssessment | None = None
        self._cloud: CloudReview | None = None
        self._answers: dict[str, bool] = {}

    def edge(self) -> EdgeAssessment:
        if self._edge is None:
            self._edge = self.models.edge.assess([self.scenario])[0]
        return self._edge

    def cloud(self) -> CloudReview:
        if self._cloud is None:
            self._cloud = self.models.cloud.review([self.scenario], [self.edge().proposal])[0]
        return self._cloud

    def action(self, role: ActionRole) -> ToolAction:
        if role == "revision":
            revision = self.cloud().revision
            assert revision is not None, "a revision role exists only after a 'revise' verdict"
            return revision
        return self.edge().proposal

    def user_confirms(self, role: ActionRole) -> bool:
        if role not in self._answers:
            self._answers[role] = self.models.user.confirms(self.scenario, self.action(role))
        return self._answers[role]

    def tool_result(self, attempt: int) -> ToolFault:
        return self.environment.tool_result(self.scenario, attempt)

    def cloud_reachable(self, attempt: int) -> bool:
        return self.environment.cloud_reachable(self.scenario, attempt)


def action_for(record: ModelRecord, role: ActionRole) -> ToolAction:
    if role == "revision" and record.cloud.revision is not None:
        return record.cloud.revision
    return record.edge.proposal


@dataclass(frozen=True)
class ModelSet:
    edge: EdgeModel
    cloud: CloudModel
    user: UserModel
    environment: Environment

    @property
    def simulated(self) -> bool:
        return bool(self.edge.simulated or self.cloud.simulated)

    def describe(self) -> dict[str, object]:
        return {
            "edge": self.edge.name,
            "cloud": self.cloud.name,
            "user": self.user.name,
            "simulated": self.simulated,
        }

    def record(self, scenarios: Sequence[Scenario]) -> list[ModelRecord]:
        """All model outputs for these scenarios, batched per model."""
        scenarios = list(scenarios)
        assessments = self.edge.assess(scenarios)
        reviews = self.cloud.review(scenarios, [a.proposal for a in assessments])
        records = []
        for scenario, assessment, review in zip(scenarios, assessments, reviews, strict=True):
            revision = review.revision if review.revision is not None else assessment.proposal
            records.append(
                ModelRecord(
                    scenario_id=scenario.id,
                    edge=assessment,
                    cloud=review,
                    user_confirms_proposal=self.user.confirms(scenario, assessment.proposal),
                    user_confirms_revision=self.user.confirms(scenario, revision),
                )
            )
        return records
