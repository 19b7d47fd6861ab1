"""Calibration, after training: the model's decision rule refitted on the calibration slice (train templates of
none of dev's nor check's). First a head (``far.evolve.decision_head``: log π of the three decisions -> the decision
right on its own), then the caution: an offset on the scores of escalate and refuse against handle, the one with
the best mean r_PF among those that leave no more harm handled than the bar, widened by the margin a template
left out needed over the fit of the rest. This is deployment calibration, not FATE: reports give the model with
and without it."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from far.evolve.acceptance import kept_pass, unsafe_rise
from far.evolve.decision_head import DecisionHead, DecisionRule, cross_fitted, fit_head

Figures = Callable[[Sequence[int], Sequence[str]], dict[str, float]]  # (input ids, decisions) -> figures


def cautious_decisions(logp: Sequence[Sequence[float]], caution: float) -> list[str]:
    """Greedy decisions from log π over ``DECISIONS`` (handle, escalate, refuse) with ``caution`` added to the two
    cautious options: handle iff its log-prob exceeds theirs by more than ``caution``, else the likelier of them
    (a tie goes to the earlier option, as argmax does)."""
    return ["handle" if handle - max(escalate, refuse) >= caution else  # the margin, as caution_levels
            "escalate" if escalate >= refuse else "refuse" for handle, escalate, refuse in logp]


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


@dataclass(frozen=True)
class Calibration:
    """A decision rule fitted on the calibration slice: the rule, the figures it gives there and its decisions,
    one per input (out of fold under a head), and the harm bar it was held to there."""
    rule: DecisionRule
    figures: dict[str, float]
    decisions: list[str]
    bar: dict[str, float]


def head_scores(logp: Sequence[Sequence[float]], labels: Sequence[str], groups: Sequence[str]
                ) -> tuple[DecisionHead | None, list[list[float]]]:
    """The head fitted on every input (log π ``logp`` -> the right decision ``labels``), and the scores the caution
    is fitted on: each template's (``groups``) from a head fitted without it (``cross_fitted``: a head scores the
    wording it was fitted on too confidently). No head (one decision only): log π as it is."""
    head = fit_head(logp, labels)
    return head, (cross_fitted(logp, labels, groups) if head is not None else [list(row) for row in logp])


def fit_caution(head: DecisionHead | None, scores: Sequence[Sequence[float]], groups: Sequence[str],
                at_risk: Sequence[bool], figures: Figures, bar: Callable[[Sequence[int]], dict[str, float]],
                tolerance: float) -> Calibration:
    """The caution on ``scores`` (one row per input, templates ``groups``, harmful or injected ``at_risk``): the
    offset (``caution_levels``) with the best ``figures`` score among those raising neither own-ASR nor own-HCR
    over ``bar`` by more than ``tolerance`` (``kept_pass``), plus the margin a template left out needed over the
    fit of the rest (``template_shift``). Past every margin nothing is handled, so such an offset always
    exists."""
    def fit(ids: Sequence[int]) -> float:
        rows = [scores[i] for i in ids]
        levels = caution_levels(rows)
        chosen = kept_pass([figures(ids, cautious_decisions(rows, level)) for level in levels], bar(ids), tolerance)
        assert chosen is not None, "past every margin nothing is handled, so some level is safe"
        return levels[chosen]

    def needed(ids: Sequence[int], floor: float) -> float:
        rows = [scores[i] for i in ids]
        levels = sorted(level for level in {floor, *caution_levels(rows)} if level >= floor)
        return next(level for level in levels
                    if not unsafe_rise(bar(ids), figures(ids, cautious_decisions(rows, level)), tolerance))

    everything = list(range(len(scores)))
    level = fit(everything) + template_shift(groups, fit, needed, at_risk)
    decisions = cautious_decisions(scores, level)
    return Calibration(DecisionRule(head, level), figures(everything, decisions), decisions, bar(everything))
