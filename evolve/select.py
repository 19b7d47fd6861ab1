"""Step 3, selection: which of a failure's K repairs is taught. Pure functions of the candidates' z and reward:

κ filter (a repair strictly improves where the failure fell short of κ and meets κ, κ lowered per input to what
the input's known actions attain) → Pareto front of z → exact ties of z broken by the reward table's total, then cost →
q* ∝ exp(β·(r_PF + ν·R + bonus)) over the front → a* ~ q*. Each selection reports the rule that settled it
(``RULES``)."""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from far.evolve.config import SelectionSettings
from far.evolve.task import ScoredAction, same_action
from far.rollout.scenario import Scenario
from far.verifiers.pareto import (
    feasible,
    pareto_front,
    r_pf,
    repairs,
    supervision_distribution,
    tie_broken_front,
)
from far.verifiers.verdict import Z_DIMENSIONS

if TYPE_CHECKING:
    from far.evolve.collect import Failure

# the rule that settled a failure's repair, the last that narrowed the choice to one: ``repair`` (only one
# candidate repairs the failure), ``kappa`` (only one repair meets κ), ``pareto`` (one feasible repair is on the
# front), ``tie_break`` (the reward table, then cost, left one of z's front), ``r_pf`` (q* weighed several),
# ``none`` (no candidate qualified: nothing is taught)
RULES = ("repair", "kappa", "pareto", "tie_break", "r_pf", "none", "weighted_sum", "first_valid")
# (``weighted_sum`` and ``first_valid``: the ablations' rule picked among several candidates)


@dataclass
class Candidate:
    text: str
    scored: ScoredAction
    reward: float  # ``training_reward``


def kept(selection: SelectionSettings) -> tuple[bool, ...]:
    """Per dimension of z, whether it is one of the ``objectives`` read."""
    return tuple(name in selection.objectives for name in Z_DIMENSIONS)


def seen(selection: SelectionSettings, z: Sequence[float]) -> tuple[float, ...]:
    """z as selection reads it: an objective left out scores 1 for every decision, so it never falls short,
    never separates two decisions and costs nothing in r_PF."""
    return tuple(v if keep else 1.0 for v, keep in zip(z, kept(selection)))


def r_pf_of(selection: SelectionSettings, z: Sequence[float]) -> float:
    return r_pf(z, [w if keep else 0.0 for w, keep in zip(selection.weights, kept(selection))], selection.lam)


def training_reward(selection: SelectionSettings, scored: ScoredAction) -> float:
    """What q* weighs: r_PF(z) + ν·R, R the run's reward table total for the rollout (ν = ``reward_weight``): z
    has no cost dimension, R sees the taxonomy's failures and successes. q* only weighs candidates already on
    the feasible Pareto front of z, so R never outranks an objective there. A malformed action (no verdict) has
    no R."""
    extra = selection.reward_weight * scored.verdict.reward if scored.verdict is not None else 0.0
    return r_pf_of(selection, scored.z) + extra


def input_thresholds(selection: SelectionSettings, scenario: Scenario) -> tuple[float, ...]:
    """κ for the scenario's task mode (``kappa.executable`` or ``kappa.diagnostic``); an objective left out has no
    floor (0)."""
    kappa = selection.kappa
    thresholds = kappa.diagnostic if scenario.task_mode == "diagnostic" else kappa.executable
    return tuple(t if keep else 0.0 for t, keep in zip(thresholds, kept(selection)))


def tie_key(scored: ScoredAction) -> tuple[float, float]:
    """What breaks an exact tie of z, lower first: the reward table's total for the rollout (FAR's order: a
    failure of the taxonomy that z does not see outranks any cost), then the rollout's cost (the user's
    attention for a confirmation or a question; NaN, +inf: unknown for a malformed action)."""
    return (-scored.verdict.reward if scored.verdict is not None else math.nan, scored.cost)


@dataclass(frozen=True)
class Selection:
    """What ``select`` chose for one failure: the candidate taught (None: none qualified), q* over the candidates,
    and the rule that settled it (``RULES``)."""
    chosen: Candidate | None
    q: list[float]
    rule: str
    front: int = 0  # distinct actions on the feasible Pareto front of z (what r_PF and q* may choose among)
    repairing: int = 0  # candidates that repair the failure (``repairs``)
    feasible: int = 0  # of those, the candidates that meet κ


