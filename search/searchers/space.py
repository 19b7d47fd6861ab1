"""The policy space: each parameter's domain (grid values, numeric range, choices), loaded from YAML.

    parameters:
      cloud_threshold: {type: float, low: 0.0, high: 1.0, grid: [0.3, 0.5, 0.7]}
      max_retries:     {type: int, low: 0, high: 3}
      require_confirmation: {type: bool}
      fallback_mode:   {type: choice, values: [safe_shutdown, ask_user, edge_only, none]}
    fixed: {}            # parameters held constant (others not listed keep Policy defaults)

Every point of the space is a valid ``Policy``; that is checked when the space is loaded.
"""
from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from far.rollout.errors import from_validation_error
from far.rollout.io import load_mapping
from far.rollout.policy import PARAMETERS, Policy, parse_policy
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MAX_GRID_VALUES = 10_000  # per parameter: a range must be small enough to enumerate as grid points


class _Domain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatDomain(_Domain):
    type: Literal["float"]
    low: float
    high: float
    grid: tuple[float, ...] | None = None  # grid points; default: 5 evenly spaced points

    @model_validator(mode="after")
    def _check(self) -> "FloatDomain":
        if not (math.isfinite(self.low) and math.isfinite(self.high) and math.isfinite(self.high - self.low)):
            raise ValueError(f"low and high must be finite numbers with a finite range, got [{self.low}, {self.high}]")
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.grid is not None and len(self.grid) > MAX_GRID_VALUES:
            raise ValueError(f"the grid has {len(self.grid)} values, more than {MAX_GRID_VALUES}")
        for value in self.grid or ():
            if not self.low <= value <= self.high:
                raise ValueError(f"grid value {value} is outside [{self.low}, {self.high}]")
        return self

    def grid_values(self) -> tuple[float, ...]:
        if self.grid:
            return self.grid
        return tuple(round(self.low + (self.high - self.low) * i / 4, 10) for i in range(5))

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and self.low <= value <= self.high


class IntDomain(_Domain):
    type: Literal["int"]
    low: int
    high: int

    @model_validator(mode="after")
    def _check(self) -> "IntDomain":
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.high - self.low + 1 > MAX_GRID_VALUES:
            raise ValueError(f"the range [{self.low}, {self.high}] has {self.high - self.low + 1} values, more than "
                             f"{MAX_GRID_VALUES} to enumerate")
        return self

    def grid_values(self) -> tuple[int, ...]:
        return tuple(range(self.low, self.high + 1))

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


class BoolDomain(_Domain):
    type: Literal["bool"]

    def grid_values(self) -> tuple[bool, ...]:
        return (False, True)

    def sample(self, rng: random.Random) -> bool:
        return rng.random() < 0.5

    def contains(self, value: Any) -> bool:
        return isinstance(value, bool)


class ChoiceDomain(_Domain):
    type: Literal["choice"]
    values: tuple[Any, ...] = Field(min_length=1)

    def grid_values(self) -> tuple[Any, ...]:
        return self.values

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.values)

    def contains(self, value: Any) -> bool:
        return value in self.values


Domain = Annotated[Union[FloatDomain, IntDomain, BoolDomain, ChoiceDomain], Field(discriminator="type")]


class PolicySpace(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    parameters: dict[str, Domain] = Field(min_length=1)
    fixed: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self) -> "PolicySpace":
        for name in [*self.parameters, *self.fixed]:
            if name not in PARAMETERS:
                raise ValueError(f"unknown policy parameter {name!r} (known: {', '.join(PARAMETERS)})")
        both = set(self.parameters) & set(self.fixed)
        if both:
            raise ValueError(f"parameter(s) both searched and fixed: {', '.join(sorted(both))}")
        return self

    def policy(self, values: dict[str, Any]) -> Policy:
        return Policy.model_validate({**self.fixed, **values})

    def grid(self) -> Iterator[Policy]:
        names = list(self.parameters)
        for combo in itertools.product(*(self.parameters[n].grid_values() for n in names)):
            yield self.policy(dict(zip(names, combo)))

    def grid_size(self) -> int:
        size = 1
        for domain in self.parameters.values():
            size *= len(domain.grid_values())
        return size

    def sample(self, rng: random.Random) -> Policy:
        return self.policy({name: domain.sample(rng) for name, domain in self.parameters.items()})

    def contains(self, policy: Policy) -> bool:
        data = policy.model_dump()
        return all(domain.contains(data[name]) for name, domain in self.parameters.items()) and all(
            data[name] == value for name, value in self.fixed.items()
        )


def parse_space(data: Any, *, file: str | Path | None = None, field: str = "space") -> PolicySpace:
    try:
        space = PolicySpace.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error, file=file, prefix=field) from None
    # every grid point and range end must make a valid policy: check each domain's values one at a time
    where = f"{field}.parameters" if field else "parameters"
    for name, domain in space.parameters.items():
        for value in domain.grid_values() + (
            (domain.low, domain.high) if isinstance(domain, (FloatDomain, IntDomain)) else ()
        ):
            parse_policy({**space.fixed, name: value}, file=file, field=where)
    parse_policy(space.fixed, file=file, field=f"{field}.fixed" if field else "fixed")
    return space


def load_space(path: str | Path) -> PolicySpace:
    data = load_mapping(path)
    if "space" in data:
        return parse_space(data["space"], file=path)
    return parse_space(data, file=path, field="")
