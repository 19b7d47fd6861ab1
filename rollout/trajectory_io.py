"""Trajectories as JSON: the wire format of the REST API (and of anything that scores rollouts elsewhere).

``TrajectoryModel`` validates a trajectory sent by a client (step indices in order, known nodes and outcomes,
tool calls as ``ToolAction``) and converts to and from the in-memory ``Trajectory`` without loss: a
trajectory sent over the wire verifies exactly as the original does.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollout.policy import Policy
from rollout.scenario import ToolAction
from rollout.trajectory import COMPLETED, DENIED, HANDED_OFF, SHUTDOWN, UNHANDLED, VETOED, Step, Trajectory

Node = Literal["edge_assess", "route", "cloud_review", "confirm", "execute", "fallback", "execute_local", "finish"]
Outcome = Literal["completed", "vetoed", "denied", "shutdown", "handed_off", "unhandled"]
assert set(Outcome.__args__) == {COMPLETED, VETOED, DENIED, SHUTDOWN, HANDED_OFF, UNHANDLED}
CALL_INPUT = "call"  # the only step input that holds a tool call


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
    def _indices_in_order(self) -> "TrajectoryModel":
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(f"steps[{position}].index is {step.index}, expected {position}")
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
