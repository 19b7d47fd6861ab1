"""Seeded draws keyed by name, so suites and simulated models give the same values whatever the order,
batch or process they run in."""
from __future__ import annotations

import hashlib
import random
from typing import Any


def keyed_rng(seed: int, role: str, scenario_id: str) -> random.Random:
    """A stable RNG per (seed, role, scenario): Python's ``hash`` is salted per process, sha256 is not."""
    digest = hashlib.sha256(f"{seed}\x1f{role}\x1f{scenario_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def pick_weighted(rng: random.Random, weighted: dict[str, float] | list[tuple[Any, float]]):
    items = list(weighted.items()) if isinstance(weighted, dict) else weighted
    return rng.choices([item for item, _ in items], weights=[weight for _, weight in items])[0]
