"""Trajectories as JSON: the wire format of the REST API (and of anything that scores rollouts elsewhere).

``TrajectoryModel`` validates a trajectory sent by a client (step indices in order, known nodes and outcomes,
tool calls as ``ToolAction``) and converts to and from the in-memory ``Trajectory`` without loss: a
trajectory sent over the wire verifies exactly as the original does.
"""
from __future__ import annotations

from typing import Any, Literal

from far.rollout.policy import Policy
from far.rollout.scenario import ToolAction
from far.rollout.trajectory import COMPLETED, DENIED, HANDED_OFF, SHUTDOWN, UNHANDLED, VETOED, Step, Trajectory
from pydantic import BaseModel, ConfigDict, Field, model_validator

Node = Literal["edge_assess", "route", "cloud_review", "confirm", "execute", "fallback", "execute_local", "finish"]
Outcome = Literal["completed", "vetoed", "denied", "shutdown", "handed_off", "unhandled"]
assert set(Outcome.__args__) == {COMPLETED, VETOED, DENIED, SHUTDOWN, HANDED_OFF, UNHANDLED}
CALL_INPUT = "call"  # the only step input that holds a tool call
MODEL_FAULTS = ("MODEL_TIMEOUT", "MALFORMED_OUTPUT", "ACTOR_DIED", "MODEL_ERROR")


class StepModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    node: Node
    decision: str = Field(min_length=1, max_length=200)
    parameter: str | None = Field(None, max_length=100)
    inputs: dict[str, Any] = Field(default_factory=dict)
    cost: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    latency_ms: float = Field(0.0, ge=0.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _call_is_a_tool_action(self) -> "StepModel":
        call = self.inputs.get(CALL_INPUT)
        if call is not None and not isinstance(call, ToolAction):
            self.inputs[CALL_INPUT] = ToolAction.model_validate(call)
        return self


class TrajectoryModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario_id: str = Field(min_length=1, max_length=500)
    policy: Policy
    steps: list[StepModel] = Field(min_length=1, max_length=2000)
    outcome: Outcome
    environment_result: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "TrajectoryModel":
        """What the verifiers rely on: a walk of the agent's graph, ending in ``finish`` with the outcome."""
        call_indices = []
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(f"steps[{position}].index is {step.index}, expected {position}")
            if step.node in ("execute", "execute_local"):
                if not isinstance(step.inputs.get(CALL_INPUT), ToolAction):
                    raise ValueError(f"steps[{position}]: an execution needs inputs.call (a tool call)")
                if not isinstance(step.inputs.get("effect"), bool):
                    raise ValueError(f"steps[{position}].inputs.effect must be true or false")
            error = step.inputs.get("error")
            if error is not None and step.node in ("edge_assess", "cloud_review") and error not in MODEL_FAULTS:
                raise ValueError(f"steps[{position}].inputs.error must be one of {', '.join(MODEL_FAULTS)}")
            if "call_index" in step.inputs:
                call_indices.append(step.inputs["call_index"])
        if call_indices:  # an episode of several guarded calls: every step says which, in order
            if len(call_indices) != len(self.steps) or any(not isinstance(c, int) or c < 0 for c in call_indices) \
                    or call_indices != sorted(call_indices):
                raise ValueError("inputs.call_index must be on every step, non-negative and non-decreasing")
        last = self.steps[-1]
        if last.node != "finish" or (not call_indices and last.decision != self.outcome):
            raise ValueError("the last step must be 'finish' (with decision equal to the outcome)")
        if self.outcome == UNHANDLED and not any(s.node == "fallback" for s in self.steps):
            raise ValueError("an unhandled outcome needs the fallback step that left it unhandled")
        return self

    def to_trajectory(self) -> Trajectory:
        steps = tuple(Step(s.index, s.node, s.decision, s.parameter, dict(s.inputs), s.cost, s.latency_ms)
                      for s in self.steps)
        return Trajectory(self.scenario_id, self.policy, steps, self.outcome, None, self.environment_result)

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory) -> "TrajectoryModel":
        return cls(scenario_id=trajectory.scenario_id, policy=trajectory.policy, outcome=trajectory.outcome,
                   environment_result=trajectory.environment_result,
                   steps=[StepModel(index=s.index, node=s.node, decision=s.decision, parameter=s.parameter,
                                    inputs=dict(s.inputs), cost=s.cost, latency_ms=s.latency_ms)
                          for s in trajectory.steps])
