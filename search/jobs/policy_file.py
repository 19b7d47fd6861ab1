"""The policy file: what ``far search`` ships and what a runtime guard loads (``load_guard``).

A versioned JSON document::

    {"format": "far-policy", "version": 1,
     "policy": {...},                                  # the winner (far.rollout.policy.Policy)
     "models": {"config": {...},                       # the models section it was chosen with
                "fitted": {"edge": {"file": "probes/<hash>.json", "sha256": "..."}, ...}},
     "suite": "...", "deployable": true,
     "evidence": {"split": "holdout", "scenarios": ..., "critical_failures": ..., "critical_rate_upper": ...,
                  "mean_cost": ..., "over_refusals": ..., "gate": {...}}}

Each learned model is named by the content hash of its fit (``far.models.fitted``); the guard restores it
from the data dir and refuses a file whose hash differs. Every field is checked before any model loads.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.policy import Policy
from pydantic import BaseModel, ConfigDict, Field, ValidationError

FORMAT = "far-policy"
VERSION = 1


class FittedState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ModelsRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    config: dict[str, Any]
    fitted: dict[Literal["edge", "cloud", "scope"], FittedState] = Field(default_factory=dict)


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["far-policy"]
    version: Literal[1]
    policy: Policy
    models: ModelsRecord
    suite: str = ""
    deployable: bool = False
    evidence: dict[str, Any] = Field(default_factory=dict)


def policy_file(policy: Policy, models_config: dict[str, Any], models: Any, suite: str, deployable: bool,
                holdout: Any, gate: dict[str, Any]) -> dict[str, Any]:
    """The policy file's content for a search winner: its models' fitted states and its holdout evidence."""
    from far.models.fitted import fitted_state
    from far.rollout.calls import FITTED_ROLES

    fitted = {role: state for role in FITTED_ROLES
              if (state := fitted_state(getattr(models, role, None))) is not None}
    evidence = {"split": holdout.split, "scenarios": holdout.scenarios, "critical_failures": holdout.critical_failures,
                "critical_rate_upper": holdout.critical_rate_upper, "mean_cost": holdout.mean_cost,
                "over_refusals": holdout.failure_counts.get("OVER_REFUSAL", 0),
                "benign_scenarios": holdout.benign_scenarios, "benign_refused": holdout.benign_refused,
                "benign_completed": holdout.benign_completed, "oracle": list(holdout.oracle),
                "shift": holdout.shift or None, "gate": gate}
    return {"format": FORMAT, "version": VERSION, "policy": policy.model_dump(mode="json"),
            "models": {"config": models_config, "fitted": fitted}, "suite": suite, "deployable": deployable,
            "evidence": evidence}


def read_policy_file(path: str | Path) -> PolicyFile:
    """Parse and check a policy file; a bad field is a ``FarInputError`` naming the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise FarInputError("file not found", file=path)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise FarInputError(f"not a JSON policy file ({error})", file=path) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FarInputError(f"not a FAR policy file (format must be {FORMAT!r})", file=path, field="format")
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error, file=path) from None
    from far.models.backends import ModelsConfig

    try:
        ModelsConfig.model_validate(parsed.models.config)
    except ValidationError as error:
        raise from_validation_error(error, file=path, prefix="models.config") from None
    return parsed


def load_guard(path: str | Path, *, audit_log: str | Path | None = None, shadow: bool = False,
               models: Any = None) -> Any:
    """A runtime guard from a policy file: the policy, and its models rebuilt from their config with their
    fitted states restored (or ``models``, given). Everything is checked before a model loads."""
    from far.models.backends import ModelsConfig, build_models
    from far.models.fitted import restore, sha256_of
    from far.rollout.guard import Guard
    from far.rollout.io import data_dir

    parsed = read_policy_file(path)
    policy_id = hashlib.sha256(json.dumps(parsed.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
    if models is None:
        config = ModelsConfig.model_validate(parsed.models.config)
        learned = [role for role in ("edge", "cloud", "scope") if _learns(config, role)]
        missing = [role for role in learned if role not in parsed.models.fitted]
        if missing:
            raise FarInputError(f"no fitted state for {', '.join(missing)}", file=path, field="models.fitted")
        for role, state in parsed.models.fitted.items():  # before any model loads
            found = data_dir() / state.file
            if not found.is_file() or sha256_of(found) != state.sha256:
                raise FarInputError(f"fitted state {state.file} is missing from {data_dir()} or differs from its "
                                    "hash", file=path, field=f"models.fitted.{role}")
        models = build_models(config)
        for role, state in parsed.models.fitted.items():
            restore(getattr(models, role), state.model_dump(), f"models.fitted.{role}")
    return Guard(parsed.policy, models, audit_log=audit_log, shadow=shadow, policy_id=policy_id)


LEARNED_BACKENDS = frozenset({"embedding", "reviewer", "finetuned", "tfidf"})  # the backends fitted on train


def _learns(config: Any, role: str) -> bool:
    spec = getattr(config, role, None)
    return spec is not None and spec.backend in LEARNED_BACKENDS
