"""Step 6, the gate: what the check slice (whole train templates none of the lessons taught) decides after each
round, in FAR's order (fewer critical failures first, then the score). Pure functions over figure dicts
(``far.evolve.metrics.holdout_metrics``' ``overall``)."""
from __future__ import annotations

import math
from collections.abc import Sequence

ROUND_SCORE = "tsr"  # what ranks rounds once safety is settled: the user's tasks done, which a model that
# refuses or questions everything cannot game


def unsafe_rise(before: dict[str, float], after: dict[str, float], tolerance: float) -> str:
    """Which of the model's unsafe rates (ASR, HCR) rose by more than ``tolerance`` from ``before``
    to ``after``, as a message; empty when none did (a rate measured on no scenario, NaN, is not compared)."""
    risen = [f"{name} {before[name]:.3f} -> {after[name]:.3f}" for name in ("asr", "hcr")
             if not (math.isnan(before[name]) or math.isnan(after[name])) and after[name] - before[name] > tolerance]
    return "; ".join(risen)


def kept_round(checks: Sequence[dict[str, float]], injected: int, harmful: int, score: str = ROUND_SCORE) -> int:
    """Which round's model a run returns, from the check-slice figures of the model kept after each round (round
    0, before training, first): the one that handles the fewest harmful or injected requests itself
    (ASR × ``injected`` + HCR × ``harmful``, the check slice's counts; NaN counts none), then the
    highest ``score`` (``ROUND_SCORE``, TSR; NaN lowest), the earliest on a tie (it moved the model
    least). FAR's order: fewer critical failures always wins, and reward only breaks ties (an early stop on a
    fall of the score returns the round before the fall, not the fall)."""
    def key(i: int) -> tuple[float, float, int]:
        value = checks[i][score]
        return handled_harm(checks[i], injected, harmful), math.inf if math.isnan(value) else -value, i

    return min(range(len(checks)), key=key)


def handled_harm(figures: dict[str, float], injected: int, harmful: int) -> int:
    """How many harmful or injected check-slice requests the model handled itself: ASR × ``injected`` +
    HCR × ``harmful`` (NaN counts none)."""
    return round(sum(0.0 if math.isnan(figures[rate]) else figures[rate] * count
                     for rate, count in (("asr", injected), ("hcr", harmful))))


def improved(best: dict[str, float], latest: dict[str, float], injected: int, harmful: int,
             min_improvement: float, score: str = ROUND_SCORE) -> bool:
    """Whether a round is progress over the best round before it (``kept_round``'s), in FAR's order: it handles
    fewer harmful or injected check-slice requests itself; or as many, and its ``score`` rose by at least
    ``min_improvement`` (a NaN score ranks lowest, as in ``kept_round``; a gain of NaN, from equal infinities,
    is none). Early stopping ends the run on a round that is not: a round that makes the model safer is
    progress even when its score falls (an unsafe model learning to refuse first escalates benign calls too)."""
    before, after = handled_harm(best, injected, harmful), handled_harm(latest, injected, harmful)
    if after != before:
        return after < before

    def value(figures: dict[str, float]) -> float:
        return -math.inf if math.isnan(figures[score]) else figures[score]

    return value(latest) - value(best) >= min_improvement
