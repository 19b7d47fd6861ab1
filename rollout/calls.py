"""What the agent's nodes ask of the outside world: the model Protocols (edge, cloud, user, environment), their
outputs, and the per-scenario record of those outputs. The backends themselves live in ``far.models``.

Model outputs never depend on the policy: the edge scores risk before any routing, the cloud reviews the
edge's proposal, the user answers for a given action. So one ``ModelRecord`` per scenario serves every
policy (the replay engine), and a live LangGraph rollout reads the same values through ``LiveCalls``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, runtime_checkable

from far.rollout.provenance import content_driven, untrusted_roles
from far.rollout.scenario import Scenario, ToolAction, ToolFault

Verdict = Literal["execute", "veto", "revise", "error"]
ActionRole = Literal["proposal", "revision"]
# A fault that persisted over this many model attempts is treated as persistent (the last answer repeats).
MAX_RECORDED_MODEL_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class EdgeAssessment:
    risk: float  # in [0, 1]; the policy compares it with cloud_threshold
    proposal: ToolAction
    cost: float
    latency_ms: float
    error: str | None = None  # a model fault (see ModelFault in far.models.lm); the edge fails closed (risk 1)


@dataclass(frozen=True, slots=True)
class CloudReview:
    verdict: Verdict  # "error" when the call faulted
    revision: ToolAction | None  # set when verdict == "revise"
    reason: str
    cost: float
    latency_ms: float
    error: str | None = None  # the fault class when verdict == "error"


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the policy's rules read of the edge's proposed call, from the observable trace alone: its kind,
    whether read content chose a sensitive argument (``far.rollout.provenance``), whether it acts (is not read-only)
    through a tool outside the scope predicted from the request (False when no scope model runs), and which
    argument roles came from untrusted read content only: a target or payload of a call with effects, a
    target of a read (``far.rollout.provenance.untrusted_roles``). Reading is left out of the scope rule: harm goes
    through calls with effects, and the thresholds of read-only calls already decide whether reading is
    reviewed."""

    kind: str
    content_driven: bool
    out_of_scope: bool
    untrusted_target: bool = False
    untrusted_payload: bool = False
    untrusted_read: bool = False


def call_facts(scenario: Scenario, proposal: ToolAction, scope: tuple[str, ...] | None) -> CallFacts:
    untrusted = untrusted_roles(scenario, proposal)
    acts = not proposal.read_only
    return CallFacts(proposal.kind, content_driven(scenario, proposal),
                     scope is not None and acts and proposal.tool not in scope,
                     untrusted_target=acts and "target" in untrusted,
                     untrusted_payload=acts and "payload" in untrusted,
                     untrusted_read=not acts and "target" in untrusted)


@runtime_checkable
class ScopeModel(Protocol):
    """Predicts, from the user's request alone (before any tool output is read), the tools the task needs."""

    name: str

    def predict(self, scenarios: Sequence[Scenario]) -> list[tuple[str, ...]]: ...


@runtime_checkable
class Fittable(Protocol):
    """A backend with parameters fitted on a train split (and only on one); ``progress(message)`` for long fits.

    ``fit`` rebinds the fitted state rather than mutating it in place, so a shallow copy fitted anew leaves
    the original as it was (``ModelSet.refitted``: out-of-fold records)."""

    def fit(self, scenarios: Sequence[Scenario], progress: Callable[[str], None] | None = None) -> None: ...


@runtime_checkable
class EdgeModel(Protocol):
    name: str
    simulated: bool
    oracle: bool  # decides from the scenario's ground-truth labels (an upper bound, never evidence)

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]: ...


@runtime_checkable
class CloudModel(Protocol):
    name: str
    simulated: bool
    oracle: bool

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction],
               attempt: int = 0) -> list[CloudReview]:
        """``attempt`` > 0 asks again after a fault (a real backend re-samples with another seed)."""
        ...


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
    """Every model output a rollout of this scenario can need, whatever the policy.

    ``cloud`` holds the review of each model attempt: a faulted attempt is followed by the next one, up to
    ``MAX_RECORDED_MODEL_ATTEMPTS``; later attempts repeat the last.
    """

    scenario_id: str
    edge: EdgeAssessment
    cloud: tuple[CloudReview, ...]
    user_confirms_proposal: bool
    user_confirms_revision: bool
    scope: tuple[str, ...] | None = None  # the tools the scope model predicted from the request (None: no model)

    @property
    def decisive_review(self) -> CloudReview:
        """The first review that is not a fault (or the last fault): the one a rollout acts on."""
        return next((r for r in self.cloud if r.verdict != "error"), self.cloud[-1])


