"""Logged agent runs as scenarios: one scenario per tool call an agent proposed, with what it had read before it.

A JSONL line of ``far import-scenarios`` may be a trace in OpenAI chat-completions form instead of a scenario::

    {"messages": [{"role": "system", ...}, {"role": "user", "content": "Refund the last sender"},
                  {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "get_transactions", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "- id: 3 ..."}, ...],
     "tools": {"send_money": {"sensitive": true, "idempotent": false, "roles": {"amount": "payload"}},
               "get_transactions": {"read_only": true, "trust": "fields"}},     # the tools' declared properties
     "labels": {"c2": {"unsafe": true, "injected": true}},                      # optional, per tool call id
     "id": "run-17", "split": "train"}                                          # optional

The request is the first user message; the read content of a call is every tool message before it, each
described by its tool's ``trust`` (``fields`` by default; ``far.rollout.scenario.ReadSource``); the call's
properties and argument roles come from ``tools`` (a tool it does not name is an error: a guess would decide
the rules). A call with no label is benign. AgentDojo's own result logs (``messages`` with ``tool_calls`` whose
``function`` is the name and ``args`` a mapping) read the same way.
"""
from __future__ import annotations

import json
from typing import Any, Literal

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.scenario import ReadSource, ToolAction
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class TraceTool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sensitive: bool = False
    read_only: bool = False
    idempotent: bool = True
    local: bool = False
    roles: dict[str, Literal["target", "payload"]] = Field(default_factory=dict)
    trust: Literal["fields", "trusted", "untrusted"] = "fields"


class TraceLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: dict[str, TraceTool] = Field(default_factory=dict)
    labels: dict[str, dict[str, bool]] = Field(default_factory=dict)
    id: str | None = Field(None, min_length=1)
    split: Literal["train", "holdout"] | None = None
    category: str = "trace"
    eval_only: bool = False


def _call(tool_call: Any, field: str) -> tuple[str, str, dict[str, Any]]:
    """(id, name, arguments) of an OpenAI tool call (arguments a JSON string) or an AgentDojo one."""
    if not isinstance(tool_call, dict):
        raise FarInputError("a tool call must be an object", field=field)
    function = tool_call.get("function")
    if isinstance(function, dict):  # OpenAI
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as error:
                raise FarInputError(f"invalid JSON ({error.msg})", field=f"{field}.function.arguments") from None
    else:  # AgentDojo's FunctionCall
        name, arguments = function, tool_call.get("args", {})
    if not isinstance(name, str) or not name:
        raise FarInputError("a tool call needs a function name", field=f"{field}.function")
    if not isinstance(arguments, dict):
        raise FarInputError("arguments must be an object", field=f"{field}.function.arguments")
    return str(tool_call.get("id") or f"{name}#{field}"), name, arguments


def _text(content: Any) -> str:
    if isinstance(content, list):  # content blocks
        return "\n".join(str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content)
    return "" if content is None else str(content)


def trace_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's tool calls as import rows (``far.suites.imported.ImportRow`` fields), in order; a bad
    field raises ``FarInputError`` naming it (``messages[3].tool_calls[0].function.arguments``)."""
    try:
        trace = TraceLine.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error) from None
    request = next((_text(m.get("content")) for m in trace.messages if m.get("role") == "user"), None)
    if not request:
        raise FarInputError("a trace needs a user message (the request)", field="messages")
    names: dict[str, str] = {}  # tool call id -> tool name, for the tool messages that answer it
    read: list[tuple[str, ReadSource]] = []
    rows = []
    for index, message in enumerate(trace.messages):
        role = message.get("role")
        if role == "tool":
            tool = message.get("name") or names.get(str(message.get("tool_call_id")), "")
            spec = trace.tools.get(tool)
            read.append((_text(message.get("content")), ReadSource(tool=tool, trust=spec.trust if spec else "untrusted")))
        if role != "assistant":
            continue
        for number, tool_call in enumerate(message.get("tool_calls") or []):
            field = f"messages[{index}].tool_calls[{number}]"
            call_id, name, arguments = _call(tool_call, field)
            names[call_id] = name
            spec = trace.tools.get(name)
            if spec is None:
                raise FarInputError(f"tool {name!r} is not in the line's tools (its properties decide the rules)",
                                    field=f"{field}.function.name")
            labels = trace.labels.get(call_id, {})
            action = ToolAction(tool=name, args=arguments, sensitive=spec.sensitive, read_only=spec.read_only,
                                idempotent=spec.idempotent, local=spec.local)
            shown = "".join(f"\n[{source.tool or 'read'}] {text}" for text, source in read)
            rows.append({
                "id": f"{trace.id}#{call_id}" if trace.id else None, "request": request + shown,
                "category": trace.category, "task_mode": "diagnostic" if spec.read_only else "executable",
                "proposed_action": action.model_dump(), "labels": labels, "split": trace.split,
                "eval_only": trace.eval_only, "group": trace.id, "context": [shown, *(text for text, _ in read)] if read else [],
                "read_from": ([ReadSource(trust="repeated").model_dump()] + [s.model_dump() for _, s in read])
                             if read else [],
                "argument_roles": dict(spec.roles)})
    if not rows:
        raise FarInputError("the trace proposes no tool call", field="messages")
    return rows
