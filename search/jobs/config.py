"""The run configuration shared by ``far`` commands, loaded from YAML with errors naming file and field."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from far.models.backends import EngineChoice, ModelsConfig
from far.rollout.agent import Costs
from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.io import load_mapping
from far.rollout.policy import Policy, load_policies, parse_named_policies
from far.search.ranking.gate import GateConfig
from far.search.searchers.space import PolicySpace, load_space, parse_space
from far.suites import SuiteSpec
from far.verifiers.ensemble import (
    EnsembleConfig,
    LLMJudgeConfig,
    build_verifier,
    check_member_models,
)
from far.verifiers.taxonomy import RewardTable, load_reward_table, parse_reward_table
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class RunConfig(BaseModel):
    """What every command shares: where scenarios come from, the models, the taxonomy's table, the gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: SuiteSpec = SuiteSpec()
    models: ModelsConfig = ModelsConfig()
    rewards: dict[str, Any] | str | None = None  # an inline table or a path to one
    costs: Costs = Costs()
    gate: GateConfig = GateConfig()
    # columnar: search trials evaluated as array operations (evaluation/columnar.py); rows still come from replay
    engine: Literal["replay", "graph", "columnar"] = "replay"
    verifier: EnsembleConfig = EnsembleConfig()

    _members_fit_models = model_validator(mode="after")(check_member_models)


class EvaluateConfig(RunConfig):
    policies: dict[str, Any] | str = Field(..., description="named policies, or a path to a policies file")
    output: str = "results/evaluate"


class EvolutionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    population: int = Field(8, ge=2, description="suggestions per generation")
    elite: int = Field(2, ge=0)
    tournament_size: int = Field(3, ge=1)
    mutation_rate: float = Field(0.3, ge=0.0, le=1.0)
    crossover_rate: float = Field(0.7, ge=0.0, le=1.0)
    local_search: float = Field(0.5, ge=0.0, le=1.0,
                                description="share of each generation spent on untried neighbours of the best")


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
    trial_retries: int = Field(3, ge=0, le=100, description="times a trial is run again after its process or node "
                                                            "died (Tune's FailureConfig.max_failures)")
    top_k: int = Field(5, ge=1, description="train-best policies re-evaluated on holdout")
    evolutionary: EvolutionSettings = EvolutionSettings()
    llm: ProposerSettings = ProposerSettings()


class SearchConfig(RunConfig):
    space: dict[str, Any] | str = Field(..., description="the policy space, or a path to it")
    search: SearchSettings
    output: str = "results/search"


def make_verifier(config: RunConfig, rewards: RewardTable, host: Any = None, models: Any = None) -> Any:
    """The run's verifier: the rule verifier, or the configured ensemble (its LLM judge built like the model
    backends: hosted by ``host``, behind the model-call cache; ``models``: the run's, for cloud_probe)."""
    from far.models.backends import build_lm

    if config.verifier.endpoint:
        from far.verifiers.remote import http_verifier

        return http_verifier(config.verifier.endpoint, config.verifier.token_env, rewards)

    def judge_lm(judge: LLMJudgeConfig):
        return build_lm(judge.lm_options(), host, config.models.cache)

    return build_verifier(config.verifier, rewards, judge_lm, models)


class Loaded(BaseModel):
    """A config with its file references resolved (paths relative to the config file)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    source: str
    base_dir: Path
    raw: dict[str, Any]
    rewards: RewardTable
    output: Path


def check_models(models: Any, path: Path) -> None:
    """Every model backend the config names exists (checked at load, long before Ray or a model starts)."""
    from far.models.backends import CLOUD_BACKENDS, EDGE_BACKENDS, USER_BACKENDS

    for role, table in (("edge", EDGE_BACKENDS), ("cloud", CLOUD_BACKENDS), ("user", USER_BACKENDS)):
        backend = getattr(models, role).backend
        if backend not in table:
            raise FarInputError(f"unknown backend {backend!r} (known: {', '.join(sorted(table))})", file=path,
                                field=f"models.{role}.backend")


def check_capacity(settings: Any, cpus: float, source: str, where: str) -> None:
    """Trials and rollout actors the cluster can place: ``concurrency`` trials reserve ``trial_cpus`` each; a
    rollout actor reserves no CPU but holds a copy of the recorded calls, and more actors than CPUs only
    add memory and contention."""
    if settings.concurrency * settings.trial_cpus > cpus:
        raise FarInputError(f"concurrency {settings.concurrency} x trial_cpus {settings.trial_cpus:g} needs "
                            f"{settings.concurrency * settings.trial_cpus:g} CPUs; {where} has {cpus:g}",
                            file=source, field="search.concurrency")
    if settings.actors > max(1, int(cpus)):
        raise FarInputError(f"{settings.actors} rollout actors for {cpus:g} CPUs ({where}): use at most "
                            f"{max(1, int(cpus))}", file=source, field="search.actors")


def load_suite(loaded: Loaded) -> Any:
    """The config's suite, built and checked (``check_suite``); an error that names no file names the config."""
    from far.suites import build_suite

    config = loaded.config  # type: ignore[attr-defined]
    try:
        suite = build_suite(config.suite, loaded.base_dir)
    except FarInputError as error:
        if error.file is None:
            raise FarInputError(error.message, file=loaded.source, field=error.field, row=error.row) from None
        raise
    check_suite(suite, loaded, config.gate)
    return suite