class Calls(Protocol):
    """What node functions may ask of the outside world; replay and live engines both implement it."""

    scenario: Scenario

    def edge(self) -> EdgeAssessment: ...
    def facts(self) -> CallFacts: ...
    def cloud(self, model_attempt: int = 0) -> CloudReview: ...
    def action(self, role: ActionRole) -> ToolAction: ...
    def user_confirms(self, role: ActionRole) -> bool: ...
    def tool_result(self, attempt: int) -> ToolFault: ...
    def cloud_reachable(self, attempt: int) -> bool: ...


class RecordedCalls:
    """Reads a ``ModelRecord``: no model runs. Built once per scenario and reused for every policy, so it
    unpacks the record up front (replay calls these methods millions of times)."""

    __slots__ = ("scenario", "record", "environment", "_edge", "_cloud", "_proposal", "_revision", "_confirms",
                 "_facts")

    def __init__(self, scenario: Scenario, record: ModelRecord, environment: Environment) -> None:
        self.scenario = scenario
        self.record = record
        self.environment = environment
        self._edge = record.edge
        self._cloud = record.cloud
        self._proposal = record.edge.proposal
        decisive = record.decisive_review
        self._revision = decisive.revision if decisive.revision is not None else record.edge.proposal
        self._confirms = {"proposal": record.user_confirms_proposal, "revision": record.user_confirms_revision}
        self._facts = call_facts(scenario, record.edge.proposal, record.scope)

    def edge(self) -> EdgeAssessment:
        return self._edge

    def facts(self) -> CallFacts:
        return self._facts

    def cloud(self, model_attempt: int = 0) -> CloudReview:
        reviews = self._cloud
        return reviews[model_attempt] if model_attempt < len(reviews) else reviews[-1]

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

    __slots__ = ("scenario", "models", "environment", "_edge", "_cloud", "_answers", "_facts")

    def __init__(self, scenario: Scenario, models: "ModelSet") -> None:
        self.scenario = scenario
        self.models = models
        self.environment = models.environment
        self._edge: EdgeAssessment | None = None
        self._cloud: list[CloudReview] = []
        self._answers: dict[str, bool] = {}
        self._facts: CallFacts | None = None

    def edge(self) -> EdgeAssessment:
        if self._edge is None:
            self._edge = self.models.edge.assess([self.scenario])[0]
        return self._edge

    def facts(self) -> CallFacts:
        if self._facts is None:
            scope = self.models.scope.predict([self.scenario])[0] if self.models.scope is not None else None
            self._facts = call_facts(self.scenario, self.edge().proposal, scope)
        return self._facts

    def cloud(self, model_attempt: int = 0) -> CloudReview:
        model_attempt = min(model_attempt, MAX_RECORDED_MODEL_ATTEMPTS - 1)
        while len(self._cloud) <= model_attempt:
            attempt = len(self._cloud)
            if self._cloud and self._cloud[-1].verdict != "error":
                self._cloud.append(self._cloud[-1])  # only faults are retried
                continue
            self._cloud.append(self.models.cloud.review([self.scenario], [self.edge().proposal], attempt)[0])
        return self._cloud[model_attempt]

    def action(self, role: ActionRole) -> ToolAction:
        if role == "revision":
            decisive = next((r for r in self._cloud if r.verdict != "error"), None)
            assert decisive is not None and decisive.revision is not None, "a revision exists only after 'revise'"
            return decisive.revision
        return self.edge().proposal

    def user_confirms(self, role: ActionRole) -> bool:
        if role not in self._answers:
            self._answers[role] = self.models.user.confirms(self.scenario, self.action(role))
        return self._answers[role]

    def tool_result(self, attempt: int) -> ToolFault:
        return self.environment.tool_result(self.scenario, attempt)

    def cloud_reachable(self, attempt: int) -> bool:
        return self.environment.cloud_reachable(self.scenario, attempt)


FITTED_ROLES = ("edge", "cloud", "scope")  # the roles whose model may be fitted on a train split


