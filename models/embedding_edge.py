"""The default edge: a learned risk scorer small enough for the device -- a logistic probe on all-MiniLM-L6-v2
sentence embeddings (``far.models.probe``), fitted on a train split only.

Risk = P(the action must not run unreviewed) = P(unsafe or needs the cloud), as the probe predicts it from
the proposed action and the request. The edge cannot see the labels: it is fitted on train labels and then
scores text alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from far.models.calibration import escalation_label
from far.models.probe import ProbeBacked, probe_text
from far.models.spec import BuildContext, validated
from far.rollout.calls import EdgeAssessment
from far.rollout.scenario import Scenario
from pydantic import BaseModel, ConfigDict, Field


class EmbeddingEdgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    encoder: Literal["minilm", "smollm2"] = "minilm"
    encoder_options: dict[str, Any] = Field(default_factory=dict)
    l2: float = Field(1.0, gt=0.0)
    cost: float = Field(0.005, ge=0.0)
    latency_ms: float = Field(35.0, ge=0.0)  # ~29 texts/s uncached on one fp32 CPU thread


class EmbeddingRiskEdge(ProbeBacked):
    label = staticmethod(escalation_label)

    def __init__(self, config: EmbeddingEdgeConfig | None = None, cache: Any = None) -> None:
        self.config = config or EmbeddingEdgeConfig()
        super().__init__(self.config.encoder, self.config.encoder_options, cache, self.config.l2, None,
                         "the edge's risk probe", "models.edge")
        self.name = f"embedding-edge({self.model_id})"

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        risks = self.probe.predict([probe_text(s) for s in scenarios])
        return [EdgeAssessment(float(r), s.proposed_action, self.config.cost, self.config.latency_ms)
                for r, s in zip(risks, scenarios, strict=True)]


def build_edge(options: dict[str, Any], where: str, context: BuildContext) -> EmbeddingRiskEdge:
    """The factory named in ``far.models.backends``."""
    edge = EmbeddingRiskEdge(validated(EmbeddingEdgeConfig, options, where), context.cache)
    context.cached.append(edge)  # it counts its own cache hits and misses
    return edge
