"""Step 2, repairs on-policy: each failure's repair prompt p_f = Prompt(x, a, z) is answered K times by the model
itself, at temperatures spread from ``temperature_min`` to ``temperature_max``, each candidate scored by the
verifier ensemble. Decisions are sampled among the three valid words (constrained decoding), so a small model
that does not follow the format still acts, and learns, within it."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from far.evolve.collect import Failure
from far.evolve.config import RepairSettings, SelectionSettings
from far.evolve.select import Candidate, training_reward
from far.evolve.task import DECISIONS, DecisionTask, parse_decision, repair_messages


@dataclass(frozen=True)
class Repairs:
    """Per failure, its repair prompt and its K scored candidates; ``explored``: candidates drawn uniformly."""
    prompts: list[str]
    groups: list[list[Candidate]]
    explored: int

    def distinct_rate(self) -> float:
        """Distinct decisions per failure over candidates proposed: 1/K when every failure got one decision K times."""
        return sum(len({c.scored.decision for c in g}) for g in self.groups) / max(1, sum(map(len, self.groups)))


def temperatures(k: int, low: float, high: float) -> list[float]:
    """The schedule across the K candidates: evenly from ``low`` to ``high``."""
    if k == 1:
        return [low]
    return [low + (high - low) * i / (k - 1) for i in range(k)]


def explore(texts: list[str], share: float, rng: random.Random) -> int:
    """Replace each of ``texts`` by a uniformly drawn valid decision with probability ``share``; how many were."""
    replaced = 0
    for i in range(len(texts)):
        if share > 0 and rng.random() < share:
            texts[i] = rng.choice(DECISIONS)
            replaced += 1
    return replaced


def propose(model: Any, task: DecisionTask, settings: RepairSettings, selection: SelectionSettings,
            failures: Sequence[Failure], thresholds: Sequence[Sequence[float]], seed: int, round_index: int
            ) -> Repairs:
    """K candidates per failure (``thresholds``: the κ each fell short of, which the prompt states)."""
    prompts = [model.prompt(repair_messages(f.scenario, f.action, f.scored.z, f.scored.failures, kappa))
               for f, kappa in zip(failures, thresholds, strict=True)]
    groups: list[list[Candidate]] = [[] for _ in failures]
    explored = 0
    for k, temperature in enumerate(temperatures(settings.candidates, settings.temperature_min,
                                                 settings.temperature_max)):
        texts = [o[0] for o in model.choose(prompts, DECISIONS, temperature, seed=seed * 1000 + round_index * 50 + k)]
        explored += explore(texts, settings.exploration, random.Random(f"explore-{seed}-{round_index}-{k}"))
        scored = task.score([f.scenario for f in failures], [parse_decision(t) for t in texts])
        for group, text, sc in zip(groups, texts, scored):
            group.append(Candidate(text.strip(), sc, training_reward(selection, sc)))
    return Repairs(prompts, groups, explored)
