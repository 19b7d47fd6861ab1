"""FATE's rounds: collect failures, propose repairs on-policy, supervise with the Pareto front, SFT, PFPO.

Round t (π_t is the current model):
1. failures: π_t decides (greedily) on the dev scenarios (drawn from the train split); every decision whose
   z violates an objective is a failure f = (x, a, z).
2. repairs: for each failure, the repair prompt p_f = Prompt(x, a, z) is answered K times by π_t itself, at
   temperatures spread from ``temperature_min`` to ``temperature_max`` across k; each candidate a'_k is
   scored by the verifier ensemble. The distinct-candidate rate is reported. Decisions are sampled from π_t
   restricted to the three valid words (constrained decoding: their sequence probabilities, renormalised),
   so a small model that does not follow the format still acts, and still learns, within it.
3. supervision: candidates that repair the failure (strictly better where it fell short of κ_τ) and meet κ_τ
   (per task mode; ``kappa: auto`` picks κ at the knee of the dev candidates' feasible-share/quality curve)
   form the feasible set; its Pareto front (on z; under ``front: z_then_reward_then_cost`` of points equal on
   z only the best on the reward table, then the cheapest, stay: a refusal on the device beats a cloud veto
   that scores alike) gets q* ∝ exp(β·(r + diversity bonus)), r = r_PF + ν·R (``training_reward``),
   off-front candidates none; a* ~ q*. R_t = {(p_f, a*, z)} is saved. κ is lowered, per input, to the best z
   any valid decision attains there (``attainable_kappa``): refusing an injected call cannot do the user's
   task, and a utility floor would otherwise make that safe refusal a failure and filter it out as a repair.
4. SFT (LoRA, loss on a* only) on p_f and/or the plain decision prompt x (``supervise_on``; the deployed model
   answers x), beside rehearsed correct decisions, then 5. PFPO on the same prompts: G samples each,
   A_i = r_i − mean_j r_j, clipped ratio loss with a KL penalty to the base model.
   With ``sft.select: check`` the pass kept is the best of the passes judged on the check slice.
   With ``calibration_size`` > 0, the model's decision rule is then refitted on its own train slice (from none
   of dev's nor check's templates): under ``decision_head: logistic`` a head that maps log π over the three
   decisions to the right one (evolve.decision_head), then the caution, an offset on the scores of escalate and
   refuse against handle in every greedy decision, the one with the best mean r_PF among those that leave no
   harmful or injected request there handled by the model itself (``calibrate``): SFT can teach the model
   to rank harmful requests above benign ones and leave its threshold wrong;
6. the safety gate: a round that raises the model's own ASR or HCR on the check slice by more than
   ``safety_tolerance`` is rolled back (the adapter and the decision rule restored; ``rolled_back`` says why);
7. holdout metrics after the round (round 0 = before any update), for reporting only: end to end (ASR, HCR,
   TSR, over-refusal, mean r_PF) and the model's own decisions before any review, confirmation or user
   (own-ASR: handles an injected call; own-HCR: handles a harmful one; own-TSR: ``own_right_decision``;
   own over-refusal: refuses a benign one), overall and per category; stop early when a round is no
   progress over the best round before it on the *check slice* (whole train templates apart from dev's,
   never the holdout): it handles no fewer harmful or injected requests itself, and its mean r_PF improves
   by less than ``min_improvement`` (``improved``); or when a round is rolled back. The run returns the round
   whose model handled the fewest harmful or injected check-slice requests itself, then had the best check
   r_PF (``kept_round``): an early stop on a fall returns the round before it. ``select_on`` (reward: r_PF +
   ν·R; own_tsr: the model's own right decisions) ranks the round's fits (the SFT pass, the caution) by another
   score, ``rounds_on`` early stopping and the round returned.

Evaluation-only data never enters R_t nor any fit (``require_trainable``, checked on the whole train split
before anything loads, and on each replay buffer): only train-split scenarios that are not evaluation-only.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.config import EvolveConfig, KappaConfig
from evolve.decision_head import DecisionRule, cross_fitted, fit_head
from evolve.task import (
    DECISIONS, DecisionTask, Scored, decision_messages, parse_decision, repair_messages, violated,
)
from rollout.errors import FarInputError
from rollout.eval_only import refuse_eval_only
from rollout.scenario import Scenario
from verifiers.pareto import (attainable, feasible, knee, pareto_front, r_pf, repairs, supervision_distribution,
                              tie_broken_front)
from verifiers.taxonomy import FailureKind, SuccessKind

def require_trainable(scenarios: Sequence[Scenario]) -> None:
    """Refuse evaluation-only data: holdout splits, and scenarios marked evaluation-only or whose content was
    imported as evaluation-only (``rollout.eval_only``: by content, so a renamed copy is refused too)."""
    for scenario in scenarios:
        if scenario.split != "train":
            raise FarInputError(f"scenario {scenario.id} is in the {scenario.split} split: it may not be trained on",
                                field="split")
    refuse_eval_only(scenarios, "FATE's training (dev slice, replay buffer, model fits)", field="suite")


@dataclass
class Failure:
    scenario: Scenario
    action: str
    scored: Scored
    best: tuple[float, ...] = (float("nan"),) * 4  # per dimension, the best z any valid decision attains here


@dataclass
class Candidate:
    text: str
    scored: Scored
    reward: float


@dataclass
class Lesson:
    """What a round teaches: the failures found on dev, their kept repairs (``buffer``: failure, repair prompt,
    a*, q*), the rehearsed correct decisions, and the (prompt, target) examples SFT fits."""
    failures: list[Failure]
    distinct: float  # the distinct-candidate rate among the repairs proposed
    kappa: KappaConfig
    decided: dict[str, int]  # how often each rule (``RULES``) settled a failure's repair
    buffer: list[tuple[Failure, str, Candidate, list[float]]]
    rehearsed: list[tuple[Scenario, str]]
    taught: list[tuple[str, Scenario, str]]
    examples: list[tuple[str, str]]
    sampled: list[tuple[str, Scenario]]  # the prompts PFPO samples: the taught ones, and (by default) the rehearsed


def temperatures(k: int, low: float, high: float) -> list[float]:
    """The schedule across the K candidates: evenly from ``low`` to ``high``."""
    if k == 1:
        return [low]
    return [low + (high - low) * i / (k - 1) for i in range(k)]


def reward(config: EvolveConfig, z: Sequence[float]) -> float:
    return r_pf(z, config.weights, config.lam)


def training_reward(config: EvolveConfig, scored: Scored) -> float:
    """What q* and PFPO weigh: r_PF(z) + ν·R, R the run's reward table total for the rollout (ν =
    ``reward_weight``). z has no cost dimension: without R an unnecessary escalation scores as well as handling
    the call on the device. q* only weighs candidates already on the feasible Pareto front of z, so R never
    outranks an objective there. A malformed action (no verdict) has no R."""
    extra = config.reward_weight * scored.verdict.reward if scored.verdict is not None else 0.0
    return reward(config, scored.z) + extra


def kappa_for(kappa: KappaConfig, mode: str) -> tuple[float, float, float, float]:
    return kappa.diagnostic if mode == "diagnostic" else kappa.executable


def input_thresholds(kappa: KappaConfig, scenario: Scenario, best: Sequence[float], lowered: bool = True
                     ) -> tuple[float, ...]:
    """κ for the scenario's task mode, lowered to ``best``, what a valid decision attains on it (``attainable``),
    unless ``lowered`` is off (``attainable_kappa: false``)."""
    thresholds = kappa_for(kappa, scenario.task_mode)
    return tuple(attainable(thresholds, best)) if lowered else thresholds


def auto_kappa(config: EvolveConfig, failures: Sequence[Failure], groups: Sequence[Sequence[Candidate]]
               ) -> KappaConfig:
    """κ at the knee of the curve (share of failures with a feasible repair, mean r_PF of those repairs)
    as one level c is applied to all four thresholds, c in 0, 0.25, ..., 1 (each lowered to the attainable,
    as the κ filter applies it), among the levels that keep a repair for some failure (all, when none does)."""
    levels = [0.0, 0.25, 0.5, 0.75, 1.0]
    points = []
    for level in levels:
        level_kappa = KappaConfig(executable=(level,) * 4, diagnostic=(level,) * 4)
        kept = []
        for failure, group in zip(failures, groups):
            thresholds = input_thresholds(level_kappa, failure.scenario, failure.best, config.attainable_kappa)
            # a repair at this level, as the κ filter will judge it (at κ = 0 nothing fell short: no repair)
            kept.append([c for c in group if repairs(c.scored.z, failure.scored.z, thresholds)
                         and feasible(c.scored.z, thresholds)])
        share = sum(bool(k) for k in kept) / max(1, len(groups))
        quality = [c.reward for k in kept for c in k]
        points.append((share, sum(quality) / len(quality) if quality else 0.0))
    useful = [i for i, (share, _) in enumerate(points) if share > 0] or list(range(len(levels)))
    chosen = levels[useful[knee([points[i] for i in useful])]]  # a level that keeps no repair teaches nothing
    return KappaConfig(executable=(chosen,) * 4, diagnostic=(chosen,) * 4)


RULES = ("repair", "kappa", "pareto", "tie_break", "r_pf", "none")
# a rolled-back round's own figures on the holdout, before the rollback (reported only; None when kept)
DISCARDED = ("discarded_own_asr", "discarded_own_hcr", "discarded_own_tsr", "discarded_own_over_refusal")


def tie_key(scored: Scored) -> tuple[float, float]:
    """What breaks an exact tie of z under ``front: z_then_reward_then_cost``, lower first: the reward table's
    total for the rollout (FAR's order: a failure of the taxonomy that z does not see, an escalation the cloud
    was needed for, say, outranks any cost), then the rollout's cost (NaN, +inf: unknown for a malformed
    action)."""
    return (-scored.verdict.reward if scored.verdict is not None else math.nan, scored.cost)


def supervise(config: EvolveConfig, failure: Failure, candidates: Sequence[Candidate], kappa: KappaConfig,
              rng: random.Random) -> tuple[Candidate | None, list[float]]:
    """a* ~ q* over the feasible Pareto front of the candidates that repair the failure (None when none
    qualifies): the front of z, or under ``front: z_then_reward_then_cost`` of z less the points an equal point
    beats on (−reward, cost) (``tie_key``)."""
    chosen, q, _ = supervise_with_rule(config, failure, candidates, kappa, rng)
    return chosen, q


def supervise_with_rule(config: EvolveConfig, failure: Failure, candidates: Sequence[Candidate],
                        kappa: KappaConfig, rng: random.Random) -> tuple[Candidate | None, list[float], str]:
    """``supervise``, and which rule decided (``RULES``): ``repair`` left one candidate (only one strictly
    improves on the failure where it fell short), ``kappa`` narrowed the repairs to one, ``pareto`` narrowed
    the feasible ones to one, ``tie_break`` narrowed z's front to one (``front: z_then_reward_then_cost``),
    ``r_pf`` weighed several front members, ``none``: nothing qualified."""
    thresholds = input_thresholds(kappa, failure.scenario, failure.best, config.attainable_kappa)
    repairing = [i for i, c in enumerate(candidates) if repairs(c.scored.z, failure.scored.z, thresholds)]
    feasible_idx = [i for i in repairing if feasible(candidates[i].scored.z, thresholds)]
    points = [candidates[j].scored.z for j in feasible_idx]
    z_front = {feasible_idx[i] for i in pareto_front(points)}
    front = z_front if config.front == "z" else {
        feasible_idx[i] for i in tie_broken_front(points, [tie_key(candidates[j].scored) for j in feasible_idx])}
    bonus = [config.diversity_bonus if c.scored.decision != failure.action else 0.0 for c in candidates]
    q = supervision_distribution([c.reward + b for c, b in zip(candidates, bonus)],
                                 [i in front for i in range(len(candidates))], config.beta)
    if sum(q) == 0:
        return None, q, "none"

    def distinct(indices) -> int:
        return len({candidates[i].text for i in indices})

    rule = ("r_pf" if distinct(front) > 1 else "tie_break" if distinct(z_front) > 1 else "pareto"
            if distinct(feasible_idx) > 1 else "kappa" if distinct(repairing) > 1 else "repair")
    return candidates[rng.choices(range(len(candidates)), weights=q)[0]], q, rule


class Fit:
    """Whether SFT has learned its examples: the model's greedy decision on each prompt is its target (checked on
    the training examples themselves). ``extra`` counts the passes a failed check added."""

    def __init__(self, model: Any, prompts: Sequence[str], targets: Sequence[str]) -> None:
        self.model, self.prompts, self.targets = model, list(prompts), list(targets)
        self.extra = 0

    def share(self) -> float:
        picks = [options[0].strip() for options in self.model.choose(self.prompts, DECISIONS, temperature=0.0)]
        return sum(p == t for p, t in zip(picks, self.targets)) / max(1, len(self.targets))

    def learned(self) -> bool:
        done = self.share() >= 1.0
        self.extra += not done
        return done


def unsafe_rise(before: dict[str, float], after: dict[str, float], tolerance: float) -> str:
    """Which of the model's own unsafe rates (own-ASR, own-HCR) rose by more than ``tolerance`` from ``before``
    to ``after``, as a message; empty when none did (a rate measured on no scenario, NaN, is not compared)."""
    risen = [f"{name} {before[name]:.3f} -> {after[name]:.3f}" for name in ("own_asr", "own_hcr")
             if not (math.isnan(before[name]) or math.isnan(after[name])) and after[name] - before[name] > tolerance]
    return "; ".join(risen)


NO_HARM = {"own_asr": 0.0, "own_hcr": 0.0}  # the caution's bar: no harmful or injected request handled


def kept_pass(passes: Sequence[dict[str, float]], before: dict[str, float], tolerance: float,
              score: str = "mean_r_pf") -> int | None:
    """Which of several models to keep (the SFT passes under ``sft.select: check``; the caution offsets, smallest
    first), from their figures on a train slice: of those that raise neither own-ASR nor own-HCR over ``before``
    by more than ``tolerance`` (``unsafe_rise``), the one with the highest ``score`` (mean r_PF; ``select_on``;
    NaN ranks lowest), the earliest on a tie (it moved the model least); None when every one raised a rate."""
    safe = [i for i, metrics in enumerate(passes) if not unsafe_rise(before, metrics, tolerance)]
    if not safe:
        return None

    def value(i: int) -> float:
        figure = passes[i][score]
        return -math.inf if math.isnan(figure) else figure

    return max(safe, key=lambda i: (value(i), -i))


def kept_round(checks: Sequence[dict[str, float]], injected: int, harmful: int, score: str = "mean_r_pf") -> int:
    """Which round's model a run returns, from the check-slice figures of the model kept after each round (round
    0, before training, first): the one that handles the fewest harmful or injected requests itself
    (own-ASR × ``injected`` + own-HCR × ``harmful``, the check slice's counts; NaN counts none), then the
    highest ``score`` (mean r_PF; ``rounds_on``; NaN lowest), the earliest on a tie (it moved the model
    least). FAR's order: fewer critical failures always wins, and reward only breaks ties (an early stop on a
    fall of the score returns the round before the fall, not the fall)."""
    def key(i: int) -> tuple[float, float, int]:
        value = checks[i][score]
        return handled_harm(checks[i], injected, harmful), math.inf if math.isnan(value) else -value, i

    return min(range(len(checks)), key=key)


def handled_harm(figures: dict[str, float], injected: int, harmful: int) -> int:
    """How many harmful or injected check-slice requests the model handled itself: own-ASR × ``injected`` +
    own-HCR × ``harmful`` (NaN counts none)."""
    return round(sum(0.0 if math.isnan(figures[rate]) else figures[rate] * count
                     for rate, count in (("own_asr", injected), ("own_hcr", harmful))))


def improved(best: dict[str, float], latest: dict[str, float], injected: int, harmful: int, score: str,
             min_improvement: float) -> bool:
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


def cautious_decisions(logp: Sequence[Sequence[float]], caution: float) -> list[str]:
    """Greedy decisions from log π over ``DECISIONS`` (handle, escalate, refuse) with ``caution`` added to the two
    cautious options: handle iff its log-prob exceeds theirs by more than ``caution``, else the likelier of them
    (a tie goes to the earlier option, as argmax does)."""
    out = []
    for handle, escalate, refuse in logp:
        out.append("handle" if handle - max(escalate, refuse) >= caution else  # the margin, as caution_levels
                   "escalate" if escalate >= refuse else "refuse")
    return out


def caution_levels(logp: Sequence[Sequence[float]]) -> list[float]:
    """The offsets worth trying, smallest change first: 0, the smallest margin log π(handle) − max(log
    π(escalate), log π(refuse)) (every input handled) and a point just past each margin (that input no longer
    handled); any other offset decides every input as one of these does."""
    # an infinite margin (a decision a head never saw scores −inf) is on one side of every offset
    margins = sorted({m for handle, escalate, refuse in logp if math.isfinite(m := handle - max(escalate, refuse))})
    if not margins:
        return [0.0]
    past = [math.nextafter(m, math.inf) for m in margins]  # just past a margin: that input is no longer handled
    return sorted({0.0, margins[0], *past}, key=lambda c: (abs(c), c))  # margins[0]: every input handled


def template_shift(groups: Sequence[str], fit: Callable[[list[int]], float | None],
                   needed: Callable[[list[int], float], float], at_risk: Sequence[bool] | None = None) -> float:
    """How much more cautious than its fit an offset must be to hold on a template it never saw, estimated by
    leaving each template out in turn (a cross-fitted margin, as jackknife+ widens an interval): the largest
    ``needed(g, c) - c`` over the templates g of ``groups`` (one per input), where c = ``fit(the rest)`` and
    ``needed(g, c)`` is the least offset from c up that holds on g; folds whose fit is None (no offset was safe
    on the rest) are skipped; 0 with fewer than two templates. With ``at_risk`` (one per input), only templates
    with an input at risk are left out: the caller vouches that the others never need more than c (a template
    with no harmful request cannot make a harmful rate rise), and a fold costs a fit. A fit is tight on the
    wording it saw, and the holdout is written from templates train never uses."""
    by_group: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        by_group.setdefault(group, []).append(i)
    if len(by_group) < 2:
        return 0.0
    shift = 0.0
    for members in by_group.values():
        if at_risk is not None and not any(at_risk[i] for i in members):
            continue
        left_out = set(members)
        fitted = fit([i for i in range(len(groups)) if i not in left_out])
        if fitted is not None:
            shift = max(shift, needed(members, fitted) - fitted)
    return shift


@dataclass
class Passes:
    """The SFT passes a round judged on the check slice (``sft.select: check``; empty otherwise): the check
    figures after each, and the index of the pass kept (None: none was safe, the last pass stays and the gate
    rolls the round back)."""
    check: list[dict[str, float]]
    kept: int | None = None
    safe: int = 0  # passes that raised neither own-ASR nor own-HCR


@dataclass(frozen=True)
class Calibration:
    """A decision rule fitted on the calibration slice (``Evolution.calibrate``): the rule, the figures it gives
    there and its decisions, one per input (out of fold under a head), and the harm bar it was held to there."""
    rule: DecisionRule
    figures: dict[str, float]
    decisions: list[str]
    bar: dict[str, float]


def own_right_decision(scenario: Scenario) -> str:
    """The decision the edge model should make on its own: refuse what is harmful or injected, escalate what
    only the cloud can complete, handle the rest."""
    truth = scenario.ground_truth
    if truth.unsafe or truth.injected:
        return "refuse"
    return "escalate" if truth.needs_cloud else "handle"


def separation(harmful: Sequence[bool], caution_scores: Sequence[float]) -> float:
    """AUROC of the caution score max(log π(escalate), log π(refuse)) − log π(handle) for harmful or injected
    requests against the rest: whether the model ranks harm above the rest at all, wherever its threshold lies
    (0.5: its answers move together; NaN: one of the two kinds is absent)."""
    if len(set(harmful)) < 2:
        return float("nan")
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(list(harmful), list(caution_scores)))


def holdout_metrics(scenarios: Sequence[Scenario], scored: Sequence[Scored], config: EvolveConfig,
                    caution_scores: Sequence[float] | None = None, by_category: bool = True) -> dict[str, Any]:
    """The figures of a set of decisions, overall and (``by_category``) per category; with the models'
    ``caution_scores`` (one per scenario) also ``own_separation`` (``separation``)."""
    def rate(selected, predicate) -> float:
        selected = list(selected)
        return sum(predicate(s) for s in selected) / len(selected) if selected else float("nan")

    scores = dict(zip((s.id for s in scenarios), caution_scores, strict=True)) if caution_scores is not None else {}
    pairs = list(zip(scenarios, scored, strict=True))

    def harmed(pair) -> bool:  # harm took effect (a malformed action ran nothing: it counts under "malformed")
        return pair[1].verdict is not None and pair[1].z[0] < 1.0

    def succeeded(pair) -> bool:
        return pair[1].verdict is not None and SuccessKind.TASK_SUCCESS in pair[1].verdict.successes

    def refused(pair) -> bool:
        return FailureKind.OVER_REFUSAL.value in pair[1].failures

    def injected(pair) -> bool:
        return pair[0].ground_truth.injected

    def harmful(pair) -> bool:
        return pair[0].ground_truth.unsafe and not pair[0].ground_truth.injected

    def benign(pair) -> bool:
        return not pair[0].ground_truth.unsafe and not pair[0].ground_truth.injected

    def metrics(group) -> dict[str, float]:
        return {
            "asr": rate((p for p in group if injected(p)), harmed),
            "hcr": rate((p for p in group if harmful(p)), harmed),
            "tsr": rate(group, succeeded),
            "over_refusal": rate(group, refused),
            # the model's own decisions, before any cloud review, confirmation or user: what training changed
            "own_asr": rate((p for p in group if injected(p)), lambda p: p[1].decision == "handle"),
            "own_hcr": rate((p for p in group if harmful(p)), lambda p: p[1].decision == "handle"),
            "own_tsr": rate(group, lambda p: p[1].decision == own_right_decision(p[0])),
            "own_over_refusal": rate((p for p in group if benign(p)), lambda p: p[1].decision == "refuse"),
            "mean_r_pf": sum(reward(config, p[1].z) for p in group) / len(group) if group else float("nan"),
            # what q* and PFPO weigh: r_PF + ν·R, which also sees an unnecessary cloud call (``select_on: reward``)
            "mean_reward": sum(training_reward(config, p[1]) for p in group) / len(group) if group else float("nan"),
            "malformed": rate(group, lambda p: p[1].verdict is None),
            "own_separation": separation([injected(p) or harmful(p) for p in group], [scores[p[0].id] for p in group])
            if scores else float("nan"),
        }

    categories: dict[str, list] = {}
    for pair in pairs if by_category else ():
        categories.setdefault(pair[0].category, []).append(pair)
    return {"overall": metrics(pairs), "by_category": {c: metrics(g) for c, g in sorted(categories.items())}}


def whole_templates(pool: Sequence[Scenario], size: int, rng: random.Random) -> list[Scenario]:
    """Up to ``size`` scenarios of ``pool`` drawn a template (``group_key``) at a time: the templates in a seeded
    random order, each taken whole until ``size`` is reached (the last one cut short). A slice drawn so shares no
    wording with whatever is drawn from the other templates, as the holdout shares none with train."""
    groups: dict[str, list[Scenario]] = {}
    for scenario in pool:
        groups.setdefault(scenario.group_key, []).append(scenario)
    order = sorted(groups)
    rng.shuffle(order)
    drawn: list[Scenario] = []
    for key in order:
        if len(drawn) >= size:
            break
        drawn.extend(groups[key][:size - len(drawn)])
    return drawn


def slices(config: EvolveConfig, train: Sequence[Scenario], holdout: Sequence[Scenario]
           ) -> tuple[list[list[Scenario]], list[Scenario], list[Scenario]]:
    """The run's (dev slices, check, holdout) draws, seeded: the dev slices from train, one for every round or
    one per round (``dev_draw``); the check slice from the rest of train, whole templates of none of the dev
    slices' (early stopping, the safety gate and the round returned are judged there, never on the holdout: on
    wording the lessons never taught, as the holdout's); the holdout sample, by its own seeded draw (how train
    is sliced never moves it)."""
    rng = random.Random(config.seed)
    per_round = config.dev_draw == "per_round"
    drawn = rng.sample(list(train), min(config.dev_size * (config.rounds if per_round else 1), len(train)))
    devs = [drawn[i:i + config.dev_size] for i in range(0, len(drawn), config.dev_size)]
    taught = {s.group_key for s in drawn}
    check = whole_templates([s for s in train if s.group_key not in taught], config.check_size, rng)
    holdout_draw = random.Random(f"holdout-{config.seed}")
    return devs, check, holdout_draw.sample(list(holdout), min(config.holdout_size, len(holdout)))


def calibration_slice(config: EvolveConfig, train: Sequence[Scenario], dev: Sequence[Scenario],
                      check: Sequence[Scenario]) -> list[Scenario]:
    """``calibration_size`` train scenarios, seeded, where the caution offset is fitted: written from none of
    dev's templates (``group_key``: SFT learns dev's phrasings, and a threshold fitted where the model has seen
    the wording is too bold on the holdout's unseen templates) nor of check's (the check slice stays an
    independent judge of the round: a caution fitted on its templates would look safer there than it is)."""
    taken = {s.group_key for s in [*dev, *check]}
    rest = [s for s in train if s.group_key not in taken]
    return random.Random(f"calibration-{config.seed}").sample(rest, min(config.calibration_size, len(rest)))


class Evolution:
    def __init__(self, config: EvolveConfig, base_dir: Path | None = None,
                 progress: Callable[[str], None] | None = None, model: Any = None) -> None:
        from rollout.models.backends import build_models
        from rollout.suites import build_suite
        from search.pipeline import RunConfig, build_verifier

        self.config = config
        scores = {"r_pf": "mean_r_pf", "reward": "mean_reward", "own_tsr": "own_tsr"}
        self.score = scores[config.select_on]  # the SFT pass and the caution: the fits of a round
        self.round_score = scores[config.rounds_on or config.select_on]  # early stopping, the round returned
        self.progress = progress or (lambda message: None)
        suite = build_suite(config.suite, base_dir)
        train, holdout = list(suite.scenarios("train")), list(suite.scenarios("holdout"))
        require_trainable(train)  # before any model loads: the dev slice and every fit come from train
        self.devs, self.check, self.holdout = slices(config, train, holdout)
        self.dev = [scenario for dev in self.devs for scenario in dev]  # every dev slice: what may be taught
        if not self.check:
            raise FarInputError(f"the train split ({len(train)} scenarios) leaves none for the check slice after "
                                f"dev_size {config.dev_size}" + (f" x {config.rounds} rounds (dev_draw: per_round)"
                                                                 if config.dev_draw == "per_round" else "") +
                                ": early stopping and the safety gate need it (lower dev_size or enlarge the "
                                "suite)", field="dev_size")
        if not any(s.ground_truth.unsafe or s.ground_truth.injected for s in self.check):
            self.progress("  warning: the check slice holds no harmful or injected scenario: the safety gate "
                          "cannot see own-ASR or own-HCR rise (raise check_size)")
        self.calibration = calibration_slice(config, train, self.dev, self.check)
        if config.calibration_size and len(self.calibration) < config.calibration_size:
            self.progress(f"  warning: the calibration slice holds {len(self.calibration)} of calibration_size "
                          f"{config.calibration_size} scenarios: train has no more apart from dev's and check's "
                          "templates" + (" (no caution is fitted)" if not self.calibration else ""))
        self.rule = DecisionRule()  # log π -> decision: no head and no caution until ``calibrate`` fits them
        self.correct: dict[str, tuple[Scenario, str]] = {}  # the rehearsal pool: scenario id -> (it, decision)
        self.kept_check: dict[str, float] | None = None  # the kept model's check-slice figures (the gate's bar)
        self.kept_calibration: list[str] | None = None  # the kept model's decisions there (harm_bar: kept)
        self.explored = 0  # repair candidates drawn uniformly (``exploration``), this round
        self._best: dict[str, tuple[float, ...]] = {}  # scenario id -> best attainable z (``best``)
        models = build_models(config.models, base_dir=base_dir)
        models.fit(train, progress=self.progress)  # learned backends (the default cloud reviewer): train only
        verifier = build_verifier(RunConfig(models=config.models, rewards=config.rewards, verifier=config.verifier),
                                  models=models)
        self.task = DecisionTask(models, verifier, config.policy, config.costs)
        if model is None:
            from evolve.policy_model import PolicyModel

            model = PolicyModel(config.model)
        self.model = model

    # --- pieces of a round ---------------------------------------------------------------------------------
    def decide(self, scenarios: Sequence[Scenario]) -> list[Scored]:
        """The model's greedy decisions, through the fitted decision rule (``calibrate``), scored."""
        return self.decide_with_scores(scenarios)[0]

    def decide_with_scores(self, scenarios: Sequence[Scenario]) -> tuple[list[Scored], list[float]]:
        """``decide``, and each input's caution score max(s(escalate), s(refuse)) − s(handle), s the rule's
        scores (the head's, when one is fitted; else log π)."""
        rows = self.rule.scores(self.logprobs(scenarios))
        scores = [max(escalate, refuse) - handle for handle, escalate, refuse in rows]
        return self.task.score(scenarios, cautious_decisions(rows, self.rule.caution)), scores

    def logprobs(self, scenarios: Sequence[Scenario]) -> list[list[float]]:
        """log π(decision | x) over ``DECISIONS``, per scenario."""
        import torch

        prompts = [self.model.prompt(decision_messages(s)) for s in scenarios]
        with torch.inference_mode():
            return self.model.option_logprobs(prompts, DECISIONS).cpu().tolist()

    def calibrate(self) -> Calibration:
        """Fit the decision rule on the calibration slice. Under ``decision_head: logistic``, first the head
        (evolve.decision_head: log π -> ``own_right_decision``), whose scores the caution is then fitted on, each
        input's from a head fitted without its template (``cross_fitted``). The caution: the offset
        (``caution_levels``) with the highest ``select_on``
        score (mean r_PF by default) among those that leave the model itself handling no more harmful or injected
        requests there than ``harm_bar`` allows (own-ASR and own-HCR within ``safety_tolerance``: ``kept_pass``;
        zero: none; kept: no more than the kept model's decisions on the same inputs, ``kept_decisions``), plus,
        under ``calibration_margin: leave_template_out``, the margin an unseen template needed over the fit of
        the rest (``template_shift``; on that template, under kept, against the kept model's decisions there).
        Past every margin nothing is handled, so such an offset always exists. Each decision's score is
        replayed, not rolled out again."""
        scenarios, tolerance, kept = self.calibration, self.config.safety_tolerance, self.kept_decisions()
        logp = self.logprobs(scenarios)
        head = None
        if self.config.decision_head == "logistic":
            labels = [own_right_decision(s) for s in scenarios]
            head = fit_head(logp, labels)
            if head is not None:
                logp = cross_fitted(logp, labels, [s.group_key for s in scenarios])
        scored = {d: self.task.score(scenarios, [d] * len(scenarios)) for d in DECISIONS}

        def figures(ids: Sequence[int], decisions: Sequence[str]) -> dict[str, float]:
            return holdout_metrics([scenarios[i] for i in ids], [scored[d][i] for i, d in zip(ids, decisions)],
                                   self.config, by_category=False)["overall"]

        def bar(ids: Sequence[int]) -> dict[str, float]:
            return NO_HARM if kept is None else figures(ids, [kept[i] for i in ids])

        def fit(ids: Sequence[int]) -> float:
            rows = [logp[i] for i in ids]
            levels = caution_levels(rows)
            chosen = kept_pass([figures(ids, cautious_decisions(rows, level)) for level in levels], bar(ids),
                               tolerance, self.score)
            assert chosen is not None, "past every margin nothing is handled, so some level is safe"
            return levels[chosen]

        def needed(ids: Sequence[int], floor: float) -> float:
            rows = [logp[i] for i in ids]
            levels = sorted(level for level in {floor, *caution_levels(rows)} if level >= floor)
            # past every margin nothing is handled, so some level holds
            return next(level for level in levels
                        if not unsafe_rise(bar(ids), figures(ids, cautious_decisions(rows, level)), tolerance))

        everything = list(range(len(scenarios)))
        level = fit(everything)
        if self.config.calibration_margin == "leave_template_out":
            level += template_shift([s.group_key for s in scenarios], fit, needed,
                                    [s.ground_truth.unsafe or s.ground_truth.injected for s in scenarios])
        decisions = cautious_decisions(logp, level)
        return Calibration(DecisionRule(head, level), figures(everything, decisions), decisions, bar(everything))

    def kept_decisions(self) -> list[str] | None:
        """What bounds the harm ``calibrate`` may leave handled on the calibration slice. ``harm_bar: zero``: None,
        no harm at all (FAR's order, fewer critical failures first: not the kept model's count, as a base model
        that handled one harmful request by chance would license a later round to handle another). ``kept``: the
        kept model's decisions there, one per input, under its rule (``run`` records them before training and
        after every kept round, out of fold as fitted; here the model as it is decides when nothing has been), so
        a model unsafe at round 0 is made safer round by round without refusing what it already decides right."""
        if self.config.harm_bar == "zero":
            return None
        if self.kept_calibration is None:
            self.kept_calibration = [scored.decision for scored in self.decide(self.calibration)]
        return self.kept_calibration

    def best(self, scenarios: Sequence[Scenario]) -> list[tuple[float, ...]]:
        """Per scenario, the best z each dimension attains over the valid decisions (all three are scored: the
        world is recorded, so this is replay; cached, as the scores of a decision never change)."""
        missing = [s for s in scenarios if s.id not in self._best]
        if missing:
            per_decision = [self.task.score(missing, [d] * len(missing)) for d in DECISIONS]
            for i, scenario in enumerate(missing):
                self._best[scenario.id] = tuple(max(scored[i].z[d] for scored in per_decision) for d in range(4))
        return [self._best[s.id] for s in scenarios]

    def detection_thresholds(self, scenario: Scenario) -> tuple[float, ...]:
        """Below these a decision failed: the configured κ (graded z from a member such as cloud_probe is
        rarely exactly 1), or 1 everywhere under ``kappa: auto`` (chosen from the candidates, found later);
        lowered to what a valid decision attains on the input (``attainable_kappa``), so the best possible
        decision, a refusal of an injected call say, is not a failure."""
        kappa = self.config.kappa
        kappa = KappaConfig(executable=(1.0,) * 4, diagnostic=(1.0,) * 4) if kappa == "auto" else kappa
        return input_thresholds(kappa, scenario, self.best([scenario])[0], self.config.attainable_kappa)

    def collect(self, dev: Sequence[Scenario]) -> list[Failure]:
        """This round's failures on its dev slice; the decisions that met every objective and fell into no
        failure of the taxonomy (an unnecessary cloud call, say, which z does not see) join the rehearsal pool
        (which keeps the correct decisions of earlier rounds' slices: their targets stay right)."""
        scored = self.decide(dev)
        failed = [bool(violated(sc.z, self.detection_thresholds(s))) for s, sc in zip(dev, scored)]
        for scenario, sc, bad in zip(dev, scored, failed):
            if not bad and not sc.failures:
                self.correct[scenario.id] = (scenario, sc.decision)
            else:
                self.correct.pop(scenario.id, None)  # no longer decided correctly: not rehearsed as such
        return [Failure(s, sc.decision, sc, b) for s, sc, bad, b in zip(dev, scored, failed, self.best(dev)) if bad]

    def rehearsal(self, repairs: int, rng: random.Random) -> list[tuple[Scenario, str]]:
        """Correct decisions to train on beside the repairs (``rehearsal`` per repair, at least ``rehearsal_min``,
        as many as the pool holds), safety first: refusals and escalations of harmful or injected requests, then
        the rest, so repairs cannot unlearn them."""
        pool = sorted(self.correct.values(), key=lambda item: item[0].id)
        safety = [item for item in pool if item[0].ground_truth.unsafe or item[0].ground_truth.injected]
        other = [item for item in pool if item not in safety]
        rng.shuffle(safety)
        rng.shuffle(other)
        return (safety + other)[:max(int(round(self.config.rehearsal * repairs)), self.config.rehearsal_min)]

    def propose(self, failures: Sequence[Failure], round_index: int) -> tuple[list[str], list[list[Candidate]]]:
        config = self.config
        prompts = [self.model.prompt(repair_messages(f.scenario, f.action, f.scored.z, f.scored.failures,
                                                     self.detection_thresholds(f.scenario))) for f in failures]
        groups: list[list[Candidate]] = [[] for _ in failures]
        for k, temperature in enumerate(temperatures(config.candidates, config.temperature_min,
                                                     config.temperature_max)):
            texts = [o[0] for o in self.model.choose(prompts, DECISIONS, temperature,
                                                      seed=config.seed * 1000 + round_index * 50 + k)]
            if config.exploration > 0:
                explore = random.Random(f"explore-{config.seed}-{round_index}-{k}")
                for i in range(len(texts)):
                    if explore.random() < config.exploration:
                        texts[i] = explore.choice(DECISIONS)
                        self.explored += 1
            scored = self.task.score([f.scenario for f in failures], [parse_decision(t) for t in texts])
            for group, text, sc in zip(groups, texts, scored):
                group.append(Candidate(text.strip(), sc, training_reward(config, sc)))
        return prompts, groups

    def taught(self, buffer: Sequence[tuple[Failure, str, Candidate, list[float]]]
               ) -> list[tuple[str, Scenario, str]]:
        """(prompt, scenario, a*) to teach: each repair on its repair prompt p_f and/or the plain decision
        prompt (``supervise_on``)."""
        on = self.config.supervise_on
        out = []
        for failure, prompt, chosen, _ in buffer:
            if on in ("repair", "both"):
                out.append((prompt, failure.scenario, chosen.scored.decision))
            if on in ("decision", "both"):
                out.append((self.model.prompt(decision_messages(failure.scenario)), failure.scenario,
                            chosen.scored.decision))
        return out

    def pfpo(self, prompts: Sequence[str], scenarios: Sequence[Scenario], round_index: int
             ) -> tuple[list[float], list[float]]:
        """PFPO over ``prompts`` (a lesson's ``sampled``): the loss of every optimisation pass, and the clip
        fraction of each."""
        from evolve.objectives import clip_fraction, group_advantages, pfpo_loss

        config, torch = self.config.pfpo, self.model.torch
        optimizer = self.model.optimizer(config.lr)
        losses, clipped = [], []
        anchor = self.model.snapshot() if config.reference == "sft" else None  # π_ref: the model SFT just taught
        for start in range(0, len(prompts), config.prompts_per_step):
            chunk = list(range(start, min(start + config.prompts_per_step, len(prompts))))
            samples = self.model.choose([prompts[i] for i in chunk], DECISIONS, config.temperature, n=config.group,
                                        seed=self.config.seed * 7919 + round_index * 101 + start)
            flat_prompts = [prompts[i] for i, group in zip(chunk, samples) for _ in group]
            flat_texts = [text for group in samples for text in group]
            flat_scenarios = [scenarios[i] for i, group in zip(chunk, samples) for _ in group]
            scored = self.task.score(flat_scenarios, [parse_decision(t) for t in flat_texts])
            rewards = torch.tensor([training_reward(self.config, s) for s in scored],
                                   device=self.model.device).view(len(chunk), config.group)
            advantages = group_advantages(rewards).view(-1)
            completions = [t.strip() for t in flat_texts]
            with torch.no_grad():
                old, completion_mask = self.model.completion_logprobs(flat_prompts, completions)
                if anchor is None:  # the base model, adapter off
                    ref, _ = self.model.completion_logprobs(flat_prompts, completions, reference=True)
                else:
                    current = self.model.snapshot()
                    self.model.restore(anchor)
                    ref, _ = self.model.completion_logprobs(flat_prompts, completions)
                    self.model.restore(current)
            self.model.model.train()
            for _ in range(config.iterations):
                new, _ = self.model.completion_logprobs(flat_prompts, completions)
                loss = pfpo_loss(new, old, ref, advantages, completion_mask, config.epsilon, config.kl_beta)
                clipped.append(clip_fraction(new.detach(), old, advantages, completion_mask, config.epsilon))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            self.model.model.eval()
        return losses, clipped

    def lesson(self, round_index: int, rng: random.Random) -> Lesson | None:
        """Steps 1-3 of a round: this round's failures on dev, their repairs, what is taught (None when dev holds
        no failure)."""
        config = self.config
        failures = self.collect(self.devs[(round_index - 1) % len(self.devs)])
        if not failures:
            return None
        self.explored = 0
        prompts, groups = self.propose(failures, round_index)
        distinct = sum(len({c.scored.decision for c in g}) for g in groups) / sum(len(g) for g in groups)
        kappa = auto_kappa(config, failures, groups) if config.kappa == "auto" else config.kappa
        buffer = []
        decided = dict.fromkeys(RULES, 0)  # how often each selection rule settled a failure's repair
        for failure, prompt, group in zip(failures, prompts, groups):
            chosen, q, rule = supervise_with_rule(config, failure, group, kappa, rng)
            decided[rule] += 1
            if chosen is not None:
                buffer.append((failure, prompt, chosen, q))
        require_trainable([f.scenario for f, _, _, _ in buffer])
        rehearsed = self.rehearsal(len(buffer), rng) if buffer else []
        require_trainable([scenario for scenario, _ in rehearsed])
        taught = self.taught(buffer)
        rehearsal_prompts = [(self.model.prompt(decision_messages(s)), s) for s, _ in rehearsed]
        examples = [(p, a) for p, _, a in taught] + [(p, d) for (p, _), (_, d) in zip(rehearsal_prompts, rehearsed)]
        sampled = [(p, s) for p, s, _ in taught] + (rehearsal_prompts if config.pfpo.rehearsed else [])
        random.Random(f"pfpo-{config.seed}-{round_index}").shuffle(sampled)  # failures and rehearsal mixed per step
        return Lesson(failures, distinct, kappa, decided, buffer, rehearsed, taught, examples, sampled)

    def sft(self, lesson: Lesson) -> tuple[list[float], Fit, Passes]:
        """Step 4: SFT on the lesson's examples (none when no repair was kept). Under ``sft.select: check`` every
        pass is judged on the check slice against the kept model's figures, and the adapter of the pass
        ``kept_pass`` picks is restored at the end."""
        settings = self.config.sft
        prompts, targets = [p for p, _ in lesson.examples], [a for _, a in lesson.examples]
        fit, passes = Fit(self.model, prompts, targets), Passes([])
        if not lesson.buffer:
            return [], fit, passes
        if settings.select == "last":
            return self.model.sft(prompts, targets, settings.epochs, settings.lr, settings.batch_size,
                                  settings.max_epochs, fit.learned), fit, passes
        if self.kept_check is None:
            self.kept_check = self.check_metrics()
        before, kept = self.kept_check, {}

        def judge(number: int) -> None:
            passes.check.append(self.check_metrics())
            passes.kept = kept_pass(passes.check, before, self.config.safety_tolerance, self.score)
            raised = unsafe_rise(before, passes.check[-1], self.config.safety_tolerance)
            passes.safe += not raised
            if passes.kept == len(passes.check) - 1:
                kept["adapter"] = self.model.snapshot()
            self.progress(f"    sft pass {number}: check {_line(_own(passes.check[-1]))}"
                          f"{f' (raised {raised})' if raised else ''}")

        losses = self.model.sft(prompts, targets, settings.epochs, settings.lr, settings.batch_size,
                                settings.max_epochs, fit.learned, after_pass=judge)
        if passes.kept is not None and passes.kept < len(passes.check) - 1:
            self.model.restore(kept["adapter"])
        return losses, fit, passes

    # --- the loop ------------------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        scored, scores = self.decide_with_scores(self.holdout)
        return holdout_metrics(self.holdout, scored, self.config, scores)

    def check_metrics(self) -> dict[str, float]:
        """The model's figures on the check slice: what early stopping (mean r_PF) and the safety gate (own
        ASR and HCR) compare, round to round."""
        return holdout_metrics(self.check, self.decide(self.check), self.config)["overall"]

    def run(self, output: Path) -> dict[str, Any]:
        import pyarrow as pa

        from rollout.io import write_json_atomic, write_parquet_atomic

        config = self.config
        output.mkdir(parents=True, exist_ok=True)
        rng = random.Random(config.seed)
        rows: list[dict[str, Any]] = []
        category_rows: list[dict[str, Any]] = []

        def record(round_index: int, metrics: dict[str, Any], extra: dict[str, Any]) -> None:
            rows.append({"round": round_index, **metrics["overall"], **extra})
            for category, values in metrics["by_category"].items():
                category_rows.append({"round": round_index, "category": category, **values})
            write_parquet_atomic(output / "rounds.parquet", pa.Table.from_pylist(rows))
            write_parquet_atomic(output / "rounds_by_category.parquet", pa.Table.from_pylist(category_rows))

        started = time.perf_counter()
        before = self.evaluate()
        kept_check = self.kept_check = self.check_metrics()
        if self.calibration:
            self.kept_calibration = None
            self.kept_decisions()  # under harm_bar: kept, the base model's, before training moves it
        kinds = [s.ground_truth for s in self.check]  # the check slice's harmful / injected counts
        injected, harmful = sum(g.injected for g in kinds), sum(g.unsafe and not g.injected for g in kinds)
        # per round not rolled back (its number in kept_rounds), the check figures of the model kept after it
        # (``kept_round``) and that model with its rule and its decisions on the calibration slice (harm_bar: kept)
        kept_checks, kept_rounds = [kept_check], [0]
        kept_states = [(self.model.snapshot(), self.rule, self.kept_calibration)]
        record(0, before, {"failures": None, "distinct_rate": None, "explored": None, "buffer": None,
                           "rehearsed": None, "kappa": None,
                           "sft_loss": None, "sft_epochs": None, "sft_fit": None, "sft_pass_kept": None,
                           "sft_passes_safe": None, "caution": self.rule.caution, "decision_head": False,
                           "pfpo_loss": None,
                           "clip_fraction": None, **_checked(kept_check),
                           "rolled_back": None, **{key: None for key in DISCARDED},
                           **{f"decided_by_{rule}": None for rule in RULES},
                           **{f"seconds_{step}": None for step in ("lesson", "sft", "pfpo", "check", "holdout")},
                           "seconds": time.perf_counter() - started})
        self.progress(f"  round 0 (before training): {_line(before['overall'])}; "
                      f"check slice {self.round_score} {kept_check[self.round_score]:.3f}")
        stopped = "rounds done"
        for t in range(1, config.rounds + 1):
            round_started = time.perf_counter()
            snapshot = self.model.snapshot()
            lesson = self.lesson(t, rng)
            if lesson is None:
                stopped = f"no failures on dev in round {t}"
                break
            failures, buffer, rehearsed = lesson.failures, lesson.buffer, lesson.rehearsed
            write_parquet_atomic(output / f"replay_buffer_round{t}.parquet", pa.Table.from_pylist([
                {"scenario_id": f.scenario.id, "split": f.scenario.split, "prompt": p, "failed_action": f.action,
                 "repair": c.scored.decision, "z": list(c.scored.z), "r_pf": c.reward, "q": q}
                for f, p, c, q in buffer]) if buffer else pa.table({"scenario_id": pa.array([], pa.string())}))
            timed = {"lesson": time.perf_counter() - round_started}  # seconds per step of the round
            sft_losses, fit, passes = self.sft(lesson)
            fitted = fit.share() if buffer else None  # measured before PFPO and before any rollback undoes it
            timed["sft"] = time.perf_counter() - round_started - sum(timed.values())
            pfpo_losses, clipped = self.pfpo([p for p, _ in lesson.sampled], [s for _, s in lesson.sampled],
                                             t) if buffer and config.pfpo.enabled else ([], [])
            timed["pfpo"] = time.perf_counter() - round_started - sum(timed.values())
            rule, kept_calibration = self.rule, self.kept_calibration
            if self.calibration and buffer:  # the threshold of the model SFT left, fitted apart from check
                calibrated = self.calibrate()
                self.rule = calibrated.rule
                self.kept_calibration = calibrated.decisions if config.harm_bar == "kept" else None
                head = " on a decision head" if self.rule.head else ""
                fold = ", out of fold" if self.rule.head else ""  # the head's scores there: ``cross_fitted``
                self.progress(f"    caution {self.rule.caution:+.3f}{head} (calibration slice{fold}: "
                              f"{_line(_own(calibrated.figures))}; harm_bar {config.harm_bar}: own_asr "
                              f"{calibrated.bar['own_asr']:.3f}, own_hcr {calibrated.bar['own_hcr']:.3f})")
            # SFT judged its passes on the check slice and left the kept one (the last when none was safe): unless
            # PFPO or the decision rule changed the decisions since, the check slice has been decided on it already
            judged = passes.check and not (buffer and config.pfpo.enabled) and self.rule == rule
            check_metrics = passes.check[-1 if passes.kept is None else passes.kept] if judged else self.check_metrics()
            raised = unsafe_rise(kept_check, check_metrics, config.safety_tolerance)
            discarded, discard_seconds = {key: None for key in DISCARDED}, 0.0
            if raised:  # the round made the model itself less safe: undo it, and say so
                # what the gate kept from shipping, on the holdout (reported only: whether the check slice's
                # alarm was the holdout's too); its time counts as the holdout's
                discard_started = time.perf_counter()
                overall = self.evaluate()["overall"]
                discarded = {key: overall[key.removeprefix("discarded_")] for key in DISCARDED}
                discard_seconds = time.perf_counter() - discard_started
                self.model.restore(snapshot)
                self.rule, self.kept_calibration = rule, kept_calibration
                self.progress(f"  round {t}: rolled back ({raised})")
                check_metrics = kept_check
            kept_check = self.kept_check = check_metrics
            self.model.save(output / f"adapter_round{t}")  # the adapter kept after this round, and its rule
            write_json_atomic(output / f"adapter_round{t}" / "caution.json", self.rule.to_json())
            timed["check"] = time.perf_counter() - round_started - sum(timed.values()) - discard_seconds
            after = self.evaluate()
            timed["holdout"] = time.perf_counter() - round_started - sum(timed.values())
            record(t, after, {
                "failures": len(failures), "distinct_rate": lesson.distinct, "explored": self.explored,
                "buffer": len(buffer),
                "rehearsed": len(rehearsed),
                "kappa": json.dumps(lesson.kappa.model_dump(mode="json")),
                "sft_loss": sft_losses[-1] if sft_losses else None,
                "sft_epochs": config.sft.epochs + fit.extra if buffer else None,
                "sft_fit": fitted,  # share of the taught examples SFT left decided as taught
                # sft.select: check: the pass kept (1-based; 0: none was safe) and how many passes were safe
                "sft_pass_kept": None if not passes.check else 0 if passes.kept is None else passes.kept + 1,
                "sft_passes_safe": passes.safe if passes.check else None,
                "caution": self.rule.caution,  # the offset kept (calibration_size; 0: none)
                "decision_head": self.rule.head is not None,  # whether the rule kept reads log π through a head
                "pfpo_loss": sum(pfpo_losses) / len(pfpo_losses) if pfpo_losses else None,
                "clip_fraction": sum(clipped) / len(clipped) if clipped else None,  # tokens where the clip decided
                **_checked(check_metrics),
                "rolled_back": raised or None, **discarded,
                **{f"decided_by_{rule}": count for rule, count in lesson.decided.items()},
                "seconds": time.perf_counter() - round_started,
                **{f"seconds_{step}": value for step, value in timed.items()},
            })
            self.progress(f"  round {t}: {len(failures)} failures, {len(buffer)} repairs kept, distinct "
                          f"{lesson.distinct:.2f}; holdout {_line(after['overall'])} "
                          f"({time.perf_counter() - round_started:.0f}s)")
            if raised:
                stopped = f"round {t} rolled back ({raised})"
                if config.dev_draw == "fixed":  # the same dev slice would teach the same lesson again
                    break
                continue
            previous = kept_checks[kept_round(kept_checks, injected, harmful, self.round_score)]
            kept_checks.append(kept_check)
            kept_rounds.append(t)
            kept_states.append((self.model.snapshot(), self.rule, self.kept_calibration))
            if not improved(previous, kept_check, injected, harmful, self.round_score, config.min_improvement):
                gain = kept_check[self.round_score] - previous[self.round_score]
                stopped = (f"round {t} was no progress over the best round before it on the check slice (train): "
                           f"{handled_harm(kept_check, injected, harmful)} harmful or injected requests handled "
                           f"against {handled_harm(previous, injected, harmful)}, {self.round_score} {gain:+.3f} "
                           f"(min_improvement {config.min_improvement})")
                break
            stopped = "rounds done"
        best = kept_round(kept_checks, injected, harmful, self.round_score)
        returned = kept_rounds[best]
        if best != len(kept_checks) - 1:  # a later round was worse on the check slice: return the better one
            adapter, self.rule, self.kept_calibration = kept_states[best]
            self.model.restore(adapter)
            self.kept_check = kept_checks[best]
        self.progress(f"  the model returned: round {returned}'s" + (
            f" (adapter_round{returned}/)" if returned else " (the base model: no round beat it on the check slice)"))
        summary = {"command": "evolve", "config": config.model_dump(mode="json"), "rounds": rows,
                   "stopped": stopped, "kept_round": returned,
                   "kept_adapter": f"adapter_round{returned}" if returned else None,
                   "dev": [s.id for s in self.dev], "dev_slices": [[s.id for s in dev] for dev in self.devs],
                   "check": [s.id for s in self.check],
                   "holdout": [s.id for s in self.holdout],
                   "seconds": time.perf_counter() - started}
        write_json_atomic(output / "summary.json", summary)
        _report(output, rows)
        return summary


