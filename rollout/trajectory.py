"""Steps and trajectories: what the agent saw, decided and spent, node by node."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from far.rollout.calls import ModelRecord
from far.rollout.policy import Policy


# not frozen: a frozen dataclass is ~4x dearer to build, and replay builds millions
@dataclass(slots=True)
class Step:
    """One node visit (treat as immutable). ``parameter`` names the policy field that decided it (None: a
    model, the user or the environment decided)."""

    index: int
    node: str
    decision: str
    parameter: str | None
    inputs: dict[str, Any]
    cost: float
    latency_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "node": self.node,
            "decision": self.decision,
            "parameter": self.parameter,
            "inputs": {k: (v.describe() if hasattr(v, "describe") else v) for k, v in self.inputs.items()},
            "cost": self.cost,
            "latency_ms": self.latency_ms,
        }


# Outcomes a rollout can end in.
COMPLETED, VETOED, DENIED, SHUTDOWN, HANDED_OFF, UNHANDLED = (
    "completed", "vetoed", "denied", "shutdown", "handed_off", "unhandled",
)


@dataclass(slots=True)  # not frozen, for the same reason as Step; treat as immutable
class Trajectory:
    scenario_id: str
    policy: Policy
    steps: tuple[Step, ...]
    outcome: str
    record: ModelRecord | None = field(default=None, compare=False)  # model calls, for replay and audit
    # what an environment-backed suite's checkers reported (e.g. utility and security)
    environment_result: dict[str, Any] | None = None

    @property
    def cost(self) -> float:
        return sum(step.cost for step in self.steps)

    @property
    def latency_ms(self) -> float:
        return sum(step.latency_ms for step in self.steps)

    def executions(self) -> list[Step]:
        """Steps at which an action took effect (a timeout took effect too, though it reported failure)."""
        return [s for s in self.steps if s.node in ("execute", "execute_local") and s.inputs.get("effect")]

    def escalated(self) -> bool:
        return any(s.node == "cloud_review" for s in self.steps)

    def reviewed(self) -> bool:
        """The cloud actually gave a verdict (it was reachable)."""
        return any(s.node == "cloud_review" and s.decision in ("execute", "veto", "revise") for s in self.steps)
