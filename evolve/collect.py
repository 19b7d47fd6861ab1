"""Step 1, collection: the slices of train a run reads, and the failures the model makes on dev.

Dev and check are drawn from the train split and share no template: the check slice judges rounds on wording no
lesson taught, as the holdout is written from templates train never uses. The holdout sample is drawn by its
own seed. Evaluation-only data never enters a slice that is fitted or taught on
(``require_trainable``)."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from far.evolve.config import EvolveConfig
from far.evolve.task import ScoredAction, violated
from far.rollout.errors import FarInputError
from far.rollout.eval_only import refuse_eval_only
from far.rollout.scenario import Scenario


@dataclass
class Failure:
    """f = (x, a, z): the input, the action the model wrote (its text) and its scored rollout."""
    scenario: Scenario
    action: str
    scored: ScoredAction


@dataclass(frozen=True)
class Slices:
    """A run's draws: dev (failures are collected and taught there), check (the gate's judge) and the holdout
    sample (reported only)."""
    dev: list[Scenario]
    check: list[Scenario]
    holdout: list[Scenario]


def require_trainable(scenarios: Sequence[Scenario]) -> None:
    """Refuse evaluation-only data: holdout splits, and scenarios marked evaluation-only or whose content was
    imported as evaluation-only (``far.rollout.eval_only``: by content, so a renamed copy is refused too)."""
    for scenario in scenarios:
        if scenario.split != "train":
            raise FarInputError(f"scenario {scenario.id} is in the {scenario.split} split: it may not be trained on",
                                field="split")
    refuse_eval_only(scenarios, "FATE's training (dev slice, replay buffer, model fits)", field="suite")


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


def draw_slices(config: EvolveConfig, train: Sequence[Scenario], holdout: Sequence[Scenario]) -> Slices:
    """The run's slices, seeded: dev, ``dev_size`` train scenarios; check, whole templates of the rest of train
    (none of dev's: SFT learns dev's phrasings, and a gate judged on them would look better than it is); the
    holdout sample by its own seeded draw (how train is sliced never moves it)."""
    data, rng = config.data, random.Random(config.seed)
    dev = rng.sample(list(train), min(data.dev_size, len(train)))
    taught = {s.group_key for s in dev}
    check = whole_templates([s for s in train if s.group_key not in taught], data.check_size, rng)
    sample = random.Random(f"holdout-{config.seed}").sample(list(holdout), min(data.holdout_size, len(holdout)))
    return Slices(dev, check, sample)


def failures(scenarios: Sequence[Scenario], scored: Sequence[ScoredAction], thresholds: Sequence[Sequence[float]]
             ) -> tuple[list[Failure], list[tuple[Scenario, str]], list[str]]:
    """The failures among the actions (z below the input's κ on some objective), the correct ones (met κ, did
    the task and fell into no failure of the taxonomy, which z does not all see: they may be rehearsed) and the
    ids of the rest (neither, a call with some arguments wrong say: no longer rehearsed as correct)."""
    failed, correct, other = [], [], []
    for scenario, action, kappa in zip(scenarios, scored, thresholds, strict=True):
        if violated(action.z, kappa):
            failed.append(Failure(scenario, action.text, action))
            other.append(scenario.id)
        elif action.failures or action.verdict is None or not action.verdict.task_done:
            other.append(scenario.id)
        else:
            correct.append((scenario, action.text))
    return failed, correct, other


def rehearsal_order(pool: Sequence[tuple[Scenario, str]], count: int, rng: random.Random
                    ) -> list[tuple[Scenario, str]]:
    """``count`` correct actions to rehearse beside the repairs (as many as the pool holds), safety first: those
    on harmful or injected requests, then the rest, each group in a seeded order (``rng``: the data-order
    stream), so repairs cannot unlearn refusals."""
    ordered = sorted(pool, key=lambda item: item[0].id)
    safety = [item for item in ordered if item[0].ground_truth.unsafe or item[0].ground_truth.injected]
    other = [item for item in ordered if not (item[0].ground_truth.unsafe or item[0].ground_truth.injected)]
    rng.shuffle(safety)
    rng.shuffle(other)
    return (safety + other)[:count]
