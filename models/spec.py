"""What a config says about models, and the context backends are built in.

``models: {edge: {backend: ...}, cloud: ..., user: ..., cache: ...}`` validates into ``ModelsConfig``; each
backend's own options validate into its options class when it is built (``validated``). ``BuildContext``
gives factories their LMs: hosted by an ``LMHost`` (in this process, or on Ray actors: ``far.cluster.hosting``),
behind the persistent model-call cache when it is enabled.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from far.models.cache import CachedLM, CallCache
from far.models.engines import EngineSpec, LazyLM, build_engine, engine_model_id
from far.models.lm import LM
from far.rollout.errors import FarInputError, from_validation_error
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


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


# Broad licensed data that the text guards (the edge's ``embedding``, the cloud's ``reviewer`` and ``finetuned``)
# also fit on unless a config says ``shipped: false``: harm beyond any one suite, and benign look-alikes beside
# their harmful twins (``far.suites.broad_requests``). It trades some in-suite AUROC for telling harm from its
# twin on sources never fitted on; the built-in suite is not added to others, as it lowers their AUROC
# (BENCHMARKS.md, "Guards that travel").
SHIPPED_FIT_SUITES: tuple[dict[str, Any], ...] = ({"name": "broad_requests"},)
SHIPPED_FIT_BACKENDS = {"edge": frozenset({"embedding"}), "cloud": frozenset({"reviewer", "finetuned"})}


class FitOn(BaseModel):
    """Where a learned model is fitted: ``fit_on: {suites: [{name: ...}, ...], own: true}``, or ``fit_on: {suite:
    {name: ...}}`` for one other suite. Each suite is given as at the config's top level (``name`` and the suite's
    options). ``own``: the evaluated suite's train split too. ``shipped``: the shipped broad suites
    (``SHIPPED_FIT_SUITES``) too; default: yes for the probe guards, no for other models. The suites weigh the
    same (``search.evaluation.fitting``), and the evaluated suite's holdout is kept out of all of them by content."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: dict[str, Any] | None = None
    suites: tuple[dict[str, Any], ...] = ()
    own: bool = False
    shipped: bool | None = None  # None: the default for the model (above)
    split: Literal["train"] = "train"  # holdout never shapes a model

    @model_validator(mode="after")
    def _one_form(self) -> "FitOn":
        if self.suite is not None and self.suites:
            raise ValueError("give suite (one suite) or suites (a list), not both")
        if self.suite is None and not self.suites and not self.own and not self.shipped:
            raise ValueError("nothing to fit on: give suite, suites, own: true or shipped: true")
        return self

    def all_suites(self) -> tuple[dict[str, Any], ...]:
        return (self.suite,) if self.suite is not None else self.suites

    def resolved(self, shipped_by_default: bool, evaluated: str | None) -> "FitOn | None":
        """The suites named, plus the shipped ones where they apply, less any named as the evaluated suite (its
        own train split is ``own``'s); None when that leaves the evaluated suite's own train split alone."""
        shipped = SHIPPED_FIT_SUITES if (shipped_by_default if self.shipped is None else self.shipped) else ()
        suites: list[dict[str, Any]] = []
        for suite in (*self.all_suites(), *shipped):
            if suite not in suites and (suite not in shipped or suite.get("name") != evaluated):
                suites.append(suite)
        if not suites and not self.own:
            raise FarInputError("nothing to fit on: the only suite named is the evaluated one", field="fit_on")
        return FitOn(suites=tuple(suites), own=self.own, shipped=False) if suites else None


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    backend: str
    fit_on: FitOn | None = None  # None: the evaluated suite's own train split (and for the probe guards, shipped)

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


# Real models by default: the MiniLM probe on the edge, the SmolLM2 probe as the cloud reviewer (both fitted on
# train), and a user who approves every confirmation. ``oracle`` is an upper bound you must ask for.
DEFAULT_EDGE, DEFAULT_CLOUD, DEFAULT_USER = "embedding", "reviewer", "approves"
# The tool-scope model predicts, from the request alone, the tools a task needs (the policy's scope_rule reads
# it); ``scope: null`` runs none, and the scope rule then never applies.
DEFAULT_SCOPE = "tfidf"


class ModelsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    edge: BackendSpec = BackendSpec(backend=DEFAULT_EDGE)
    cloud: BackendSpec = BackendSpec(backend=DEFAULT_CLOUD)
    user: BackendSpec = BackendSpec(backend=DEFAULT_USER)
    scope: BackendSpec | None = BackendSpec(backend=DEFAULT_SCOPE)
    # a generative model that rewrites the calls the cloud would execute (``far.models.reviser``); null: the
    # cloud only executes or vetoes
    reviser: "ReviserConfig | None" = None
    cache: CacheConfig = CacheConfig()

    def fit_on(self, evaluated: str | None = None) -> dict[str, FitOn]:
        """The roles fitted on other suites, and which, for a suite named ``evaluated`` (``FitOn.resolved``): a
        role absent fits on the evaluated suite's train split alone."""
        chosen = {}
        for role in ("edge", "cloud", "scope"):
            spec = getattr(self, role)
            if spec is None:
                continue
            fit_on = spec.fit_on if spec.fit_on is not None else FitOn(own=True)
            try:
                resolved = fit_on.resolved(spec.backend in SHIPPED_FIT_BACKENDS.get(role, ()), evaluated)
            except FarInputError as error:
                raise FarInputError(error.message, field=f"models.{role}.fit_on") from None
            if resolved is not None:
                chosen[role] = resolved
        return chosen

    def uses_actors(self) -> bool:
        return (any(spec.options().get("actor", default_actor(spec.backend)) for spec in (self.edge, self.cloud))
                or (self.reviser is not None and self.reviser.actor))


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


class ReviserConfig(EngineChoice):
    """``models.reviser``: the generative model that writes the cloud's revisions (``far.models.reviser``)."""

    demonstrations: int = Field(2, ge=0)  # the nearest train examples of the same tool (bench/bench_reviser.py)
    max_tokens: int = Field(96, ge=8)
    cost: float = Field(0.0, ge=0.0)  # added to a review's cost when the reviser runs


ModelsConfig.model_rebuild()


class LMOptions(EngineChoice):
    engine: Literal["transformers", "vllm", "openai"]  # a backend's own options must name it
    cost: float | None = Field(None, ge=0.0)


class EdgeLMOptions(LMOptions):
    calibrate: bool = True


class CloudLMOptions(LMOptions):
    max_tokens: int = Field(160, ge=1)
    seed: int = 0
    retry_temperature: float = Field(0.7, ge=0.0)


# The LM-backed cloud backends and their defaults (the search's LLM proposer reuses the cloud's engine).
CLOUD_LM_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {"engine": "vllm", "model": "smollm2", "actor": True},
    "openai": {"engine": "openai"},
    "lm": {},
}


class BuildContext:
    def __init__(self, host: LMHost, cache: CallCache | None, base_dir: Path | None = None) -> None:
        self.host = host
        self.cache = cache
        self.base_dir = base_dir  # where the config is: relative paths in model options start there
        self.cached: list[Any] = []  # what counts cache hits and misses (CachedLM wrappers, the embedding edge)

    def lm(self, options: LMOptions) -> LM:
        lm = self.host.lm(EngineSpec(engine=options.engine, model=options.model, options=options.engine_options),
                          options.actor)
        if self.cache is None:
            return lm
        cached = CachedLM(lm, self.cache)
        self.cached.append(cached)
        return cached


# A backend factory: (the backend's options, where in the config they are, the build context) -> a model.
Factory = Callable[[dict[str, Any], str, BuildContext], Any]


def validated(config_cls: type[BaseModel], options: dict[str, Any], where: str) -> Any:
    """``options`` as a ``config_cls``, or a ``FarInputError`` naming the field under ``where``."""
    try:
        return config_cls.model_validate(options)
    except ValidationError as error:
        raise from_validation_error(error, prefix=where) from None


def open_cache(config: CacheConfig) -> CallCache | None:
    if not config.enabled:
        return None
    from far.models.weights import data_dir

    return CallCache(Path(config.path).expanduser() if config.path else data_dir() / "model_calls.sqlite")


def build_lm(options: LMOptions, host: LMHost | None = None, cache: CacheConfig | None = None) -> LM:
    """One LM as the backends build theirs: hosted by ``host``, behind the call cache when enabled."""
    return BuildContext(host or InProcessHost(), open_cache(cache or CacheConfig())).lm(options)
