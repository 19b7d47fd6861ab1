"""Model backends registered by name; the config's ``models: {edge: {backend: ...}, ...}`` picks them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rollout.errors import FarInputError, from_validation_error
from rollout.models import GroundTruthEnvironment, ModelSet
from rollout.simulated import (
    SimulatedCloud,
    SimulatedCloudConfig,
    SimulatedEdge,
    SimulatedEdgeConfig,
    SimulatedUser,
    SimulatedUserConfig,
)

Factory = Callable[[dict[str, Any], str], Any]


def _simulated(model_cls: type, config_cls: type[BaseModel]) -> Factory:
    def build(options: dict[str, Any], where: str) -> Any:
        try:
            return model_cls(config_cls.model_validate(options))
        except ValidationError as error:
            raise from_validation_error(error, prefix=where) from None

    return build


EDGE_BACKENDS: dict[str, Factory] = {"simulated": _simulated(SimulatedEdge, SimulatedEdgeConfig)}
CLOUD_BACKENDS: dict[str, Factory] = {"simulated": _simulated(SimulatedCloud, SimulatedCloudConfig)}
USER_BACKENDS: dict[str, Factory] = {"simulated": _simulated(SimulatedUser, SimulatedUserConfig)}


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    backend: str = "simulated"

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    edge: BackendSpec = BackendSpec()
    cloud: BackendSpec = BackendSpec()
    user: BackendSpec = BackendSpec()


def _build(registry: dict[str, Factory], spec: BackendSpec, where: str) -> Any:
    if spec.backend not in registry:
        known = ", ".join(sorted(registry))
        raise FarInputError(f"unknown backend {spec.backend!r} (known: {known})", field=f"{where}.backend")
    return registry[spec.backend](spec.options(), where)


def build_models(config: ModelsConfig) -> ModelSet:
    return ModelSet(
        edge=_build(EDGE_BACKENDS, config.edge, "models.edge"),
        cloud=_build(CLOUD_BACKENDS, config.cloud, "models.cloud"),
        user=_build(USER_BACKENDS, config.user, "models.user"),
        environment=GroundTruthEnvironment(),
    )