def select(selection: SelectionSettings, failure: "Failure", candidates: Sequence[Candidate],
           rng: random.Random) -> Selection:
    """a* ~ q* over the feasible Pareto front of the candidates that repair the failure, of points equal on z
    only the best on ``tie_key`` kept (the cheaper of two actions that score alike); q* ∝ exp(β·(reward +
    bonus)), ``diversity_bonus`` for a candidate that changes the failed action. ``rng`` is selection's own
    random stream (data order has another, so an ablation that draws nothing orders its data alike)."""
    thresholds = input_thresholds(selection, failure.scenario)
    z = [seen(selection, c.scored.z) for c in candidates]
    repairing = [i for i in range(len(candidates)) if repairs(z[i], seen(selection, failure.scored.z), thresholds)]
    feasible_idx = [i for i in repairing if feasible(z[i], thresholds)]
    points = [z[j] for j in feasible_idx]
    z_front = {feasible_idx[i] for i in pareto_front(points)}

    def distinct(indices) -> int:  # distinct actions: a question's or reason's wording aside
        return len({action_key(candidates[i].scored) for i in indices})

    counts = {"front": distinct(z_front), "repairing": len(repairing), "feasible": len(feasible_idx)}
    if selection.rule == "first_valid":
        return replace(first_valid(failure, candidates), **counts)
    if selection.rule == "weighted_sum":
        return replace(weighted_sum(selection, candidates, z, repairing, feasible_idx), **counts)
    front = {feasible_idx[i] for i in tie_broken_front(points, [tie_key(candidates[j].scored) for j in feasible_idx])}
    bonus = [0.0 if same_action(c.scored.action, failure.scored.action) else selection.diversity_bonus
             for c in candidates]
    q = supervision_distribution([c.reward + b for c, b in zip(candidates, bonus)],
                                 [i in front for i in range(len(candidates))], selection.beta)
    if sum(q) == 0:
        return Selection(None, q, "none", **counts)
    rule = ("r_pf" if distinct(front) > 1 else "tie_break" if distinct(z_front) > 1 else "pareto"
            if distinct(feasible_idx) > 1 else "kappa" if distinct(repairing) > 1 else "repair")
    return Selection(candidates[rng.choices(range(len(candidates)), weights=q)[0]], q, rule, **counts)


def action_key(scored: ScoredAction) -> tuple:
    """What tells two actions apart for the rules' counts: kind, call and confirmation (``same_action``)."""
    action = scored.action
    if action is None:
        return ("malformed", scored.text)
    return (action.kind, action.call.describe() if action.call is not None else "", action.confirm)


def first_valid(failure: "Failure", candidates: Sequence[Candidate]) -> Selection:
    """The ablation without verifier rescoring: the first candidate that is a valid action and changes the
    failed one, whatever its z."""
    changes = [c.scored.action is not None and not same_action(c.scored.action, failure.scored.action)
               for c in candidates]
    index = next((i for i, changed in enumerate(changes) if changed), None)
    if index is None:
        return Selection(None, [0.0] * len(candidates), "none")
    changed = {action_key(c.scored) for c, on in zip(candidates, changes) if on}
    return Selection(candidates[index], [float(i == index) for i in range(len(candidates))],
                     "first_valid" if len(changed) > 1 else "repair")


def weighted_sum(selection: SelectionSettings, candidates: Sequence[Candidate], z: Sequence[Sequence[float]],
                 repairing: Sequence[int], feasible_idx: Sequence[int]) -> Selection:
    """The ablation without the Pareto front: of the feasible repairs, the highest Σ w·z (z as ``seen``), the
    first on a tie."""
    if not feasible_idx:
        return Selection(None, [0.0] * len(candidates), "none")
    weights = [w if keep else 0.0 for w, keep in zip(selection.weights, kept(selection))]
    index = max(feasible_idx, key=lambda i: (sum(w * v for w, v in zip(weights, z[i])), -i))
    rule = ("weighted_sum" if len({action_key(candidates[i].scored) for i in feasible_idx}) > 1 else "kappa"
            if len({action_key(candidates[i].scored) for i in repairing}) > 1 else "repair")
    return Selection(candidates[index], [float(i == index) for i in range(len(candidates))], rule)