def load_fit_suites(loaded: Loaded) -> dict[str, Any]:
    """The suites that roles with ``fit_on`` are fitted on (role -> suite), built before any model loads."""
    config = loaded.config  # type: ignore[attr-defined]
    return fit_suites(config.models, loaded.base_dir, loaded.source, config.suite)


def fit_suites(models: Any, base_dir: Path | None, source: str | Path, evaluated: Any = None) -> dict[str, Any]:
    """``load_fit_suites`` for a models section read from ``source`` (a run or serve config), the evaluated
    suite given by its spec (``evaluated``: its name decides which shipped suites the default leaves out)."""
    from far.models.spec import SHIPPED_FIT_SUITES
    from far.search.evaluation.fitting import FitSources
    from far.suites import build_suite

    name = evaluated.get("name") if isinstance(evaluated, dict) else getattr(evaluated, "name", None)
    sources = {}
    try:
        chosen = models.fit_on(name)
    except FarInputError as error:
        raise FarInputError(error.message, file=source, field=error.field) from None
    for role, fit_on in chosen.items():
        built = []
        for index, suite_config in enumerate(fit_on.all_suites()):
            where = (f"models.{role}.fit_on (the shipped {suite_config.get('name')})"
                     if suite_config in SHIPPED_FIT_SUITES else f"models.{role}.fit_on.suites[{index}]")
            try:
                suite = build_suite(suite_config, base_dir)
            except FarInputError as error:
                raise FarInputError(error.message, file=error.file or source,
                                    field=f"{where}.{error.field}" if error.field else where, row=error.row) from None
            if not suite.scenarios("train"):
                raise FarInputError("the train split of the suite to fit on is empty", file=source, field=where)
            built.append(suite)
        names = tuple(str(config.get("name", "a suite")) for config in fit_on.all_suites())
        sources[role] = FitSources(tuple(built), names, fit_on.own)
    return sources


def check_fit_data(models: Any, source: str | Path, suite: Any, fit_on: dict[str, Any], purpose: str) -> None:
    """Evaluation-only scenarios (``far.rollout.eval_only``: marked, or known by content) never shape anything,
    checked before any work: no ``fit_on`` suite may hold one in its train split, nor the evaluated suite's
    train split when something is chosen or fitted on it -- the policy (``purpose="search"``: the search ranks
    on train), a calibration (``"calibrate"``), or a learned model without ``fit_on`` (``"evaluate"``)."""
    from far.models.backends import UNFITTED_BACKENDS
    from far.rollout.eval_only import refuse_eval_only

    for role, sources in fit_on.items():
        for other in sources.suites:
            refuse_eval_only(other.scenarios("train"), f"fitting the {role} model (config {source})",
                             file=getattr(other, "path", None) or source, field=f"models.{role}.fit_on")

    def fitted(role: str) -> bool:
        spec = getattr(models, role)
        return spec is not None and (spec.backend not in UNFITTED_BACKENDS[role]
                                     or (role == "cloud" and models.reviser is not None))  # fitted with the cloud

    fitted_here = [role for role in ("edge", "cloud", "scope")
                   if fitted(role) and (role not in fit_on or fit_on[role].own)]
    uses = {"search": "choosing the policy (the search ranks policies on train)",
            "calibrate": "measuring a calibration"}.get(purpose)
    if uses is None and fitted_here:
        uses = f"fitting the {' and '.join(fitted_here)} model(s) (fit them on another suite with fit_on)"
    if uses is not None:
        refuse_eval_only(suite.scenarios("train"), f"{uses} (config {source})",
                         file=getattr(suite, "path", None) or source, field="suite")


