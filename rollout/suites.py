"""Suites: where scenarios come from. A ``Suite`` yields the scenarios of a split; suites register by name.

Train and holdout are disjoint by construction (each scenario carries exactly one split) and checked again
when a suite is loaded.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.errors import FarInputError, from_validation_error
from rollout.scenario import SPLITS, Scenario, Split, check_disjoint, load_scenarios


@runtime_checkable
class Suite(Protocol):
    name: str

    def scenarios(self, split: Split) -> Sequence[Scenario]: ...

    def describe(self) -> dict[str, Any]: ...


def split_of(seed: int, scenario_id: str, holdout_fraction: float) -> Split:
    """Deterministic split assignment from (seed, id), independent of generation order and size."""
    digest = hashlib.sha256(f"split\x1f{seed}\x1f{scenario_id}".encode()).digest()
    unit = int.from_bytes(digest[:8], "little") / 2**64
    return "holdout" if unit < holdout_fraction else "train"


def split_manifest(suite: Suite) -> dict[str, Any]:
    """What was in each split: counts and a fingerprint of the ids, for the run's summary."""
    manifest: dict[str, Any] = {}
    for split in SPLITS:
        ids = sorted(s.id for s in suite.scenarios(split))
        manifest[split] = {"count": len(ids), "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}
    return manifest


class ParquetSuiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "parquet"
    path: str


class ParquetSuite:
    """Scenarios from a Parquet file written by ``save_scenarios`` (each row names its split)."""

    def __init__(self, config: ParquetSuiteConfig, base_dir: Path | None = None) -> None:
        path = Path(config.path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        self.path = path
        self.name = f"parquet:{path.name}"
        loaded = load_scenarios(path)
        self._by_split = {split: [s for s in loaded if s.split == split] for split in SPLITS}
        check_disjoint(self._by_split["train"], self._by_split["holdout"])
        for split in SPLITS:
            if not self._by_split[split]:
                raise FarInputError(f"no scenarios in the {split} split", file=path, field="split")

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        return self._by_split[split]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path)}


SuiteFactory = Callable[[dict[str, Any], Path | None], Suite]
SUITES: dict[str, SuiteFactory] = {}


def register_suite(name: str, factory: SuiteFactory) -> None:
    SUITES[name] = factory


def _parquet_factory(options: dict[str, Any], base_dir: Path | None) -> Suite:
    try:
        config = ParquetSuiteConfig.model_validate(options)
    except ValidationError as error:
        raise from_validation_error(error, prefix="suite") from None
    return ParquetSuite(config, base_dir)


register_suite("parquet", _parquet_factory)


class SuiteSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field("edge_cloud", min_length=1)


def build_suite(spec: SuiteSpec | dict[str, Any], base_dir: Path | None = None) -> Suite:
    import rollout.agentdojo_suite  # noqa: F401  (registers AgentDojo; imports agentdojo only when used)
    import rollout.edge_cloud_suite  # noqa: F401  (registers the built-in suite)

    if isinstance(spec, dict):
        spec = SuiteSpec.model_validate(spec)
    if spec.name not in SUITES:
        raise FarInputError(f"unknown suite {spec.name!r} (known: {', '.join(sorted(SUITES))})", field="suite.name")
    options = {"name": spec.name, **(spec.model_extra or {})}
    return SUITES[spec.name](options, base_dir)
