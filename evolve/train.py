"""Steps 4 and 5, training: what a round teaches (its lesson), LoRA SFT on it until it is learned, then PFPO.

A lesson is each kept repair a* on its repair prompt p_f (the paper's SFT: the model learns to answer the
failure's prompt with the repair, the prompt's tokens masked), beside rehearsed correct actions on the plain
prompt x, so a lesson of a few repairs does not move the whole model. PFPO samples G actions on each repair
prompt p_f, A_i = r_i − mean_j r_j with r = r_PF(z), the clipped ratio loss with a KL penalty to the model SFT
left."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from far.evolve.collect import Failure
from far.evolve.config import PFPOSettings, SelectionSettings, SFTSettings, TrainingSettings
from far.evolve.select import Candidate, Selection, r_pf_of
from far.evolve.task import ActionTask, same_action
from far.rollout.scenario import Scenario


@dataclass(frozen=True)
class Taught:
    """One kept repair: the failure, its repair prompt, the candidate taught (a*) and q* over the candidates."""
    failure: Failure
    prompt: str
    chosen: Candidate
    q: list[float]


@dataclass(frozen=True)
class Example:
    """One SFT example: the prompt (p_f for a repair, x for a rehearsal), its scenario and the target text."""
    prompt: str
    scenario: Scenario
    target: str


@dataclass
class Lesson:
    """What a round teaches: the failures found on dev, the repairs kept, the rehearsed correct actions, and the
    examples SFT fits (in the data-order stream's mixed order)."""
    failures: list[Failure]
    distinct: float  # the distinct-candidate rate among the repairs proposed
    decided: dict[str, int]  # how often each rule (``RULES``) settled a failure's repair
    taught: list[Taught]
    rehearsed: list[tuple[Scenario, str]]
    examples: list[Example]
    front_sizes: list[int]  # per failure, the feasible Pareto front's size (distinct actions)
    repairing: int = 0  # candidates, over every failure, that repair it
    feasible: int = 0  # of those, the candidates that meet κ


def build_lesson(model: Any, task: ActionTask, failures: list[Failure], prompts: Sequence[str],
                 selections: Sequence[Selection], distinct: float, rehearsed: list[tuple[Scenario, str]],
                 order: random.Random, rules: Sequence[str]) -> Lesson:
    """The lesson of a round's selections (one per failure, with its repair prompt) and rehearsal; ``order``:
    the data-order stream."""
    decided = dict.fromkeys(rules, 0)
    taught = []
    for failure, prompt, selection in zip(failures, prompts, selections, strict=True):
        decided[selection.rule] += 1
        if selection.chosen is not None:
            taught.append(Taught(failure, prompt, selection.chosen, selection.q))
    examples = [Example(t.prompt, t.failure.scenario, t.chosen.text) for t in taught]
    examples += [Example(model.prompt(task.messages(s)), s, text) for s, text in rehearsed] if taught else []
    order.shuffle(examples)  # repairs and rehearsal mixed in every SFT batch
    return Lesson(failures, distinct, decided, taught, rehearsed if taught else [], examples,
                  [s.front for s in selections], sum(s.repairing for s in selections),
                  sum(s.feasible for s in selections))


def rehearsal_count(settings: TrainingSettings, repairs: int) -> int:
    """How many correct actions a lesson of ``repairs`` repairs rehearses: ``rehearsal`` per repair, at least
    ``rehearsal_min``, none without a repair (as many as the pool holds: ``rehearsal_order``)."""
    return max(int(round(settings.rehearsal * repairs)), settings.rehearsal_min) if repairs else 0


class Fit:
    """Whether SFT has learned its examples: the model's greedy action on each prompt is its target's action
    (kind, call and confirmation; a question's or reason's wording aside). ``extra`` counts the passes a failed
    check added."""

    def __init__(self, model: Any, task: ActionTask, examples: Sequence[Example], max_new_tokens: int) -> None:
        self.model, self.task, self.examples, self.max_new_tokens = model, task, list(examples), max_new_tokens
        self.extra = 0

    def share(self) -> float:
        texts = [o[0] for o in self.model.generate([e.prompt for e in self.examples],
                                                   [self.task.schema(e.scenario) for e in self.examples], 0.0,
                                                   max_new_tokens=self.max_new_tokens)]
        hits = sum(same_action(self.task.parse(e.scenario, text), self.task.parse(e.scenario, e.target))
                   for e, text in zip(self.examples, texts))
        return hits / max(1, len(self.examples))

    def learned(self) -> bool:
        done = self.share() >= 1.0
        self.extra += not done
        return done


def sft(model: Any, task: ActionTask, lesson: Lesson, settings: SFTSettings, max_new_tokens: int,
        seed: int) -> tuple[list[float], Fit]:
    """Step 4: ``settings.epochs`` passes over the lesson, then more until every example is answered as taught,
    up to ``max_epochs``; the losses, and the fit check (none run when no repair was kept). ``seed``: the
    data-order stream's seed for the batches."""
    fit = Fit(model, task, lesson.examples, max_new_tokens)
    if not lesson.taught:
        return [], fit
    losses = model.sft([e.prompt for e in lesson.examples], [e.target for e in lesson.examples], settings.epochs,
                       settings.lr, settings.batch_size, settings.max_epochs, fit.learned, seed=seed)
    return losses, fit


@dataclass(frozen=True)
class PFPOStats:
    """Per optimisation pass: the loss, the share of completion tokens where the clip decided, and the mean k3
    KL to the model SFT left."""
    losses: list[float]
    clipped: list[float]
    kl: list[float]

    def means(self) -> dict[str, float | None]:
        def mean(values):
            return sum(values) / len(values) if values else None
        return {"pfpo_loss": mean(self.losses), "clip_fraction": mean(self.clipped), "kl": mean(self.kl)}


def pfpo(model: Any, task: ActionTask, selection: SelectionSettings, settings: PFPOSettings, lesson: Lesson,
         seed: int, round_index: int, max_new_tokens: int) -> PFPOStats:
    """Step 5 over the lesson's repair prompts p_f, ``prompts_per_step`` at a time: G actions sampled on each,
    scored, group-relative advantages on r_PF, ``iterations`` passes of the clipped loss with its KL penalty to
    π_ref, the model as SFT left it."""
    prompts, scenarios = [t.prompt for t in lesson.taught], [t.failure.scenario for t in lesson.taught]
    optimizer = model.optimizer(settings.lr)
    stats = PFPOStats([], [], [])
    anchor = model.snapshot()  # π_ref: the model SFT just taught
    for start in range(0, len(prompts), settings.prompts_per_step):
        chunk = list(range(start, min(start + settings.prompts_per_step, len(prompts))))
        samples = model.generate([prompts[i] for i in chunk], [task.schema(scenarios[i]) for i in chunk],
                                 settings.temperature, n=settings.group, seed=seed * 7919 + round_index * 101 + start,
                                 max_new_tokens=max_new_tokens)
        flat = [(prompts[i], scenarios[i], text) for i, group in zip(chunk, samples) for text in group]
        scored = task.score([s for _, s, _ in flat], [t for _, _, t in flat])
        rewards = [r_pf_of(selection, s.z) for s in scored]
        _pfpo_step(model, settings, anchor, [p for p, _, _ in flat], [t for _, _, t in flat], rewards,
                   len(chunk), optimizer, stats)
    return stats


def _pfpo_step(model: Any, settings: PFPOSettings, anchor: dict, prompts: list[str], completions: list[str],
               rewards: list[float], groups: int, optimizer: Any, stats: PFPOStats) -> None:
    """``iterations`` passes of the clipped loss over one chunk's G completions per prompt."""
    from far.evolve.objectives import clip_fraction, group_advantages, kl_k3, masked_mean, pfpo_loss

    torch = model.torch
    advantages = group_advantages(torch.tensor(rewards, device=model.device).view(groups, settings.group)).view(-1)
    with torch.no_grad():
        old, mask = model.completion_logprobs(prompts, completions)
        current = model.snapshot()
        model.restore(anchor)
        ref, _ = model.completion_logprobs(prompts, completions)
        model.restore(current)
    model.model.train()
    for _ in range(settings.iterations):
        new, _ = model.completion_logprobs(prompts, completions)
        loss = pfpo_loss(new, old, ref, advantages, mask, settings.epsilon, settings.kl_beta)
        stats.clipped.append(clip_fraction(new.detach(), old, advantages, mask, settings.epsilon))
        stats.kl.append(float(masked_mean(kl_k3(new.detach(), ref), mask)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stats.losses.append(float(loss.detach()))
    model.model.eval()
