"""The runtime guard: FAR's chosen policy deciding one proposed tool call of a live agent.

``Guard(policy, models).decide(request, read, call)`` builds the call as a one-call ``Scenario`` (the user's
request, what the agent has read so far, the proposed call), asks the models once (``LiveCalls``) and walks the
very node functions the offline engines walk (``far.rollout.agent``), in a world where the cloud answers and the
tool succeeds: faults are the caller's to meet at run time. The walk's steps become a ``Decision``:

    block     a rule, a block threshold or the cloud's veto refused the call (``rule`` names which)
    confirm   ask the user before running it (a confirm rule, or ``require_confirmation`` on a sensitive call)
    execute   run it (``call`` is what to run: the cloud's revision where the cloud revised)

``decide_recorded(scenario, record)`` decides from recorded model outputs, so a recorded trajectory replayed
through the guard gives the engines' decision, call for call (``decision_of`` reads it off a trajectory).
Every decision is appended to the audit log (JSONL, one object per line, with the rule that fired); a guard
in shadow mode logs what it would have done and always answers ``execute``.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from far.rollout.agent import DEFAULT_COSTS, Costs, replay_calls
from far.rollout.calls import LiveCalls, ModelRecord, ModelSet, RecordedCalls
from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.policy import FallbackMode, Policy
from far.rollout.provenance import argument_provenance
from far.rollout.scenario import GroundTruth, ReadSource, Scenario, ToolAction, ToolFault
from far.rollout.trajectory import Trajectory
from pydantic import BaseModel, ConfigDict, Field, ValidationError

Action = Literal["execute", "confirm", "block"]
CONTEXT_CHARS = 2000  # the tail of the tool outputs the models see, most recent last (as the episode suite shows it)


class Decision(BaseModel):
    """The guard's answer for one proposed call."""

    model_config = ConfigDict(frozen=True)

    action: Action
    rule: str | None = Field(None, description="the policy parameter (or 'cloud_review') that decided")
    reason: str = ""
    reviewed: bool = Field(False, description="the cloud reviewed the call")
    call: ToolAction | None = Field(None, description="what to run when action is execute or confirm")
    risk: float | None = None
    arguments: tuple[str, ...] = Field((), description="each argument's role and where its value came from")
    would: Action | None = Field(None, description="shadow mode: what the guard would have done (action is then "
                                                   "always execute)")


