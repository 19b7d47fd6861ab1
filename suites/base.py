"""What every suite is: the ``Suite`` protocol, the deterministic split rule, and the split manifest.

Train and holdout are disjoint by construction (each scenario carries exactly one split) and checked again
when a suite is loaded.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from far.rollout.scenario import SPLITS, Scenario, Split


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


def holdout_members(keys: Sequence[str], holdout_fraction: float, seed: int, strip: int = 0) -> set[str]:
    """The keys drawn for holdout by exact count: ``round(fraction * n)`` of them, at least one and never all
    (with two or more keys), in the order of a seeded hash, so a small set always has both sides. Returned
    with their first ``strip`` characters removed (keys are usually prefixed to be unique across suites)."""
    if len(keys) < 2:
        return set()
    count = min(len(keys) - 1, max(1, round(holdout_fraction * len(keys))))
    order = sorted(keys, key=lambda key: hashlib.sha256(f"holdout\x1f{seed}\x1f{key}".encode()).digest())
    return {key[strip:] for key in order[:count]}


def split_manifest(suite: Suite) -> dict[str, Any]:
    """What was in each split: counts and a fingerprint of the ids, for the run's summary."""
    manifest: dict[str, Any] = {}
    for split in SPLITS:
        ids = sorted(s.id for s in suite.scenarios(split))
        manifest[split] = {"count": len(ids), "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}
    return manifest