@dataclass(frozen=True)
class ModelSet:
    edge: EdgeModel
    cloud: CloudModel
    user: UserModel
    environment: Environment
    cached: tuple = ()  # the CachedLM wrappers in use, for hit/miss counts
    scope: ScopeModel | None = None  # the tool-scope model (None: no scope is predicted; the scope rule idles)

    def cache_stats(self) -> dict[str, int]:
        hits = sum(c.stats.hits for c in self.cached)
        misses = sum(c.stats.misses for c in self.cached)
        return {"hits": hits, "misses": misses, "calls_made": misses}

    @property
    def simulated(self) -> bool:
        return bool(self.edge.simulated or self.cloud.simulated)

    @property
    def oracle_roles(self) -> tuple[str, ...]:
        """The roles whose model reads the scenario's labels: every figure made with one is marked ORACLE."""
        return tuple(role for role in ("edge", "cloud", "user") if getattr(getattr(self, role), "oracle", False))

    def precisions(self) -> dict[str, str]:
        """The arithmetic each encoder-backed role runs in ("fp32", "bf16"), chosen for this CPU at run time."""
        return {role: model.precision for role in ("edge", "cloud", "scope")
                if (model := getattr(self, role)) is not None and isinstance(getattr(model, "precision", None), str)}

    def describe(self) -> dict[str, object]:
        return {
            "edge": self.edge.name,
            "cloud": self.cloud.name,
            "user": self.user.name,
            **({"scope": self.scope.name} if self.scope is not None else {}),
            "simulated": self.simulated,
            "oracle": list(self.oracle_roles),
            "precision": self.precisions(),
            "model_calls": self.cache_stats(),
        }

    def fit(self, train: Sequence[Scenario], by_role: dict[str, Sequence[Scenario]] | None = None,
            progress: Callable[[str], None] | None = None) -> None:
        """Fit the backends that learn from data on a train split: ``by_role[role]`` where given (a model
        fitted on another suite), else ``train``."""
        for role in FITTED_ROLES:
            model = getattr(self, role)
            if isinstance(model, Fittable):
                model.fit((by_role or {}).get(role, train), progress=progress)

    def refitted(self, train: Sequence[Scenario], by_role: dict[str, Sequence[Scenario]] | None = None,
                 progress: Callable[[str], None] | None = None, keep: Collection[str] = ()) -> "ModelSet":
        """A copy whose learned backends are fitted on ``train`` (``by_role[role]`` where given), this set left as
        it was; the roles in ``keep`` share this set's fitted model as it is."""
        copies = {role: copy.copy(getattr(self, role)) for role in FITTED_ROLES
                  if role not in keep and isinstance(getattr(self, role), Fittable)}
        for role, model in copies.items():
            model.fit((by_role or {}).get(role, train), progress=progress)
        return replace(self, **copies)

    @property
    def learns(self) -> bool:
        """Some backend is fitted on data (so scenarios it was fitted on must be recorded out-of-fold)."""
        return any(isinstance(getattr(self, role), Fittable) for role in FITTED_ROLES)

    def record(self, scenarios: Sequence[Scenario], progress: Callable[[int, int], None] | None = None,
               chunk: int = 64) -> list[ModelRecord]:
        """All model outputs for these scenarios, in chunks (``progress(done, total)`` after each)."""
        scenarios = list(scenarios)
        records: list[ModelRecord] = []
        for start in range(0, len(scenarios), chunk):
            records.extend(self._record_chunk(scenarios[start:start + chunk]))
            if progress is not None:
                progress(len(records), len(scenarios))
        return records

    def _record_chunk(self, scenarios: list[Scenario]) -> list[ModelRecord]:
        """Batched per model; faulted cloud calls are asked again (attempt 1, 2, ...) until they answer or
        ``MAX_RECORDED_MODEL_ATTEMPTS`` is reached."""
        assessments = self.edge.assess(scenarios)
        scopes = self.scope.predict(scenarios) if self.scope is not None else [None] * len(scenarios)
        proposals = [a.proposal for a in assessments]
        reviews: list[list[CloudReview]] = [[r] for r in self.cloud.review(scenarios, proposals)]
        for attempt in range(1, MAX_RECORDED_MODEL_ATTEMPTS):
            faulted = [i for i, chain in enumerate(reviews) if chain[-1].verdict == "error"]
            if not faulted:
                break
            again = self.cloud.review([scenarios[i] for i in faulted], [proposals[i] for i in faulted], attempt)
            for i, review in zip(faulted, again, strict=True):
                reviews[i].append(review)
        records = []
        for scenario, assessment, chain, scope in zip(scenarios, assessments, reviews, scopes, strict=True):
            decisive = next((r for r in chain if r.verdict != "error"), chain[-1])
            revision = decisive.revision if decisive.revision is not None else assessment.proposal
            records.append(
                ModelRecord(
                    scenario_id=scenario.id,
                    edge=assessment,
                    cloud=tuple(chain),
                    user_confirms_proposal=self.user.confirms(scenario, assessment.proposal),
                    user_confirms_revision=self.user.confirms(scenario, revision),
                    scope=None if scope is None else tuple(scope),
                )
            )
        return records