class ReadItem(BaseModel):
    """One thing the agent has read: a tool's output, and how far it is trusted (``ReadSource``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    output: str
    tool: str = ""
    trust: Literal["fields", "trusted", "untrusted"] = "fields"


def _parsed(model: type[BaseModel], value: Any, field: str) -> Any:
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as error:
        raise from_validation_error(error, prefix=field) from None


def call_scenario(request: str, read: Sequence[ReadItem | dict | str], call: ToolAction | dict,
                  argument_roles: dict[str, str] | None = None) -> Scenario:
    """The proposed call as the one-call scenario the models and the rules judge: the models see the request
    and then the tail of what was read; the rules see every read text with its source. A bare string read is
    untrusted text of an unknown tool."""
    items = [ReadItem(output=r, trust="untrusted") if isinstance(r, str) else _parsed(ReadItem, r, f"read[{i}]")
             for i, r in enumerate(read)]
    action = _parsed(ToolAction, call, "call")
    tail = "\n".join(f"{item.tool or 'read'}: {item.output}" for item in items)[-CONTEXT_CHARS:]
    shown = f"\n\nTool outputs so far:\n{tail}" if tail else ""
    digest = hashlib.sha256(json.dumps([request, tail, action.model_dump(mode="json")], sort_keys=True,
                                       default=str).encode()).hexdigest()[:16]
    return Scenario(
        id=f"runtime#{digest}", suite="runtime", category="runtime", kind="runtime",
        task_mode="diagnostic" if action.read_only else "executable", split="holdout",
        request=request + shown, proposed_action=action, ground_truth=GroundTruth(),
        context=((shown,) if shown else ()) + tuple(item.output for item in items),
        read_from=((ReadSource(trust="repeated"),) if shown else ()) + tuple(
            ReadSource(tool=item.tool, trust=item.trust) for item in items),
        argument_roles=dict(argument_roles or {}),
    )


class _RuntimeWorld:
    """The world a runtime decision assumes: the cloud answers, the tool succeeds."""

    def tool_result(self, scenario: Scenario, attempt: int) -> ToolFault:
        return "ok"

    def cloud_reachable(self, scenario: Scenario, attempt: int) -> bool:
        return True


class _Asking:
    """Calls that answer every confirmation with yes: the walk goes on, and the Decision says confirm."""

    def __init__(self, calls: Any) -> None:
        self._calls = calls
        self.scenario = calls.scenario
        self.record = getattr(calls, "record", None)  # live calls keep none

    def __getattr__(self, name: str) -> Any:
        return getattr(self._calls, name)

    def user_confirms(self, role: str) -> bool:
        return True

    def tool_result(self, attempt: int) -> ToolFault:
        return "ok"

    def cloud_reachable(self, attempt: int) -> bool:
        return True


def decision_of(trajectory: Trajectory) -> Decision:
    """A rollout's decision on its proposed call, read off its steps: the first step that refused it (a route
    block, the cloud's veto, a fallback that stops when the cloud's review failed), else whether the user was
    asked (by the confirmation rule, or by the fallback in place of the cloud), else execute. Faults after the
    decision (a tool error) do not change it."""
    reviewed, asked, call, risk = False, None, None, None
    for step in trajectory.steps:
        decision = step.decision.split(":")[0]
        if step.node == "edge_assess":
            risk = step.inputs.get("risk")
        elif step.node == "route" and decision == "block":
            return Decision(action="block", rule=step.parameter, reason=_reason(step), reviewed=False, risk=risk)
        elif step.node == "cloud_review" and decision in ("execute", "veto", "revise"):
            reviewed = True
            if decision == "veto":
                return Decision(action="block", rule="cloud_review", reason=str(step.inputs.get("reason") or
                                                                                "the cloud vetoed the call"),
                                reviewed=True, risk=risk)
        elif step.node == "fallback" and step.inputs.get("source") == "cloud":
            if decision in (FallbackMode.SAFE_SHUTDOWN, FallbackMode.NONE):  # the call stays unreviewed and unrun
                return Decision(action="block", rule="fallback_mode", reviewed=False, risk=risk,
                                reason=f"fallback_mode {decision}: the cloud review failed and the call does not run")
            if decision == FallbackMode.ASK_USER:
                asked = "fallback_mode"
        elif step.node == "confirm":
            call = step.inputs.get("call")
            if decision in ("approved", "denied"):
                asked = step.parameter
        if call is None and "call" in step.inputs:
            call = step.inputs["call"]
    if asked is not None:
        return Decision(action="confirm", rule=asked, reason=f"{asked}: ask the user first", reviewed=reviewed,
                        call=call, risk=risk)
    return Decision(action="execute", reviewed=reviewed, call=call, risk=risk,
                    reason="reviewed by the cloud" if reviewed else "within the policy's thresholds")


def _reason(step: Any) -> str:
    if "rule" in step.inputs:
        return f"{step.parameter}: the call trips this rule"
    return f"{step.parameter}: edge risk {step.inputs.get('risk', 0.0):.3g} > {step.inputs.get('threshold')}"


class AuditLog:
    """Append-only JSONL: one decision per line, written whole with one ``write`` on a file opened for
    appending (lines from several threads or processes never interleave), flushed to disk."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


