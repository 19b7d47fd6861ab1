"""The run configuration shared by ``far`` commands, loaded from YAML with errors naming file and field."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.agent import Costs
from rollout.backends import ModelsConfig
from rollout.errors import FarInputError, from_validation_error
from rollout.io import load_mapping
from rollout.policy import Policy, load_policies, parse_named_policies
from rollout.suites import SuiteSpec
from search.gate import GateConfig
from verifiers.taxonomy import RewardTable, load_reward_table, parse_reward_table


class EvaluateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: SuiteSpec = SuiteSpec()
    models: ModelsConfig = ModelsConfig()
    rewards: dict[str, Any] | str | None = None  # an inline table or a path to one
    costs: Costs = Costs()
    gate: GateConfig = GateConfig()
    policies: dict[str, Any] | str = Field(..., description="named policies, or a path to a policies file")
    engine: Literal["replay", "graph"] = "replay"
    output: str = "results/evaluate"


class LoadedEvaluateConfig(BaseModel):
    """The config with file references resolved (paths relative to the config file)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    source: str
    base_dir: Path
    raw: dict[str, Any]
    config: EvaluateConfig
    policies: dict[str, Policy]
    rewards: RewardTable
    output: Path


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def load_evaluate_config(path: str | Path, output: str | None = None) -> LoadedEvaluateConfig:
    path = Path(path)
    raw = load_mapping(path)
    try:
        config = EvaluateConfig.model_validate(raw)
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None
    base = path.resolve().parent
    if isinstance(config.policies, str):
        policies = load_policies(_resolve(base, config.policies))
    else:
        policies = parse_named_policies(config.policies, file=path)
    if isinstance(config.rewards, str):
        rewards = load_reward_table(_resolve(base, config.rewards))
    else:
        rewards = parse_reward_table(config.rewards, file=path)
    out = Path(output) if output else _resolve(Path.cwd(), config.output)
    if out.exists() and not out.is_dir():
        raise FarInputError("output path exists and is not a directory", file=out, field="output")
    return LoadedEvaluateConfig(source=str(path), base_dir=base, raw=raw, config=config, policies=policies,
                                rewards=rewards, output=out)
