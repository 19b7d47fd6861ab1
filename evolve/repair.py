"""Step 2, repairs on-policy: each failure's repair prompt p_f = Prompt(x, a, z) is answered K times by the model
itself, at temperatures spread from ``temperature_min`` to ``temperature_max``, each candidate written under the
scenario's action schema (constrained decoding: every candidate that finishes is a well-formed action) and
scored by the verifier ensemble."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from far.evolve.collect import Failure
from far.evolve.config import RepairSettings, SelectionSettings
from far.evolve.select import Candidate, action_key, training_reward
from far.evolve.task import ActionTask, repair_messages


@dataclass(frozen=True)
class Repairs:
    """Per failure, its repair prompt p_f and its K scored candidates."""
    prompts: list[str]
    groups: list[list[Candidate]]

    def distinct_rate(self) -> float:
        """Distinct actions per failure over candidates proposed: 1/K when every failure got one action K times
        (distinct as the selection rules count them, ``action_key``: a question's or reason's wording aside)."""
        return sum(len({action_key(c.scored) for c in g}) for g in self.groups) / max(1, sum(map(len, self.groups)))


def temperatures(k: int, low: float, high: float) -> list[float]:
    """The schedule across the K candidates: evenly from ``low`` to ``high``."""
    if k == 1:
        return [low]
    return [low + (high - low) * i / (k - 1) for i in range(k)]


def propose(model: Any, task: ActionTask, settings: RepairSettings, selection: SelectionSettings,
            failures: Sequence[Failure], thresholds: Sequence[Sequence[float]], seed: int, round_index: int
            ) -> Repairs:
    """K candidates per failure (``thresholds``: the κ each fell short of, which the prompt states)."""
    prompts = [model.prompt(repair_messages(task, f.scenario, f.scored, kappa))
               for f, kappa in zip(failures, thresholds, strict=True)]
    schemas = [task.schema(f.scenario) for f in failures]
    groups: list[list[Candidate]] = [[] for _ in failures]
    for k, temperature in enumerate(temperatures(settings.candidates, settings.temperature_min,
                                                 settings.temperature_max)):
        texts = [o[0] for o in model.generate(prompts, schemas, temperature, seed=seed * 1000 + round_index * 50 + k,
                                              max_new_tokens=settings.max_new_tokens)]
        scored = task.score([f.scenario for f in failures], texts)
        for group, sc in zip(groups, scored):
            group.append(Candidate(sc.text, sc, training_reward(selection, sc)))
    return Repairs(prompts, groups)
