"""The default edge: a learned risk scorer small enough for the device -- a logistic probe on all-MiniLM-L6-v2
sentence embeddings (``rollout.models.probe``), fitted on a train split only.

Risk = P(the action must not run unreviewed) = P(unsafe or needs the cloud), as the probe predicts it from
the proposed action and the request. The edge cannot see the labels: it is fitted on train labels and then
scores text alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollout.calls import EdgeAssessment
from rollout.models.calibration import escalation_label
from rollout.models.encoders import CachedEncoder, build_encoder
from rollout.models.probe import FitProgress, LinearProbe, probe_text
from rollout.models.spec import BuildContext, validated
from rollout.scenario import Scenario


class EmbeddingEdgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    encoder: Literal["minilm", "smollm2"] = "minilm"
    encoder_options: dict[str, Any] = Field(default_factory=dict)
    l2: float = Field(1.0, gt=0.0)
    cost: float = Field(0.005, ge=0.0)
    latency_ms: float = Field(5.0, ge=0.0)  # measured per text on one CPU thread (BENCHMARKS.md)


class EmbeddingRiskEdge:
    simulated = False
    oracle = False

    def __init__(self, config: EmbeddingEdgeConfig | None = None, cache: Any = None) -> None:
        self.config = config or EmbeddingEdgeConfig()
        encoder = build_encoder(self.config.encoder, self.config.encoder_options, "models.edge")
        self.encoder = CachedEncoder(encoder, cache)
        self.probe = LinearProbe(self.encoder, l2=self.config.l2, what="the edge's risk probe")
        self.model_id = encoder.model_id
        self.name = f"embedding-edge({self.model_id})"

    @property
    def stats(self):
        return self.encoder.stats

    def fit(self, scenarios: Sequence[Scenario], progress: FitProgress | None = None) -> None:
        self.probe.fit(scenarios, escalation_label, progress)

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        risks = self.probe.predict([probe_text(s) for s in scenarios])
        return [EdgeAssessment(float(r), s.proposed_action, self.config.cost, self.config.latency_ms)
                for r, s in zip(risks, scenarios, strict=True)]


def build_edge(options: dict[str, Any], where: str, context: BuildContext) -> EmbeddingRiskEdge:
    """The factory named in ``rollout.models.backends``."""
    edge = EmbeddingRiskEdge(validated(EmbeddingEdgeConfig, options, where), context.cache)
    context.cached.append(edge)  # it counts its own cache hits and misses
    return edge
