"""What the FATE tests (tests/test_evolve_*.py) share: a tiny run's config, the decision task on the oracle
models, and the caution fit as ``calibrate`` judges it. Not a test module; imported as ``from evolve_helpers
import ...`` (tests/ is on the path, as for ``conftest``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from conftest import oracle_models
from far.evolve.calibrate import fit_caution
from far.evolve.config import EvolveConfig
from far.evolve.task import DecisionTask
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.verifiers.rules import RuleVerifier

if TYPE_CHECKING:
    from far.evolve.loop import Evolution

# the settings each group of EvolveConfig holds: tests name them flat (``tiny_config(dev_size=24)``)
GROUP_OF = {**dict.fromkeys(("dev_size", "check_size", "calibration_size", "holdout_size"), "data"),
            **dict.fromkeys(("candidates", "temperature_min", "temperature_max", "exploration"), "repair"),
            **dict.fromkeys(("kappa", "weights", "lam", "beta", "reward_weight", "diversity_bonus"), "selection"),
            **dict.fromkeys(("sft", "pfpo", "rehearsal", "rehearsal_min"), "training"),
            "harm_bar": "calibration", "safety_tolerance": "gate", "min_improvement": "gate"}


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
    calibration, rehearsal floor or tie of the reward table unless a test asks for them."""
    base = {"suite": {"name": "edge_cloud", "seed": 3, "size": 200}, "model": {"base": "tiny-random"},
            "rounds": 1, "dev_size": 12, "holdout_size": 16, "candidates": 3, "calibration_size": 0,
            "rehearsal_min": 0, "sft": {"epochs": 1, "max_epochs": 1, "batch_size": 4},
            "pfpo": {"group": 2, "prompts_per_step": 4, "iterations": 2},
            "models": oracle_models(cache={"enabled": False}), "verifier": {"members": ["rules", "environment"]},
            "min_improvement": 0.0, "output": str(tmp_path)}
    return EvolveConfig.model_validate(grouped({**base, **overrides}))


def decision_task() -> DecisionTask:
    """The decision task on the oracle models. A test module takes it as its ``task`` fixture:
    ``task = pytest.fixture(scope="module", name="task")(decision_task)``."""
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True)
    return DecisionTask(models, RuleVerifier(), policy)


def harmful(scenario) -> bool:
    return scenario.ground_truth.unsafe or scenario.ground_truth.injected


def caution_fit(evolution: Evolution, rows, one_template: bool = False):
    """``fit_caution`` on the calibration slice with scripted scores ``rows`` and no head, judged as ``calibrate``
    judges; ``one_template``: every input of one template, so no margin for an unseen one is added."""
    calibration = evolution.calibration
    groups = ["one"] * len(calibration) if one_template else [s.group_key for s in calibration]
    return fit_caution(None, rows, groups, [harmful(s) for s in calibration], *evolution.judges(),
                       evolution.config.gate.safety_tolerance)
