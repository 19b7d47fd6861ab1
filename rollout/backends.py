"""Model backends registered by name; the config's ``models: {edge: {backend: ...}, ...}`` picks them.

    edge:  simulated | smollm2 | embedding | lm        cloud: simulated | vllm | openai | lm

``smollm2`` = ``lm`` on the transformers engine with the wheel's SmolLM2; ``vllm`` = ``lm`` on the vLLM
engine; ``openai`` = ``lm`` on the HTTP client. LM-backed backends go through the persistent model-call cache
(``models.cache``) and, with ``actor: true``, run their engine on a Ray actor supplied by the host
(``cluster.hosting.RayHost``); the default host builds engines in this process.
"""
from __future__ import annotations

import functools

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.cache import CachedLM, CallCache
from rollout.engines import EngineSpec, LazyLM, build_engine, engine_model_id
from rollout.errors import FarInputError, from_validation_error
from rollout.lm import LM
from rollout.models import GroundTruthEnvironment, ModelSet
from rollout.simulated import (
    SimulatedCloud,
    SimulatedCloudConfig,
    SimulatedEdge,
    SimulatedEdgeConfig,
    SimulatedUser,
    SimulatedUserConfig,
)


class LMHost(Protocol):
    """Where engines run. ``actor`` asks for a long-lived Ray actor; a host that has none refuses clearly."""

    def lm(self, spec: EngineSpec, actor: bool) -> LM: ...


class InProcessHost:
    """Engines in this process, one per distinct spec (edge and cloud on the same weights share it)."""

    def __init__(self) -> None:
        self._engines: dict[str, LM] = {}

    def lm(self, spec: EngineSpec, actor: bool) -> LM:
        if actor:
            raise FarInputError("actor: true needs Ray (run through `far`, which starts it)", field="models")
        key = spec.model_dump_json()
        if key not in self._engines:
            self._engines[key] = LazyLM(engine_model_id(spec), functools.partial(build_engine, spec))
        return self._engines[key]


class CacheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    path: str | None = None  # default: <data dir>/model_calls.sqlite


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    backend: str = "simulated"

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    edge: BackendSpec = BackendSpec()
    cloud: BackendSpec = BackendSpec()
    user: BackendSpec = BackendSpec()
    cache: CacheConfig = CacheConfig()

    def uses_actors(self) -> bool:
        return any(spec.options().get("actor", default_actor(spec.backend)) for spec in (self.edge, self.cloud))


def default_actor(backend: str) -> bool:
    return backend == "vllm"  # vLLM is heavy and belongs on its own (GPU) actor; others default in-process


