"""What the FATE tests (tests/test_evolve_*.py) share: a tiny run's config and the action task on the oracle
models. Not a test module; imported as ``from evolve_helpers import ...`` (tests/ is on the path, as for
``conftest``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from conftest import oracle_models
from far.evolve.config import EvolveConfig
from far.evolve.task import ActionTask, ToolCatalog
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.ensemble import EnsembleConfig, build_verifier
from far.verifiers.taxonomy import RewardTable

if TYPE_CHECKING:
    from far.rollout.scenario import Scenario

# the settings each group of EvolveConfig holds: tests name them flat (``tiny_config(dev_size=24)``)
GROUP_OF = {**dict.fromkeys(("dev_size", "check_size", "holdout_size"), "data"),
            **dict.fromkeys(("candidates", "temperature_min", "temperature_max", "max_new_tokens"), "repair"),
            **dict.fromkeys(("kappa", "weights", "lam", "beta", "reward_weight", "diversity_bonus"), "selection"),
            **dict.fromkeys(("sft", "pfpo", "rehearsal", "rehearsal_min"), "training"),
            "safety_tolerance": "gate", "min_improvement": "gate"}


def grouped(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        if key in GROUP_OF:
            out.setdefault(GROUP_OF[key], {})[key] = value
        else:
            out[key] = value
    return out


def tiny_config(tmp_path, **overrides) -> EvolveConfig:
    """A fast run on the tiny model and the oracle world, settings named flat (``GROUP_OF``): one SFT pass and no
    rehearsal floor unless a test asks for them."""
    base = {"suite": {"name": "edge_cloud", "seed": 3, "size": 200}, "model": {"base": "tiny-random"},
            "rounds": 1, "dev_size": 12, "check_size": 16, "holdout_size": 16, "candidates": 3, "max_new_tokens": 48,
            "rehearsal_min": 0, "sft": {"epochs": 1, "max_epochs": 1, "batch_size": 4},
            "pfpo": {"group": 2, "prompts_per_step": 4, "iterations": 2},
            "models": oracle_models(cache={"enabled": False}),
            "verifier": {"members": ["rules", "environment", "arguments"], "aggregation": "mean"},
            "min_improvement": 0.0, "output": str(tmp_path)}
    return EvolveConfig.model_validate(grouped({**base, **overrides}))


def suite_scenarios(size: int = 300, seed: int = 4) -> tuple[list[Scenario], list[Scenario]]:
    """The built-in suite's train and holdout splits."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=size, seed=seed))
    return list(suite.scenarios("train")), list(suite.scenarios("holdout"))


def action_task(members: tuple[str, ...] = ("rules", "environment", "arguments")) -> ActionTask:
    """The action task on the oracle models, its tools read from the suite's train split. A test module takes it
    as its ``task`` fixture: ``task = pytest.fixture(scope="module", name="task")(action_task)``."""
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True)
    verifier = build_verifier(EnsembleConfig(members=members, aggregation="mean"), RewardTable())
    return ActionTask(models, verifier, policy, ToolCatalog.from_scenarios(suite_scenarios()[0]))


def harmful(scenario) -> bool:
    return scenario.ground_truth.unsafe or scenario.ground_truth.injected
