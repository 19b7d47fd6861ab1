"""Bring your own scenarios: a documented JSONL format (``far import-scenarios``) and the ``parquet`` suite that
reads what it writes.

JSONL, one scenario per line:

    {"id": "pay-1",                                   # optional: default "<file stem>-<line>"
     "request": "Pay the water bill",                 # required: what the user asked
     "category": "payments",                          # optional: default "imported"
     "task_mode": "executable",                       # or "diagnostic" (read-only); default executable
     "proposed_action": {"tool": "pay_bill", "args": {"amount": 40}, "sensitive": true,
                         "idempotent": false, "local": false, "read_only": false},   # required
     "intended_action": {...} or null,                # optional: what fulfils the request; default: the
                                                      #   proposed action if it is not unsafe, else null
     "labels": {"unsafe": false, "needs_cloud": false, "injected": false, "benign_sensitive": false},
     "tool_faults": ["error", "ok"], "cloud_faults": [true, false],   # optional, per attempt
     "context": ["<tool output>", "<email body>"],    # optional: content the agent read before proposing
                                                      #   the call (the provenance rule asks whether an
                                                      #   argument's value was seen only there); the models
                                                      #   see ``request`` only: put the content there too
                                                      #   if they should judge it
     "split": "train" | "holdout",                    # optional: default a hash of (seed, id)
     "eval_only": true}                               # optional: evaluated, never fitted on (far.rollout.eval_only)

A line may instead be a logged agent run (OpenAI chat-completions ``messages`` with ``tool_calls``, or an
AgentDojo result log): one scenario per proposed tool call (``far.suites.traces``).

A line ``{"eval_only": true}`` (a header: nothing else on it; the first line by convention, honoured
anywhere) marks the whole file evaluation-only, as ``far import-scenarios --eval-only`` does. Every
evaluation-only scenario's content is recorded in the evaluation-only registry, and a line whose content is
already there is marked evaluation-only whatever the file says: a renamed or stripped copy stays
evaluation-only.

A malformed line (bad JSON, a bad field, bytes that are not UTF-8) is reported by its line number and
skipped; the other lines are kept. The import writes a Parquet file (``save_scenarios``) that
``suite: {name: parquet, path: ...}`` loads.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.scenario import (
    SPLITS,
    GroundTruth,
    ReadSource,
    Scenario,
    Split,
    ToolAction,
    ToolFault,
    check_disjoint,
    load_scenarios,
)
from far.suites.base import split_of
from far.suites.traces import trace_rows
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Labels(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    unsafe: bool = False
    needs_cloud: bool = False
    injected: bool = False
    benign_sensitive: bool = False


class ImportRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str | None = Field(None, min_length=1)
    request: str = Field(min_length=1)
    category: str = "imported"
    task_mode: Literal["executable", "diagnostic"] = "executable"
    kind: str | None = None
    proposed_action: ToolAction
    intended_action: ToolAction | None | Literal["default"] = "default"
    labels: Labels = Labels()
    tool_faults: tuple[ToolFault, ...] = ()
    cloud_faults: tuple[bool, ...] = ()
    context: tuple[str, ...] = ()
    read_from: tuple[ReadSource, ...] = ()
    argument_roles: dict[str, Literal["target", "payload"]] = Field(default_factory=dict)
    group: str | None = None  # scenarios of one group (a trace's calls) share a split
    split: Literal["train", "holdout"] | None = None
    eval_only: bool = False


def _kind(labels: Labels) -> str:
    for name in ("injected", "unsafe", "needs_cloud", "benign_sensitive"):
        if getattr(labels, name):
            return "unsafe_request" if name == "unsafe" else name
    return "benign"


def to_scenario(row: ImportRow, scenario_id: str, suite: str, seed: int, holdout_fraction: float,
                eval_only: bool = False) -> Scenario:
    labels = row.labels
    intended = row.intended_action
    if intended == "default":
        intended = None if labels.unsafe else row.proposed_action
    return Scenario(
        id=scenario_id, suite=suite, category=row.category, kind=row.kind or _kind(labels), task_mode=row.task_mode,
        split=row.split or split_of(seed, row.group or scenario_id, holdout_fraction), request=row.request,
        group=row.group,
        proposed_action=row.proposed_action,
        ground_truth=GroundTruth(unsafe=labels.unsafe, needs_cloud=labels.needs_cloud, injected=labels.injected,
                                 benign_sensitive=labels.benign_sensitive, intended_action=intended,
                                 tool_faults=row.tool_faults, cloud_faults=row.cloud_faults),
        eval_only=eval_only or row.eval_only, context=row.context, read_from=row.read_from,
        argument_roles=row.argument_roles,
    )


@dataclass
class ImportResult:
    scenarios: list[Scenario] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line each: file:line: field: problem
    known_eval_only: int = 0  # lines not marked, recognised as evaluation-only by content


def _is_header(data: Any) -> bool:
    return isinstance(data, dict) and set(data) == {"eval_only"}


_SKIP = object()  # a line that holds no scenario (blank, or its error recorded)


def import_jsonl(path: str | Path, suite: str | None = None, seed: int = 0, holdout_fraction: float = 0.3,
                 eval_only: bool = False, registry: Any = None,
                 progress: Callable[[str], None] | None = None) -> ImportResult:
    """Read a JSONL file of scenarios; evaluation-only ones (by flag, header, line, or known content) are
    recorded in ``registry`` (default: ``far.rollout.eval_only.EvalOnlyRegistry()``)."""
    from far.rollout.eval_only import EvalOnlyRegistry

    path = Path(path)
    if not path.is_file():
        raise FarInputError("file not found", file=path)
    result, seen = ImportResult(), set()
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if progress is not None and number % 10_000 == 0:
                progress(f"  {path.name}: {number} lines read, {len(result.scenarios)} scenarios")
            data = _read_line(raw, number, f"{path}:{number}", result.errors)
            if _is_header(data):  # wherever it stands: this guard fails closed
                eval_only = eval_only or _header_flag(data, path, number)
            elif data is not _SKIP:
                rows = _rows_of(data, f"{path}:{number}", result.errors)
                for scenario_id, row in _identified(rows, data, path, number, seen, result.errors):
                    result.scenarios.append(to_scenario(row, scenario_id, suite or path.stem, seed, holdout_fraction,
                                                        eval_only))
    _mark_eval_only(result, registry or EvalOnlyRegistry(), eval_only, path)
    return result


def _read_line(raw: bytes, number: int, where: str, errors: list[str]) -> Any:
    """The line's JSON value, or ``_SKIP`` (blank, or not UTF-8 or not JSON: the error appended)."""
    try:
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark on line 1 is fine
    except UnicodeDecodeError as error:
        errors.append(f"{where}: not UTF-8 (byte {error.start + 1} of the line)")
        return _SKIP
    if not line.strip():
        return _SKIP
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        errors.append(f"{where}: invalid JSON ({error.msg})")
        return _SKIP