class EngineChoice(BaseModel):
    """Which LM engine, on which weights, hosted where: shared by every config that names an LM."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: Literal["transformers", "vllm", "openai"] = "transformers"
    model: str = "smollm2"
    engine_options: dict[str, Any] = Field(default_factory=dict)
    actor: bool = False

    def lm_options(self) -> "LMOptions":
        return LMOptions(engine=self.engine, model=self.model, engine_options=self.engine_options,
                         actor=self.actor)


class LMOptions(EngineChoice):
    engine: Literal["transformers", "vllm", "openai"]  # a backend's own options must name it
    cost: float | None = Field(None, ge=0.0)


class EdgeLMOptions(LMOptions):
    calibrate: bool = True


class CloudLMOptions(LMOptions):
    max_tokens: int = Field(160, ge=1)
    seed: int = 0
    retry_temperature: float = Field(0.7, ge=0.0)


class BuildContext:
    def __init__(self, host: LMHost, cache: CallCache | None) -> None:
        self.host = host
        self.cache = cache
        self.cached: list[CachedLM] = []

    def lm(self, options: LMOptions) -> LM:
        lm = self.host.lm(EngineSpec(engine=options.engine, model=options.model, options=options.engine_options),
                          options.actor)
        if self.cache is None:
            return lm
        cached = CachedLM(lm, self.cache)
        self.cached.append(cached)
        return cached


Factory = Callable[[dict[str, Any], str, BuildContext], Any]


def _validated(config_cls: type[BaseModel], options: dict[str, Any], where: str) -> Any:
    try:
        return config_cls.model_validate(options)
    except ValidationError as error:
        raise from_validation_error(error, prefix=where) from None


def _simulated(model_cls: type, config_cls: type[BaseModel]) -> Factory:
    return lambda options, where, context: model_cls(_validated(config_cls, options, where))


def _edge_lm(defaults: dict[str, Any]) -> Factory:
    def build(options: dict[str, Any], where: str, context: BuildContext) -> Any:
        from rollout.lm_backends import LMRiskEdge

        spec = _validated(EdgeLMOptions, {**defaults, **options}, where)
        return LMRiskEdge(context.lm(spec), calibrate=spec.calibrate,
                          **({"cost": spec.cost} if spec.cost is not None else {}))

    return build


def _cloud_lm(defaults: dict[str, Any]) -> Factory:
    def build(options: dict[str, Any], where: str, context: BuildContext) -> Any:
        from rollout.lm_backends import LMReviewCloud

        spec = _validated(CloudLMOptions, {**defaults, **options}, where)
        return LMReviewCloud(context.lm(spec), max_tokens=spec.max_tokens, seed=spec.seed,
                             retry_temperature=spec.retry_temperature,
                             **({"cost": spec.cost} if spec.cost is not None else {}))

    return build


def _embedding_edge(options: dict[str, Any], where: str, context: BuildContext) -> Any:
    from rollout.embedding_edge import EmbeddingEdgeConfig, EmbeddingRiskEdge

    edge = EmbeddingRiskEdge(_validated(EmbeddingEdgeConfig, options, where), context.cache)
    context.cached.append(edge)  # it counts its own cache hits and misses
    return edge


EDGE_BACKENDS: dict[str, Factory] = {
    "simulated": _simulated(SimulatedEdge, SimulatedEdgeConfig),
    "smollm2": _edge_lm({"engine": "transformers", "model": "smollm2"}),
    "lm": _edge_lm({}),
    "embedding": _embedding_edge,
}
CLOUD_LM_DEFAULTS: dict[str, dict[str, Any]] = {  # the LM-backed cloud backends and their defaults
    "vllm": {"engine": "vllm", "model": "smollm2", "actor": True},
    "openai": {"engine": "openai"},
    "lm": {},
}
CLOUD_BACKENDS: dict[str, Factory] = {
    "simulated": _simulated(SimulatedCloud, SimulatedCloudConfig),
    **{name: _cloud_lm(defaults) for name, defaults in CLOUD_LM_DEFAULTS.items()},
}
USER_BACKENDS: dict[str, Factory] = {"simulated": _simulated(SimulatedUser, SimulatedUserConfig)}


def _build(registry: dict[str, Factory], spec: BackendSpec, where: str, context: BuildContext) -> Any:
    if spec.backend not in registry:
        known = ", ".join(sorted(registry))
        raise FarInputError(f"unknown backend {spec.backend!r} (known: {known})", field=f"{where}.backend")
    return registry[spec.backend](spec.options(), where, context)


def open_cache(config: CacheConfig) -> CallCache | None:
    if not config.enabled:
        return None
    from rollout.weights import data_dir

    return CallCache(Path(config.path).expanduser() if config.path else data_dir() / "model_calls.sqlite")


def build_lm(options: LMOptions, host: LMHost | None = None, cache: CacheConfig | None = None) -> LM:
    """One LM as the backends build theirs: hosted by ``host``, behind the call cache when enabled."""
    return BuildContext(host or InProcessHost(), open_cache(cache or CacheConfig())).lm(options)


def build_models(config: ModelsConfig, host: LMHost | None = None) -> ModelSet:
    context = BuildContext(host or InProcessHost(), open_cache(config.cache))
    models = ModelSet(
        edge=_build(EDGE_BACKENDS, config.edge, "models.edge", context),
        cloud=_build(CLOUD_BACKENDS, config.cloud, "models.cloud", context),
        user=_build(USER_BACKENDS, config.user, "models.user", context),
        environment=GroundTruthEnvironment(),
        cached=tuple(context.cached),
    )
    return models