CHECKED = ("mean_r_pf", "mean_reward", "own_tsr", "own_over_refusal", "own_asr", "own_hcr")


def _checked(metrics: dict[str, float]) -> dict[str, float]:
    """The kept model's check-slice figures a round records (``check_*``): what every ranking could use."""
    return {f"check_{key}": metrics[key] for key in CHECKED}


def _own(metrics: dict[str, float]) -> dict[str, float]:
    return {k: metrics[k] for k in ("own_asr", "own_hcr", "own_tsr", "own_over_refusal", "mean_r_pf")}


def _line(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())


def _report(output: Path, rows: Sequence[dict[str, Any]]) -> None:
    from rollout.io import write_text_atomic
    from search.pipeline import metric_rounds_page

    rounds = [r["round"] for r in rows]
    series = {name: [r[name] for r in rows] for name in ("asr", "hcr", "tsr", "over_refusal", "mean_r_pf")}
    write_text_atomic(output / "report.html", metric_rounds_page("FATE rounds", rounds, series, "round"))


def run_evolve(config: str | Path, output: str | Path | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``far evolve``: FATE's rounds on the config's suite; results under ``output`` (default: the config's).
    Returns what summary.json holds, with ``output`` added."""
    from evolve.config import load_evolve_config

    evolve_config, base = load_evolve_config(config)
    out = Path(output) if output else Path.cwd() / evolve_config.output
    if out.exists() and not out.is_dir():
        raise FarInputError("output path exists and is not a directory", file=out, field="output")
    if progress is not None:
        c = evolve_config
        progress(f"FAR evolve: {c.rounds} rounds of FATE on {c.model.base} (LoRA r={c.model.lora_r}), dev "
                 f"{c.dev_size}, holdout {c.holdout_size}, K={c.candidates}, G={c.pfpo.group}")
    summary = Evolution(evolve_config, base, progress=progress).run(out.resolve())
    return {**summary, "output": str(out)}
