"""How an ensemble turns its members' scores for one z dimension into one score. One pure function per rule.

Every rule takes the members' scores for one dimension, in member order, where ``None`` is an abstention
(the member has no view, or its judgement was malformed), and returns a score in [0, 1] or ``None`` when
every member abstained. Abstentions are never counted as a pass.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

Score = float | None


def _present(scores: Sequence[Score]) -> list[float]:
    return [s for s in scores if s is not None]


def mean(scores: Sequence[Score], weights: Sequence[float] | None = None) -> Score:
    """The plain mean of the scores present."""
    present = _present(scores)
    return sum(present) / len(present) if present else None


def minimum(scores: Sequence[Score], weights: Sequence[float] | None = None) -> Score:
    """The lowest score present: conservative, any member can fail a rollout."""
    present = _present(scores)
    return min(present) if present else None


def weighted(scores: Sequence[Score], weights: Sequence[float] | None = None) -> Score:
    """Σ w·s / Σ w over the members present; weights must be finite and >= 0. All-zero weights on the present
    members fall back to the plain mean (no member is silenced by a zero total)."""
    if weights is None:
        return mean(scores)
    if len(weights) != len(scores):
        raise ValueError(f"{len(weights)} weights for {len(scores)} scores")
    pairs = [(w, s) for w, s in zip(weights, scores) if s is not None]
    if not pairs:
        return None
    if not all(0 <= w < math.inf for w, _ in pairs):
        raise ValueError("weights must be finite and >= 0")
    total = sum(w for w, _ in pairs)
    if total == 0:
        return mean(scores)
    return sum(w * s for w, s in pairs) / total


def majority(scores: Sequence[Score], weights: Sequence[float] | None = None) -> Score:
    """1.0 if strictly more present members pass (score >= 0.5) than fail, else 0.0: a tie fails."""
    present = _present(scores)
    if not present:
        return None
    passes = sum(s >= 0.5 for s in present)
    return 1.0 if passes > len(present) - passes else 0.0


def disagreement(scores: Sequence[Score]) -> float:
    """Spread of the scores present (max - min); 0 with fewer than two."""
    present = _present(scores)
    return max(present) - min(present) if len(present) >= 2 else 0.0


AGGREGATIONS: dict[str, Callable[[Sequence[Score], Sequence[float] | None], Score]] = {
    "mean": mean, "min": minimum, "weighted": weighted, "majority": majority,
}
