"""The edge-cloud agent's policy: rules, thresholds and flow, not model weights."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.errors import FarInputError, from_validation_error
from rollout.io import load_mapping

# Bounds a rollout: attempts per operation are 1 + max_retries.
MAX_RETRIES_LIMIT = 10


class FallbackMode(str, Enum):
    """What the agent does once an operation has failed and its retries are spent."""

    SAFE_SHUTDOWN = "safe_shutdown"  # stop, roll back, tell the user
    ASK_USER = "ask_user"  # hand the decision (or the task) to the user
    EDGE_ONLY = "edge_only"  # carry on with on-device means only
    NONE = "none"  # no fallback: the failure is left unhandled


class Policy(BaseModel):
    """The four seed parameters. Extra fields are rejected: new ones enter through a declared policy space."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=True, validate_default=True)

    cloud_threshold: float = Field(0.7, ge=0.0, le=1.0, description="edge risk >= threshold escalates to the cloud")
    max_retries: int = Field(1, ge=0, le=MAX_RETRIES_LIMIT, description="retries per failing operation")
    require_confirmation: bool = Field(True, description="ask the user before sensitive actions")
    fallback_mode: FallbackMode = Field(FallbackMode.SAFE_SHUTDOWN, description="behaviour after retries are spent")
    edge_block_threshold: float = Field(
        1.0, ge=0.0, le=1.0,
        description="edge risk above this is refused on the device, without a cloud call (1.0: never)")

    def short(self) -> str:
        block = f" block>{self.edge_block_threshold:g}" if self.edge_block_threshold < 1.0 else ""
        return (
            f"thr={self.cloud_threshold:g} retries={self.max_retries} "
            f"confirm={'yes' if self.require_confirmation else 'no'} fallback={self.fallback_mode}{block}"
        )


PARAMETERS: tuple[str, ...] = tuple(Policy.model_fields)


def parse_policy(data: Any, *, file: str | Path | None = None, field: str = "") -> Policy:
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error, file=file, prefix=field) from None


def parse_named_policies(data: Any, *, file: str | Path | None = None, field: str = "policies") -> dict[str, Policy]:
    """``{name: {policy fields}}`` → ``{name: Policy}``, errors naming ``policies.<name>.<field>``."""
    if not isinstance(data, dict) or not data:
        raise FarInputError("expected a non-empty mapping of policy name to policy", file=file, field=field)
    return {
        str(name): parse_policy(body, file=file, field=f"{field}.{name}") for name, body in data.items()
    }


def load_policies(path: str | Path) -> dict[str, Policy]:
    """Load named policies from YAML/JSON: either ``{policies: {name: {...}}}`` or a single policy mapping."""
    data = load_mapping(path)
    if "policies" in data:
        return parse_named_policies(data["policies"], file=path)
    return {Path(path).stem: parse_policy(data, file=path)}
