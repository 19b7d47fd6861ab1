"""Model backends by name; the config's ``models: {edge: {backend: ...}, ...}`` picks them.

    edge:  embedding | calibrated | smollm2 | lm | oracle
    cloud: reviewer | calibrated | vllm | openai | lm | oracle
    user:  approves | oracle
    scope: tfidf (or null: no tool-scope model)
    reviser: {engine, model, demonstrations} (or null, the default: the cloud only executes or vetoes)

``embedding`` (a MiniLM probe) and ``reviewer`` (a SmolLM2 probe) are real models fitted on a train split;
``calibrated`` draws decisions from a real model's measured error rates (``far calibrate``); ``approves`` is a
user who approves confirmations without reading labels. ``oracle`` models read the scenario's labels
(``far.models.oracle``): an upper bound, marked ORACLE in every output; ``simulated`` is their old name.

``reviser`` wraps whatever cloud is chosen (``far.models.reviser.RevisingCloud``): a generative model rewrites
the calls the cloud would execute, so the cloud can answer ``revise``; it is fitted with the cloud.

``smollm2`` = ``lm`` on the transformers engine with the wheel's SmolLM2; ``vllm`` = ``lm`` on the vLLM
engine; ``openai`` = ``lm`` on the HTTP client. LM-backed backends go through the persistent model-call cache
(``models.cache``) and, with ``actor: true``, run their engine on a Ray actor supplied by the host
(``far.cluster.hosting.RayHost``); the default host builds engines in this process.

Each table names its factories by module path (imported on first use: torch loads only for a real model);
add your own with ``register`` or an entry point in the ``far.edge_backends`` / ``far.cloud_backends`` /
``far.user_backends`` group. A factory is a ``far.models.spec.Factory``.
"""
from __future__ import annotations

from pathlib import Path

from far.models.spec import (  # noqa: F401  (the names users build models with, in one place)
    CLOUD_LM_DEFAULTS,
    BackendSpec,
    BuildContext,
    CacheConfig,
    CloudLMOptions,
    EdgeLMOptions,
    EngineChoice,
    Factory,
    InProcessHost,
    LMHost,
    LMOptions,
    ModelsConfig,
    build_lm,
    default_actor,
    open_cache,
)
from far.rollout.calls import GroundTruthEnvironment, ModelSet
from far.rollout.errors import FarInputError
from far.rollout.registry import Registry

EDGE_BACKENDS: Registry[Factory] = Registry("backend", "far.edge_backends", {
    "oracle": "far.models.oracle:build_edge",
    "smollm2": "far.models.lm_backends:build_smollm2_edge",
    "lm": "far.models.lm_backends:build_lm_edge",
    "embedding": "far.models.embedding_edge:build_edge",
    "calibrated": "far.models.calibrated:build_edge",
})
CLOUD_BACKENDS: Registry[Factory] = Registry("backend", "far.cloud_backends", {
    "oracle": "far.models.oracle:build_cloud",
    "reviewer": "far.models.reviewer:build_cloud",
    "finetuned": "far.models.finetuned:build_cloud",
    "calibrated": "far.models.calibrated:build_cloud",
    **{name: f"far.models.lm_backends:build_{name}_cloud" for name in CLOUD_LM_DEFAULTS},
})
USER_BACKENDS: Registry[Factory] = Registry("backend", "far.user_backends", {
    "approves": "far.models.users:build_user",
    "oracle": "far.models.oracle:build_user",
})

SCOPE_BACKENDS: Registry[Factory] = Registry("backend", "far.scope_backends", {
    "tfidf": "far.models.scope:build_scope",
})

# backends that fit nothing on data (every other one, plugins included, is assumed to fit on its train split:
# evaluation-only data is then kept from it, ``far.search.jobs.config.check_fit_data``)
UNFITTED_BACKENDS = {"edge": frozenset({"oracle", "calibrated"}),  # edge lm/smollm2 fit Platt scaling
                     "cloud": frozenset({"oracle", "calibrated", *CLOUD_LM_DEFAULTS}),
                     "scope": frozenset()}


def _build(registry: Registry[Factory], spec: BackendSpec, where: str, context: BuildContext):
    if spec.backend not in registry:
        known = ", ".join(sorted(registry))
        raise FarInputError(f"unknown backend {spec.backend!r} (known: {known})", field=f"{where}.backend")
    return registry[spec.backend](spec.options(), where, context)


def build_models(config: ModelsConfig, host: LMHost | None = None, base_dir: Path | None = None) -> ModelSet:
    context = BuildContext(host or InProcessHost(), open_cache(config.cache), base_dir)
    cloud = _build(CLOUD_BACKENDS, config.cloud, "models.cloud", context)
    if config.reviser is not None:
        from far.models.reviser import LMReviser, RevisingCloud

        cloud = RevisingCloud(cloud, LMReviser(context.lm(config.reviser.lm_options()), config.reviser))
    return ModelSet(
        edge=_build(EDGE_BACKENDS, config.edge, "models.edge", context),
        cloud=cloud,
        user=_build(USER_BACKENDS, config.user, "models.user", context),
        environment=GroundTruthEnvironment(),
        cached=tuple(context.cached),
        scope=None if config.scope is None else _build(SCOPE_BACKENDS, config.scope, "models.scope", context),
    )
