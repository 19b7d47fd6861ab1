"""What every suite is: the ``Suite`` protocol, the deterministic split rule, and the split manifest.

Train and holdout are disjoint by construction (each scenario carries exactly one split) and checked again
when a suite is loaded.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rollout.scenario import SPLITS, Scenario, Split


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