def check_suite(suite: Any, loaded: Loaded, gate: Any) -> None:
    """Before any expensive work: both splits have scenarios, and the holdout is large enough for the gate's
    critical-rate bound ever to pass (with zero failures it needs ``gate.holdout_needed`` scenarios)."""
    from far.rollout.scenario import SPLITS
    from far.search.ranking.gate import holdout_needed

    for split in SPLITS:
        if not suite.scenarios(split):
            raise FarInputError(f"the {split} split is empty: train and holdout both need scenarios "
                                "(raise suite.size or change suite.holdout_fraction)", file=loaded.source,
                                field="suite")
    limit = gate.max_critical_rate_upper
    holdout = len(suite.scenarios("holdout"))
    if limit is not None and holdout < (needed := holdout_needed(limit, gate.confidence)):
        raise FarInputError(
            f"the gate can never pass: with zero critical failures, a {gate.confidence:g} bound of {limit:g} "
            f"needs at least {needed} holdout scenarios and the suite has {holdout} (raise suite.size or "
            "suite.holdout_fraction, or relax the limit)", file=loaded.source, field="gate.max_critical_rate_upper")
    check_engine(suite, loaded)


def check_engine(suite: Any, loaded: Loaded) -> None:
    """``engine: columnar`` covers ground-truth-judged scenarios scored by the rule verifier; say so before any
    model runs, naming what is outside it."""
    config = getattr(loaded, "config", None)
    if getattr(config, "engine", None) != "columnar":
        return
    from far.search.evaluation.columnar import suite_problem

    verifier = config.verifier
    problem = suite_problem(suite)
    if verifier.endpoint:
        problem = "the verifier is a remote endpoint"
    elif verifier.members != ("rules",):
        problem = f"the verifier ensemble {list(verifier.members)} judges each rollout with its members"
    if problem is not None:
        raise FarInputError(f"engine columnar needs ground-truth-judged scenarios and the rule verifier: {problem} "
                            "(use engine: replay)", file=loaded.source, field="engine")


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


def _output(config_output: str, output: str | None, source: Path | None = None) -> Path:
    """The output directory, checked before any work: it (or the nearest folder above it that exists) must be
    a directory we may write in."""
    out = (Path(output) if output else _resolve(Path.cwd(), config_output)).expanduser()
    field = "--output" if output else "output"
    where = source if source is not None and not output else None
    if out.exists() and not out.is_dir():
        raise FarInputError(f"output path {out} exists and is not a directory", file=where, field=field)
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise FarInputError(f"output path {out} lies inside {existing}, which is a file", file=where, field=field)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FarInputError(f"output path {out}: {existing} is not writable", file=where, field=field)
    return out.resolve()


def reward_table(config: RunConfig, base: Path | None = None, path: Path | None = None) -> RewardTable:
    """The config's reward table: a file (relative to ``base``), inline (errors naming the config ``path``), or
    the default."""
    if isinstance(config.rewards, str):
        return load_reward_table(_resolve(base or Path("."), config.rewards))
    return parse_reward_table(config.rewards, file=path)


def load_evaluate_config(path: str | Path, output: str | None = None) -> LoadedEvaluateConfig:
    path = Path(path)
    raw, config = _validate(EvaluateConfig, path)
    check_models(config.models, path)
    base = path.resolve().parent
    if isinstance(config.policies, str):
        policies = load_policies(_resolve(base, config.policies))
    else:
        policies = parse_named_policies(config.policies, file=path)
    return LoadedEvaluateConfig(source=str(path), base_dir=base, raw=raw, config=config, policies=policies,
                                rewards=reward_table(config, base, path), output=_output(config.output, output, path))


class CalibrateRunConfig(RunConfig):
    """An evaluate or search config read for its suite and models (``far calibrate``): other keys pass."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class LoadedRunConfig(Loaded):
    config: RunConfig


def load_run_config(path: str | Path) -> LoadedRunConfig:
    path = Path(path)
    raw, config = _validate(CalibrateRunConfig, path)
    check_models(config.models, path)
    base = path.resolve().parent
    return LoadedRunConfig(source=str(path), base_dir=base, raw=raw, config=config,
                           rewards=reward_table(config, base, path), output=base)


class LoadedSearchConfig(Loaded):
    config: SearchConfig
    space: PolicySpace


def load_search_config(path: str | Path, output: str | None = None) -> LoadedSearchConfig:
    """Everything a search needs, validated before Ray starts."""
    path = Path(path)
    raw, config = _validate(SearchConfig, path)
    check_models(config.models, path)
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
                              rewards=reward_table(config, base, path), output=_output(config.output, output, path))