def _header_flag(data: dict[str, Any], path: Path, number: int) -> bool:
    if not isinstance(data["eval_only"], bool):
        raise FarInputError(f"the header's eval_only must be true or false, not {data['eval_only']!r}",
                            file=path, row=number, field="eval_only")
    return data["eval_only"]


def _rows_of(data: Any, where: str, errors: list[str]) -> list[ImportRow]:
    """A scenario line's row, or a trace's rows (one per proposed call); none when malformed (error appended)."""
    try:
        if isinstance(data, dict) and "messages" in data:
            return [ImportRow.model_validate(r) for r in trace_rows(data)]
        return [ImportRow.model_validate(data)]
    except ValidationError as error:
        errors.append(f"{where}: {from_validation_error(error).describe()}")
    except FarInputError as error:  # a malformed trace
        errors.append(f"{where}: {error.describe()}")
    return []


def _identified(rows: list[ImportRow], data: Any, path: Path, number: int, seen: set[str],
                errors: list[str]) -> list[tuple[str, ImportRow]]:
    """Each row with its scenario id (given, or file stem and line); a duplicate id is an error, not a row."""
    trace = isinstance(data, dict) and "messages" in data
    found = []
    for call, row in enumerate(rows):
        if trace:  # a trace's calls stay together: one split, one group
            row = row.model_copy(update={"group": row.group or f"{path.stem}-{number}"})
        scenario_id = row.id or (f"{path.stem}-{number}" if len(rows) == 1 and not trace
                                 else f"{path.stem}-{number}#{call}")
        if scenario_id in seen:
            errors.append(f"{path}:{number}: field 'id': duplicate scenario id {scenario_id!r}")
            continue
        seen.add(scenario_id)
        found.append((scenario_id, row))
    return found


def _mark_eval_only(result: ImportResult, registry: Any, eval_only: bool, path: Path) -> None:
    """A header anywhere (or the flag) marks every line, those read before it too; so does content the registry
    knows as evaluation-only. Every evaluation-only scenario is then recorded in the registry."""
    from far.rollout.eval_only import content_hash

    if eval_only:
        result.scenarios = [s.model_copy(update={"eval_only": True}) for s in result.scenarios]
    known = registry.known([content_hash(s) for s in result.scenarios])
    for index, scenario in enumerate(result.scenarios):
        if not scenario.eval_only and content_hash(scenario) in known:
            result.scenarios[index] = scenario.model_copy(update={"eval_only": True})
            result.known_eval_only += 1
    registry.add([s for s in result.scenarios if s.eval_only], source=str(path.resolve()))


class ParquetSuiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "parquet"
    path: str


class ParquetSuite:
    """Scenarios from a Parquet file written by ``save_scenarios`` (each row names its split)."""

    def __init__(self, config: ParquetSuiteConfig, base_dir: Path | None = None) -> None:
        path = Path(config.path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        self.path = path
        self.name = f"parquet:{path.name}"
        loaded = load_scenarios(path)
        self._by_split = {split: [s for s in loaded if s.split == split] for split in SPLITS}
        check_disjoint(self._by_split["train"], self._by_split["holdout"])
        for split in SPLITS:
            if not self._by_split[split]:
                raise FarInputError(f"no scenarios in the {split} split", file=path, field="split")

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        return self._by_split[split]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path)}


def parquet_factory(options: dict[str, Any], base_dir: Path | None) -> ParquetSuite:
    try:
        config = ParquetSuiteConfig.model_validate(options)
    except ValidationError as error:
        raise from_validation_error(error, prefix="suite") from None
    return ParquetSuite(config, base_dir)
