"""The run configuration shared by ``far`` commands, loaded from YAML with errors naming file and field."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.agent import Costs
from rollout.errors import FarInputError, from_validation_error
from rollout.io import load_mapping
from rollout.models.backends import EngineChoice, ModelsConfig
from rollout.policy import Policy, load_policies, parse_named_policies
from rollout.suites import SuiteSpec
from search.gate import GateConfig
from search.space import PolicySpace, load_space, parse_space
from verifiers.ensemble import EnsembleConfig, LLMJudgeConfig, build_verifier
from verifiers.taxonomy import RewardTable, load_reward_table, parse_reward_table


class RunConfig(BaseModel):
    """What every command shares: where scenarios come from, the models, the taxonomy's table, the gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: SuiteSpec = SuiteSpec()
    models: ModelsConfig = ModelsConfig()
    rewards: dict[str, Any] | str | None = None  # an inline table or a path to one
    costs: Costs = Costs()
    gate: GateConfig = GateConfig()
    engine: Literal["replay", "graph"] = "replay"
    verifier: EnsembleConfig = EnsembleConfig()


class EvaluateConfig(RunConfig):
    policies: dict[str, Any] | str = Field(..., description="named policies, or a path to a policies file")
    output: str = "results/evaluate"


class EvolutionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    population: int = Field(12, ge=2)
    elite: int = Field(2, ge=0)
    tournament_size: int = Field(3, ge=1)
    mutation_rate: float = Field(0.3, ge=0.0, le=1.0)
    crossover_rate: float = Field(0.7, ge=0.0, le=1.0)


class ProposerSettings(EngineChoice):
    """The LM that proposes policies for ``method: llm`` (any engine, as for the model backends)."""

    warmup: int = Field(4, ge=1, description="random policies before the first proposal")
    temperature: float = Field(0.8, ge=0.0)
    max_tokens: int = Field(120, ge=8)


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    method: Literal["grid", "random", "evolutionary", "llm"]
    budget: int = Field(100, ge=1, description="trials; a grid must fit in it")
    seed: int = 0
    on_grid: bool = Field(True, description="search the grid points of each domain (else continuous ranges)")
    concurrency: int = Field(2, ge=1, description="trials at once")
    actors: int = Field(2, ge=1, description="rollout actors")
    chunk_size: int = Field(200, ge=50, description="scenarios per actor call")
    trial_cpus: float = Field(0.5, gt=0.0, description="CPUs reserved per trial (rollout actors reserve none)")
    top_k: int = Field(5, ge=1, description="train-best policies re-evaluated on holdout")
    evolutionary: EvolutionSettings = EvolutionSettings()
    llm: ProposerSettings = ProposerSettings()


class SearchConfig(RunConfig):
    space: dict[str, Any] | str = Field(..., description="the policy space, or a path to it")
    search: SearchSettings
    output: str = "results/search"


def make_verifier(config: RunConfig, rewards: RewardTable, host: Any = None) -> Any:
    """The run's verifier: the rule verifier, or the configured ensemble (its LLM judge built like the model
    backends: hosted by ``host``, behind the model-call cache)."""
    from rollout.models.backends import build_lm

    if config.verifier.endpoint:
        from search.remote import http_verifier

        return http_verifier(config.verifier.endpoint, config.verifier.token_env)

    def judge_lm(judge: LLMJudgeConfig):
        return build_lm(judge.lm_options(), host, config.models.cache)

    return build_verifier(config.verifier, rewards, judge_lm)


class Loaded(BaseModel):
    """A config with its file references resolved (paths relative to the config file)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    source: str
    base_dir: Path
    raw: dict[str, Any]
    rewards: RewardTable
    output: Path


class LoadedEvaluateConfig(Loaded):
    config: EvaluateConfig
    policies: dict[str, Policy]


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _validate(model: type[BaseModel], path: Path) -> tuple[dict[str, Any], Any]:
    raw = load_mapping(path)
    try:
        return raw, model.model_validate(raw)
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None


def _output(config_output: str, output: str | None) -> Path:
    out = Path(output) if output else _resolve(Path.cwd(), config_output)
    if out.exists() and not out.is_dir():
        raise FarInputError("output path exists and is not a directory", file=out, field="output")
    return out.resolve()


def _rewards(config: RunConfig, base: Path, path: Path) -> RewardTable:
    if isinstance(config.rewards, str):
        return load_reward_table(_resolve(base, config.rewards))
    return parse_reward_table(config.rewards, file=path)


def load_evaluate_config(path: str | Path, output: str | None = None) -> LoadedEvaluateConfig:
    path = Path(path)
    raw, config = _validate(EvaluateConfig, path)
    base = path.resolve().parent
    if isinstance(config.policies, str):
        policies = load_policies(_resolve(base, config.policies))
    else:
        policies = parse_named_policies(config.policies, file=path)
    return LoadedEvaluateConfig(source=str(path), base_dir=base, raw=raw, config=config, policies=policies,
                                rewards=_rewards(config, base, path), output=_output(config.output, output))


class LoadedSearchConfig(Loaded):
    config: SearchConfig
    space: PolicySpace


def load_search_config(path: str | Path, output: str | None = None) -> LoadedSearchConfig:
    """Everything a search needs, validated before Ray starts."""
    path = Path(path)
    raw, config = _validate(SearchConfig, path)
    base = path.resolve().parent
    space = load_space(_resolve(base, config.space)) if isinstance(config.space, str) else parse_space(
        config.space, file=path)
    settings = config.search
    if settings.method == "grid":
        size = space.grid_size()
        if size > settings.budget:
            raise FarInputError(f"the grid has {size} points, more than the budget of {settings.budget}",
                                file=path, field="search.budget")
    if settings.evolutionary.elite > settings.evolutionary.population:
        raise FarInputError("elite must not exceed population", file=path, field="search.evolutionary.elite")
    return LoadedSearchConfig(source=str(path), base_dir=base, raw=raw, config=config, space=space,
                              rewards=_rewards(config, base, path), output=_output(config.output, output))
