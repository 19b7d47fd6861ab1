"""``far dry-run``: would this policy have fired on these traces? A policy file's guard, in shadow mode, over
logged agent runs (``far import-scenarios``' JSONL: OpenAI chat-completions traces, AgentDojo logs, scenarios).

Every proposed call of every trace is decided as the runtime guard would decide it live (``Guard.decide_scenario``:
the same node functions, rules and provenance) and appended to the audit log when one is given; nothing runs.
The answer counts decisions by action and by the rule that decided, and lists every call the policy would have
stopped or asked about: the dry run a policy owes before it enforces anything.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError


@dataclass
class DryRun:
    calls: int = 0
    by_action: Counter = field(default_factory=Counter)
    by_rule: Counter = field(default_factory=Counter)  # the rule that decided, for calls not executed as they are
    stopped: list[dict[str, Any]] = field(default_factory=list)  # every call blocked or sent to the user
    skipped: list[str] = field(default_factory=list)  # malformed lines, by file:line

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "by_action": dict(self.by_action), "by_rule": dict(self.by_rule),
                "stopped": self.stopped, "skipped": self.skipped}

    def report(self) -> str:
        actions = ", ".join(f"{self.by_action[a]} {a}" for a in ("execute", "confirm", "block"))
        lines = [f"{self.calls} proposed calls: {actions}"]
        lines += [f"  {rule}: {n}" for rule, n in self.by_rule.most_common()]
        lines += [f"  {s['id']}: {s['action']} {s['tool']} ({s['rule']}: {s['reason']})" for s in self.stopped]
        lines += [f"  skipped {line}" for line in self.skipped]
        return "\n".join(lines)


def dry_run(policy_file: str | Path, traces: str | Path, *, audit_log: str | Path | None = None,
            output: str | Path | None = None, progress: Callable[[str], None] | None = None) -> DryRun:
    """The policy file's guard over every call of ``traces`` (checked whole before any model loads); the counts
    and the stopped calls are also written to ``output`` (JSON, atomically) when given."""
    from far.search.jobs.policy_file import load_guard, read_policy_file
    from far.suites.imported import import_jsonl

    if output is not None and (Path(output).is_dir() or not Path(output).parent.is_dir()):
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    read_policy_file(policy_file)
    imported = import_jsonl(traces, registry=_read_only_registry())
    if not imported.scenarios:
        raise FarInputError("no valid trace or scenario in the file" + (
            f" (first problem: {imported.errors[0]})" if imported.errors else ""), file=traces)
    guard = load_guard(policy_file, audit_log=audit_log, shadow=True)
    result = DryRun(skipped=list(imported.errors))
    for number, scenario in enumerate(imported.scenarios, start=1):
        decision = guard.decide_scenario(scenario)
        action = decision.would or decision.action
        result.calls += 1
        result.by_action[action] += 1
        if action != "execute":
            result.by_rule[decision.rule or "(none)"] += 1
            result.stopped.append({"id": scenario.id, "tool": scenario.proposed_action.tool, "action": action,
                                   "rule": decision.rule, "reason": decision.reason,
                                   "arguments": list(decision.arguments)})
        if progress is not None and number % 500 == 0:
            progress(f"  dry run: {number}/{len(imported.scenarios)} calls decided")
    if output is not None:
        from far.rollout.io import write_json_atomic

        write_json_atomic(output, result.to_dict())
    return result


def _read_only_registry() -> Any:
    """The evaluation-only registry, read but never written: a dry run reads traces, it imports nothing."""
    from far.rollout.eval_only import EvalOnlyRegistry

    class ReadOnly(EvalOnlyRegistry):
        def add(self, scenarios: Any, source: str) -> int:
            return 0

    return ReadOnly()
