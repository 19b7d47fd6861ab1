"""Step 2, repairs on-policy: each failure's repair prompt p_f = Prompt(x, a, z) is answered K times by the model
itself, each candidate written under one branch of the scenario's action schema (a call of one tool, a question,
a refusal; constrained decoding: every candidate that finishes is a well-formed action) and scored by the
verifier ensemble.

Which branches: K of them (every branch the input offers, when it offers fewer, then again in the same order),
drawn from the model's own probability of each branch at p_f (the probability of the branch's prefix, its
tokens as the tokenizer splits it alone: an approximation where a completion merges the prefix's last token with
the next) without replacement (Gumbel top-k: the distinct branches a sampler draws, in the order it draws
them); the K candidates are written at temperatures spread from ``temperature_min`` to ``temperature_max``.
Plain sampling of K actions from p_f gave the same action K times over: a small model copies the failed action
the prompt shows.
"""
from __future__ import annotations

import math
import random
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


def branch_slots(logp: Sequence[float], k: int, rng: random.Random) -> list[int]:
    """The branch each of the K candidates is written under (indices into ``logp``, the log-probability of each
    branch; -inf: never drawn): k distinct branches (as many as have a finite log-probability, if fewer) drawn
    without replacement by Gumbel top-k from softmax(logp), visited in turn: candidate i gets the (i mod n)-th
    branch drawn."""
    keys = [(v - math.log(-math.log(1.0 - rng.random())), i) for i, v in enumerate(logp) if v > -math.inf]
    if not keys:
        raise ValueError("no branch can be drawn: every log-probability is -inf")
    drawn = [i for _, i in sorted(keys, reverse=True)][:k]
    return [drawn[i % len(drawn)] for i in range(k)]


def propose(model: Any, task: ActionTask, settings: RepairSettings, selection: SelectionSettings,
            failures: Sequence[Failure], thresholds: Sequence[Sequence[float]], seed: int, round_index: int
            ) -> Repairs:
    """K candidates per failure (``thresholds``: the κ each fell short of, which the prompt states)."""
    prompts = [model.prompt(repair_messages(task, f.scenario, f.scored, kappa))
               for f, kappa in zip(failures, thresholds, strict=True)]
    offered = [task.branches(f.scenario) for f in failures]
    slots = _slots(model, prompts, offered, settings, f"{seed}:{round_index}")
    groups: list[list[Candidate]] = [[] for _ in failures]
    for k, temperature in enumerate(temperatures(settings.candidates, settings.temperature_min,
                                                 settings.temperature_max)):
        schemas = [branches[chosen[k]].schema for branches, chosen in zip(offered, slots)]
        texts = [o[0] for o in model.generate(prompts, schemas, temperature, seed=seed * 1000 + round_index * 50 + k,
                                              max_new_tokens=settings.max_new_tokens)]
        scored = task.score([f.scenario for f in failures], texts)
        for group, sc in zip(groups, scored):
            group.append(Candidate(sc.text, sc, training_reward(selection, sc)))
    return Repairs(prompts, groups)


def _slots(model: Any, prompts: Sequence[str], offered: Sequence[Sequence[Any]], settings: RepairSettings,
           stream: str) -> list[list[int]]:
    """Per failure, ``branch_slots`` over its branches' prefixes scored at its p_f (the union of the failures'
    prefixes is scored on every p_f; each failure reads its own)."""
    prefixes = sorted({b.prefix for branches in offered for b in branches})
    column = {p: i for i, p in enumerate(prefixes)}
    with model.torch.inference_mode():
        logp = model.option_logprobs(prompts, prefixes, complete=False).tolist() if prompts else []
    rng = random.Random(f"branches:{stream}")
    return [branch_slots([row[column[b.prefix]] for b in branches], settings.candidates, rng)
            for row, branches in zip(logp, offered)]
