"""FATE's rules over z vectors: dominance, the Pareto front, feasibility, r_PF, the supervision distribution
q* and κ lowered to the attainable. One pure function per rule; higher
is better on every dimension of z = (security, utility, over_refusal, controllability).

Values may be ±inf. NaN means "unknown" and is treated as the worst value (-inf) everywhere: an unknown
score never dominates, is never feasible and never earns reward.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

Vector = Sequence[float]


def _value(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def dominates(a: Vector, b: Vector) -> bool:
    """``a`` dominates ``b`` iff a >= b on every dimension and a > b on at least one. Equal vectors do not
    dominate each other; vectors of different lengths are an error."""
    if len(a) != len(b):
        raise ValueError(f"vectors of different lengths: {len(a)} and {len(b)}")
    strictly = False
    for x, y in zip(a, b):
        x, y = _value(x), _value(y)
        if x < y:
            return False
        if x > y:
            strictly = True
    return strictly


def pareto_front(points: Sequence[Vector]) -> list[int]:
    """Indices (ascending) of the points no other point dominates. Duplicates are all kept: an identical
    point does not dominate."""
    return [i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def _key(key: Vector) -> tuple[float, ...]:
    return tuple(math.inf if math.isnan(x) else x for x in key)


def dominates_then_lower(a: Vector, key_a: Vector, b: Vector, key_b: Vector) -> bool:
    """``a`` beats ``b`` iff ``a`` dominates ``b`` on z (``dominates``), or a equals b on every dimension of z
    and its tie key is lower, compared lexicographically: z first, the key only breaks an exact tie (FAR's
    order). FATE's front with the key (−reward, cost): a cloud veto of a harmful request and a refusal on the
    device score alike on z and on the reward table, and the refusal spends no cloud call. NaN in z is -inf, as
    in ``dominates``; NaN in a key is +inf (unknown never wins a tie); keys of different lengths are an error."""
    if len(key_a) != len(key_b):
        raise ValueError(f"tie keys of different lengths: {len(key_a)} and {len(key_b)}")
    if dominates(a, b):
        return True
    if any(_value(x) != _value(y) for x, y in zip(a, b)):
        return False
    return _key(key_a) < _key(key_b)


def tie_broken_front(points: Sequence[Vector], keys: Sequence[Vector]) -> list[int]:
    """Indices (ascending) of the points no other point beats under ``dominates_then_lower``: the Pareto front
    of z less the points an equal point beats on the tie key (equal points with equal keys are all kept)."""
    if len(points) != len(keys):
        raise ValueError(f"{len(points)} points for {len(keys)} tie keys")
    return [i for i, p in enumerate(points)
            if not any(dominates_then_lower(q, keys[j], p, keys[i]) for j, q in enumerate(points) if j != i)]


def feasible(z: Vector, kappa: Sequence[float]) -> bool:
    """FATE's feasibility for one task mode, security included: z_m >= κ_m on every dimension of z =
    (security, utility, over_refusal, controllability) (``kappa`` has one threshold per dimension, in that
    order). NaN is infeasible."""
    if len(z) != 4 or len(kappa) != 4:
        raise ValueError("z and kappa have 4 entries each (security, utility, over_refusal, controllability)")
    return all(_value(value) >= threshold for value, threshold in zip(z, kappa))


def attainable(kappa: Vector, best: Vector) -> list[float]:
    """κ lowered to what some valid action attains on this input: min(κ_m, best_m) per dimension, where best_m
    is the highest z_m any valid action scores there. A threshold no action can meet would make every action a
    failure and filter out every repair, whatever it fixes (refusing an injected call keeps the user safe and
    cannot do their task: utility is 0 for every valid action). NaN in ``best`` (unknown) leaves κ_m as it is:
    an unknown cannot relax a requirement."""
    if len(kappa) != len(best):
        raise ValueError(f"{len(kappa)} thresholds for {len(best)} best scores")
    return [k if math.isnan(b) else min(k, b) for k, b in zip(kappa, best)]


def repairs(candidate: Vector, failed: Vector, thresholds: Vector | None = None) -> bool:
    """A candidate repairs a failed action iff it is strictly better on at least one dimension where the failed
    action fell short of its threshold (z < t), no worse on the other shortfalls, and, on every dimension that
    did not fall short, no worse than the failed action or the threshold, whichever is lower (a graded score
    may dip, never below t). Without thresholds: short means z < 1, and elsewhere no worse than the failed
    action. An action that fell short nowhere has nothing to repair; NaN (unknown) never repairs and counts as
    a shortfall when it is the failed action's. (Refusing a misread harmful action fixes security and cannot
    do the user's task: it is a repair, where "better on every shortfall" left such failures unrepairable.)"""
    if len(candidate) != len(failed):
        raise ValueError(f"vectors of different lengths: {len(candidate)} and {len(failed)}")
    if thresholds is not None and len(thresholds) != len(failed):
        raise ValueError(f"{len(thresholds)} thresholds for {len(failed)} scores")
    limits = (1.0,) * len(failed) if thresholds is None else thresholds
    floors = (math.inf,) * len(failed) if thresholds is None else thresholds
    triples = [(_value(c), _value(f), t) for c, f, t in zip(candidate, failed, limits)]
    short = [f < t for _, f, t in triples]
    if not any(c > f for (c, f, _), s in zip(triples, short) if s):
        return False
    return all(c >= f if s else c >= min(f, floor) for (c, f, _), s, floor in zip(triples, short, floors))


def r_pf(z: Vector, weights: Sequence[float], lam: float) -> float:
    """r_PF(x, a) = Σ_m w_m z_m − λ · max_m w_m (1 − z_m): the weighted score minus a penalty on the worst
    weighted shortfall. Weights are >= 0 and λ >= 0. NaN in z gives -inf."""
    if len(z) != len(weights):
        raise ValueError(f"{len(z)} scores for {len(weights)} weights")
    if lam < 0 or any(w < 0 for w in weights):
        raise ValueError("weights and lambda must be >= 0")
    if any(math.isnan(x) for x in z):
        return -math.inf
    total = sum(w * x for w, x in zip(weights, z) if w)
    shortfall = max((w * (1.0 - x) for w, x in zip(weights, z) if w), default=0.0)
    penalty = lam * shortfall if lam else 0.0
    return total - penalty


def supervision_distribution(rewards: Sequence[float], on_front: Sequence[bool], beta: float) -> list[float]:
    """q*(a'|f) ∝ 1[a' ∈ PF(f)] · exp(β · r_PF(a')), normalised over the candidates. Computed stably (the
    largest exponent is subtracted). Candidates with r = +inf share all the mass equally; r = -inf (or NaN)
    gets none. If no candidate has mass (none on the front, or all -inf), every entry is 0: there is nothing
    to learn from that failure."""
    if len(rewards) != len(on_front):
        raise ValueError("one front flag per reward")
    if beta < 0:
        raise ValueError("beta must be >= 0")
    live = [(i, _value(r)) for i, (r, front) in enumerate(zip(rewards, on_front)) if front and _value(r) > -math.inf]
    q = [0.0] * len(rewards)
    if not live:
        return q
    infinite = [i for i, r in live if r == math.inf]
    if infinite:
        for i in infinite:
            q[i] = 1.0 / len(infinite)
        return q
    top = max(beta * r for _, r in live)
    weights = [(i, math.exp(beta * r - top)) for i, r in live]
    total = sum(w for _, w in weights)
    for i, w in weights:
        q[i] = w / total
    return q