class Guard:
    """A policy and the models it was chosen with, deciding live calls (see the module docstring)."""

    def __init__(self, policy: Policy, models: ModelSet | None = None, *, audit_log: str | Path | None = None,
                 shadow: bool = False, policy_id: str = "", costs: Costs = DEFAULT_COSTS) -> None:
        self.policy = policy
        self.models = models
        self.audit = AuditLog(audit_log) if audit_log is not None else None
        self.shadow = shadow
        self.policy_id = policy_id or hashlib.sha256(policy.model_dump_json().encode()).hexdigest()[:16]
        self.costs = costs

    def decide(self, request: str, read: Sequence[ReadItem | dict | str], call: ToolAction | dict,
               argument_roles: dict[str, str] | None = None) -> Decision:
        """Decide one proposed call from the user's request, what the agent has read so far and the call."""
        return self.decide_scenario(call_scenario(request, read, call, argument_roles))

    def decide_scenario(self, scenario: Scenario) -> Decision:
        """Decide a call already built as a one-call scenario (``call_scenario``, or an imported trace's call,
        whose ``context`` and ``read_from`` say what the agent had read)."""
        if self.models is None:
            raise FarInputError("this guard has no models: load it with its policy file's models", field="models")
        started = time.perf_counter()
        live = LiveCalls(scenario, ModelSet(self.models.edge, self.models.cloud, self.models.user, _RuntimeWorld(),
                                            scope=self.models.scope))
        return self._finish(scenario, replay_calls(_Asking(live), self.policy, self.costs), started)

    def decide_recorded(self, scenario: Scenario, record: ModelRecord) -> Decision:
        """Decide from recorded model outputs (the engines' replay of the same scenario)."""
        started = time.perf_counter()
        calls = _Asking(RecordedCalls(scenario, record, _RuntimeWorld()))
        return self._finish(scenario, replay_calls(calls, self.policy, self.costs), started)

    def decide_batch(self, items: Sequence[dict[str, Any]]) -> list[Decision]:
        """``decide`` over ``[{"request", "read", "call", "argument_roles"?}, ...]`` (the models batch nothing
        across items: each call is its own record)."""
        return [self.decide(item["request"], item.get("read", ()), item["call"], item.get("argument_roles"))
                for item in items]

    def _finish(self, scenario: Scenario, trajectory: Trajectory, started: float) -> Decision:
        decision = decision_of(trajectory)
        arguments = tuple(a.describe() for a in argument_provenance(scenario, scenario.proposed_action))
        decision = decision.model_copy(update={"arguments": arguments})
        if self.audit is not None:
            self.audit.append({
                "time": time.time(), "policy": self.policy_id, "scenario": scenario.id,
                "call": scenario.proposed_action.model_dump(mode="json"), "action": decision.action,
                "rule": decision.rule, "reason": decision.reason, "reviewed": decision.reviewed,
                "risk": decision.risk, "arguments": list(arguments), "shadow": self.shadow,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3)})
        if self.shadow:
            return decision.model_copy(update={"would": decision.action, "action": "execute"})
        return decision


# --- where agents live: a LangGraph node over OpenAI-style tool calls ----------------------------------------------

class GuardedTool(BaseModel):
    """A tool the guarded node may run: the function, its declared properties (``ToolAction``'s), the roles of
    its arguments, and how far its output is trusted when the agent reads it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    function: Any
    sensitive: bool = False
    read_only: bool = False
    idempotent: bool = True
    roles: dict[str, Literal["target", "payload"]] = Field(default_factory=dict)
    trust: Literal["fields", "trusted", "untrusted"] = "fields"


def guarded_tool_node(guard: Guard, tools: dict[str, GuardedTool], confirm: Any = None) -> Any:
    """A LangGraph node in place of a ``ToolNode``: for each tool call of the last AI message, the guard decides
    from the first human message (the request), the tool messages so far (what was read) and the call; it runs
    what the guard lets through (``confirm(call) -> bool`` answers a confirmation; without it a call that needs
    one is not run) and answers every call with a ``ToolMessage`` -- a refusal says why, so the agent and its
    user see it instead of a silently skipped call."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    def node(state: dict[str, Any]) -> dict[str, Any]:
        messages = state["messages"]
        request = next((str(m.content) for m in messages if isinstance(m, HumanMessage)), "")
        read = [ReadItem(output=str(m.content), tool=m.name or "",
                         trust=tools[m.name].trust if m.name in tools else "untrusted")
                for m in messages if isinstance(m, ToolMessage) and m.status != "error"]
        last = next(m for m in reversed(messages) if isinstance(m, AIMessage))
        answers = []
        for tool_call in last.tool_calls:
            name, spec = tool_call["name"], tools.get(tool_call["name"])
            if spec is None:
                answers.append(ToolMessage(f"[FAR guard] unknown tool {name!r}", tool_call_id=tool_call["id"],
                                           name=name, status="error"))
                continue
            call = ToolAction(tool=name, args=tool_call["args"], sensitive=spec.sensitive, read_only=spec.read_only,
                              idempotent=spec.idempotent)
            decision = guard.decide(request, read, call, spec.roles)
            runs = decision.action == "execute" or (decision.action == "confirm" and confirm is not None
                                                    and confirm(decision.call or call))
            if runs:
                chosen = decision.call or call
                answers.append(ToolMessage(str(spec.function(**chosen.args)), tool_call_id=tool_call["id"], name=name))
            else:
                answers.append(ToolMessage(f"[FAR guard: {decision.action}] {decision.reason}",
                                           tool_call_id=tool_call["id"], name=name, status="error"))
        return {"messages": answers}

    return node
