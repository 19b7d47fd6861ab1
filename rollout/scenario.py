"""Scenarios: what the agent is asked, what it would do, and the hidden truth the verifiers judge by."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.io import write_parquet_atomic
from pydantic import BaseModel, ConfigDict, Field, ValidationError

Split = Literal["train", "holdout"]
SPLITS: tuple[Split, ...] = ("train", "holdout")
ToolFault = Literal["ok", "error", "timeout"]
Role = Literal["target", "payload"]  # an argument's role (far.rollout.provenance.argument_role)
Trust = Literal["fields", "trusted", "untrusted", "repeated"]


class ToolAction(BaseModel):
    """A concrete tool call and the properties of the tool that the policy and the verifiers care about."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    sensitive: bool = False  # confirmation applies when the policy requires it
    idempotent: bool = True  # repeating it has no further effect (a retry after a timeout is harmless)
    local: bool = False  # an on-device path exists (used by the edge_only fallback after tool failure)
    read_only: bool = False

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.tool}({args})"

    @property
    def kind(self) -> str:
        """The call's kind for per-kind policy settings (``far.rollout.policy.CALL_KINDS``), from the tool's declared
        properties: read-only, else sensitive, else other."""
        return "read_only" if self.read_only else "sensitive" if self.sensitive else "other"


class ReadSource(BaseModel):
    """Where one read text came from: the tool, and how far its output is trusted.

    ``fields``: a structured output (YAML, JSON or a Python literal) whose identifier fields are trusted records
    and whose free-text fields (``FREE_TEXT_FIELDS``) are not; a plain-text output is untrusted.
    ``trusted``: the whole output (a catalogue the service keeps). ``untrusted``: the whole output (a web page,
    a file, reviews). ``repeated``: a text that only repeats other read texts (the tail of tool outputs shown to
    the models): the per-argument rules judge the originals and skip it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = ""
    trust: Trust = "fields"



class GroundTruth(BaseModel):
    """Hidden facts; only verifiers and simulated models may read them, never the policy.

    ``tool_faults`` / ``cloud_faults`` are per attempt; the last entry repeats for later attempts, so
    ``("error", "ok")`` is a transient fault, ``("error",)`` a persistent one and ``()`` no fault.
    A ``timeout`` means the tool reported failure although the action took effect.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    unsafe: bool = False  # executing the proposed action causes harm
    needs_cloud: bool = False  # the edge's proposal is inadequate; only a cloud revision completes the task
    injected: bool = False  # an injected instruction in the content drove the proposal
    benign_sensitive: bool = False  # looks sensitive, is benign (the over-refusal trap)
    intended_action: ToolAction | None = None  # what fulfils the user's legitimate request; None: refusing is right
    tool_faults: tuple[ToolFault, ...] = ()
    cloud_faults: tuple[bool, ...] = ()  # True: the cloud is unreachable on that attempt

    def tool_fault(self, attempt: int) -> ToolFault:
        return _nth_or_last(self.tool_faults, attempt, "ok")

    def cloud_down(self, attempt: int) -> bool:
        return _nth_or_last(self.cloud_faults, attempt, False)


def _nth_or_last(pattern: tuple, attempt: int, default: Any) -> Any:
    if not pattern:
        return default
    return pattern[attempt] if attempt < len(pattern) else pattern[-1]


class Scenario(BaseModel):
    """One task for the agent. Environment-backed suites set ``environment`` (a handle to rebuild it)
    and may leave parts of ``ground_truth`` unused: their verifiers run checks against the environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    suite: str
    category: str
    kind: str  # generator label, e.g. benign, injected, unsafe_request
    task_mode: Literal["executable", "diagnostic"]
    split: Split
    request: str
    proposed_action: ToolAction
    ground_truth: GroundTruth = Field(default_factory=GroundTruth)
    environment: dict[str, Any] | None = None
    # the template (or source) the scenario was written from: scenarios of one group are near-duplicates, so
    # splits and cross-fitting keep a group on one side; None: the request text is its own group
    group: str | None = None
    # may be evaluated, never fitted on (``far.rollout.eval_only``: also recognised by content)
    eval_only: bool = False
    # content the agent read before proposing the call (tool outputs, messages, documents), each text as read.
    # Where a suite shows it to the models inside ``request``, it appears there verbatim; the user's own words
    # are the request with these texts cut out (``far.rollout.provenance.user_words``).
    context: tuple[str, ...] = ()
    # where each ``context`` text came from, in order (shorter than ``context``: the rest are untrusted text of
    # an unknown tool); the per-argument rules read it (``far.rollout.provenance.argument_provenance``)
    read_from: tuple[ReadSource, ...] = ()
    # declared roles of the proposed action's arguments (target | payload); undeclared ones by name
    argument_roles: dict[str, Role] = Field(default_factory=dict)

    @property
    def group_key(self) -> str:
        return self.group if self.group is not None else f"text:{self.request}"


def model_input(scenario: Scenario) -> tuple[str, str]:
    """What a model sees of a scenario: the request and the proposed action (ids, names and labels aside)."""
    return scenario.request, scenario.proposed_action.model_dump_json()


_JSON_COLUMNS = ("proposed_action", "ground_truth", "environment", "context", "read_from", "argument_roles")
_BOOL_COLUMNS = ("eval_only",)


def scenarios_to_table(scenarios: Iterable[Scenario]):
    import pyarrow as pa

    rows = []
    for scenario in scenarios:
        row = scenario.model_dump(mode="json")
        for column in _JSON_COLUMNS:
            row[column] = json.dumps(row[column], sort_keys=True)
        rows.append(row)
    schema = pa.schema([(name, pa.bool_() if name in _BOOL_COLUMNS else pa.string()) for name in Scenario.model_fields])
    return pa.Table.from_pylist(rows, schema=schema)


def save_scenarios(path: str | Path, scenarios: Iterable[Scenario]) -> Path:
    return write_parquet_atomic(path, scenarios_to_table(scenarios))


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Load scenarios from Parquet; a bad row raises ``FarInputError`` naming the file, row and field."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FarInputError("file not found", file=path)
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for a non-Parquet file
        raise FarInputError(f"not a readable Parquet file ({type(error).__name__})", file=path) from None
    missing = [name for name in ("id", "split", "request", "proposed_action") if name not in table.column_names]
    if missing:
        raise FarInputError(f"missing column(s): {', '.join(missing)}", file=path)
    scenarios: list[Scenario] = []
    seen: set[str] = set()
    for index, row in enumerate(table.to_pylist()):
        for column in _JSON_COLUMNS:
            value = row.get(column)
            if isinstance(value, str):
                try:
                    row[column] = json.loads(value)
                except json.JSONDecodeError as error:
                    raise FarInputError(f"invalid JSON ({error.msg})", file=path, row=index, field=column) from None
        try:
            scenario = Scenario.model_validate(row)
        except ValidationError as error:
            raise from_validation_error(error, file=path, row=index) from None
        if scenario.id in seen:
            raise FarInputError(f"duplicate scenario id {scenario.id!r}", file=path, row=index, field="id")
        seen.add(scenario.id)
        scenarios.append(scenario)
    return scenarios


def check_disjoint(train: Sequence[Scenario], holdout: Sequence[Scenario]) -> None:
    """Train and holdout never share a scenario: raise if they do."""
    overlap = {s.id for s in train} & {s.id for s in holdout}
    if overlap:
        example = sorted(overlap)[0]
        raise FarInputError(f"train and holdout share {len(overlap)} scenario(s), e.g. {example!r}", field="split")
