"""What learned models are fitted on: the evaluated suite's train split, other suites' (``fit_on``), or both.

A role's data is the evaluated suite's train split unless the config says ``fit_on``: then it is the train
splits of the suites named there, with the evaluated suite's own when ``own: true``. The suites weigh the same
(``balanced``), and whatever the source, a scenario whose content is also in the evaluated holdout is dropped.

Out-of-fold copies (``Evaluator.parts``) exist only for roles that saw the evaluated suite's
train split: a model fitted on other suites alone never saw it, so its train outputs are already out-of-sample.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from far.rollout.scenario import Scenario, Split, model_input
from far.suites import Suite

Progress = Callable[[str], None]
T = TypeVar("T")


def fit_data(suite: Suite, split: Split, progress: Progress | None = None) -> list[Scenario]:
    """What learned models fit on from a suite's split (``fit_data_of`` its scenarios)."""
    return fit_data_of(suite, suite.scenarios(split), progress)


def fit_data_of(suite: Suite, scenarios: Sequence[Scenario],
                progress: Progress | None = None) -> list[Scenario]:
    """What learned models fit on from these scenarios: themselves, or what the suite says to fit on
    (environment-backed suites give one scenario per proposed call, and report progress: it takes a while)."""
    fit_scenarios = getattr(suite, "fit_scenarios", None)
    return list(fit_scenarios(scenarios, progress) if fit_scenarios is not None else scenarios)


def group_folds(scenarios: Sequence[Scenario], folds: int) -> list[tuple[list[int], list[int]]]:
    """(fit, measure) index lists of up to ``folds`` folds by group (template, user task, else request text;
    scikit-learn's ``GroupKFold``): a group never sits on both sides. Empty when there are under 2 groups."""
    from sklearn.model_selection import GroupKFold

    groups = [s.group_key for s in scenarios]
    n = min(folds, len(set(groups)))
    if n < 2:
        return []
    return [(list(fit), list(measure)) for fit, measure in GroupKFold(n_splits=n).split(scenarios, groups=groups)]


def without_content(scenarios: Sequence[Scenario], excluded: set[tuple[str, str]]) -> tuple[list[Scenario], int]:
    kept = [s for s in scenarios if model_input(s) not in excluded]
    return kept, len(scenarios) - len(kept)


def balanced(parts: Sequence[Sequence[T]]) -> list[T]:
    """The parts joined so that each non-empty one counts about as much as the largest: a part of n rows is
    repeated round(N / n) times (at least once), N the largest part's size, so it brings between N/2 and 3N/2
    rows. Repeating a row is what an integer sample weight is to a logistic fit; a small suite is not drowned
    by a large one. Empty parts bring nothing; the order is the parts' order, each part's copies together."""
    largest = max((len(part) for part in parts), default=0)
    joined: list[T] = []
    for part in parts:
        if part:
            joined.extend(list(part) * max(1, round(largest / len(part))))
    return joined


@dataclass(frozen=True)
class FitSources:
    """Where one role's model is fitted: other suites' train splits, and the evaluated suite's (``own``)."""

    suites: tuple[Suite, ...]
    names: tuple[str, ...]
    own: bool = False


class FitPlan:
    """Every role's fitting data, given the evaluated suite's train scenarios at hand (all of them, or one
    out-of-fold part): other suites' data is read once, with the evaluated holdout's content dropped."""

    def __init__(self, fit_on: dict[str, FitSources], holdout_content: set[tuple[str, str]],
                 progress: Progress | None = None) -> None:
        self.own = {role: sources.own for role, sources in fit_on.items()}
        self.others: dict[str, list[list[Scenario]]] = {}
        self.dropped: dict[str, int] = {}
        for role, sources in fit_on.items():
            kept = [without_content(fit_data(suite, "train", progress), holdout_content) for suite in sources.suites]
            self.others[role] = [data for data, _ in kept]
            self.dropped[role] = sum(n for _, n in kept)

    @property
    def elsewhere(self) -> frozenset[str]:
        """The roles fitted on other suites alone (their models never see the evaluated suite's train split)."""
        return frozenset(role for role, own in self.own.items() if not own)

    def by_role(self, own_train: Sequence[Scenario]) -> dict[str, list[Scenario]]:
        """The data of each role with ``fit_on``; the other roles fit on ``own_train`` itself."""
        return {role: balanced(([list(own_train)] if self.own[role] else []) + others)
                for role, others in self.others.items()}

    def sizes(self) -> dict[str, Any]:
        return {f"{role}_train": sum(len(data) for data in others) for role, others in self.others.items()}
