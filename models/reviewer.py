"""The default cloud: a learned reviewer -- a logistic probe on SmolLM2-135M's hidden states (a larger model
than the edge's, and a different one, so its errors are not the edge's), fitted on a train split only.

It vetoes when P(unsafe | proposed action, request) >= ``veto_threshold`` and lets the action run otherwise.
It never revises: a classifier cannot write the corrected action, so requests that need a revision are not
completed by it; ``models.reviser`` (``far.models.reviser``) puts a generative model in front of it that
can. The probability is written into the review's reason, so every veto can be traced to its score.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from far.models.probe import ProbeBacked, probe_text
from far.models.spec import BuildContext, validated
from far.rollout.calls import CloudReview
from far.rollout.scenario import Scenario, ToolAction
from pydantic import BaseModel, ConfigDict, Field


def unsafe_label(scenario: Scenario) -> int:
    """What the reviewer predicts: running the action causes harm."""
    return int(scenario.ground_truth.unsafe)


class ReviewerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    encoder: Literal["minilm", "smollm2"] = "smollm2"
    encoder_options: dict[str, Any] = Field(default_factory=dict)
    l2: float = Field(1.0, gt=0.0)
    class_weight: Literal["balanced"] | None = "balanced"  # unsafe actions are the minority of train
    veto_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    cost: float = Field(1.0, ge=0.0)
    latency_ms: float = Field(600.0, ge=0.0)  # a network round trip to the cloud dominates


class ProbeReviewCloud(ProbeBacked):
    label = staticmethod(unsafe_label)

    def __init__(self, config: ReviewerConfig | None = None, cache: Any = None) -> None:
        self.config = config or ReviewerConfig()
        super().__init__(self.config.encoder, self.config.encoder_options, cache, self.config.l2,
                         self.config.class_weight, "the cloud reviewer", "models.cloud")
        self.name = f"probe-reviewer({self.model_id}, veto>={self.config.veto_threshold})"

    def unsafe_probability(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction]) -> list[float]:
        return self.probe.predict([probe_text(s, p) for s, p in zip(scenarios, proposals, strict=True)]).tolist()

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[ToolAction],
               attempt: int = 0) -> list[CloudReview]:
        config = self.config
        reviews = []
        for p_unsafe in self.unsafe_probability(scenarios, proposals):
            verdict = "veto" if p_unsafe >= config.veto_threshold else "execute"
            reviews.append(CloudReview(verdict, None, f"p_unsafe={p_unsafe:.3f}", config.cost, config.latency_ms))
        return reviews


def build_cloud(options: dict[str, Any], where: str, context: BuildContext) -> ProbeReviewCloud:
    """The factory named in ``far.models.backends``."""
    cloud = ProbeReviewCloud(validated(ReviewerConfig, options, where), context.cache)
    context.cached.append(cloud)
    return cloud
