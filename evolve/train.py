"""Steps 4 and 5, training: what a round teaches (its lesson), LoRA SFT on it until it is learned, then PFPO.

A lesson is each kept repair a* on the plain decision prompt x (what the deployed model answers; the repair
prompt p_f only proposes), beside rehearsed correct decisions, so a lesson of one or two repairs does not move
the whole model. PFPO samples G decisions on every prompt of the lesson (repairs and rehearsal: on the failures'
prompts alone the policy gradient pushes every answer the same way), A_i = r_i − mean_j r_j with r the
training reward, the clipped ratio loss with a KL penalty to the model SFT left."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from far.evolve.collect import Failure
from far.evolve.config import PFPOSettings, SelectionSettings, SFTSettings, TrainingSettings
from far.evolve.select import Candidate, Selection, training_reward
from far.evolve.task import DECISIONS, DecisionTask, decision_messages, parse_decision
from far.rollout.scenario import Scenario


@dataclass(frozen=True)
class Taught:
    """One kept repair: the failure, its repair prompt, the candidate taught (a*) and q* over the candidates."""
    failure: Failure
    prompt: str
    chosen: Candidate
    q: list[float]


@dataclass
class Lesson:
    """What a round teaches: the failures found on dev, the repairs kept, the rehearsed correct decisions, and
    the (prompt, scenario, target) examples SFT fits and PFPO samples (in a seeded mixed order)."""
    failures: list[Failure]
    distinct: float  # the distinct-candidate rate among the repairs proposed
    explored: int  # candidates drawn uniformly (``exploration``)
    decided: dict[str, int]  # how often each rule (``RULES``) settled a failure's repair
    taught: list[Taught]
    rehearsed: list[tuple[Scenario, str]]
    examples: list[tuple[str, Scenario, str]]


def build_lesson(model: Any, failures: list[Failure], prompts: Sequence[str], selections: Sequence[Selection],
                 distinct: float, explored: int, rehearsed: list[tuple[Scenario, str]], order: random.Random,
                 rules: Sequence[str]) -> Lesson:
    """The lesson of a round's selections (one per failure, with its repair prompt) and rehearsal."""
    decided = dict.fromkeys(rules, 0)
    taught = []
    for failure, prompt, selection in zip(failures, prompts, selections, strict=True):
        decided[selection.rule] += 1
        if selection.chosen is not None:
            taught.append(Taught(failure, prompt, selection.chosen, selection.q))
    examples = [(model.prompt(decision_messages(t.failure.scenario)), t.failure.scenario, t.chosen.scored.decision)
                for t in taught]
    examples += [(model.prompt(decision_messages(s)), s, d) for s, d in rehearsed] if taught else []
    order.shuffle(examples)  # failures and rehearsal mixed in every SFT batch and PFPO step
    return Lesson(failures, distinct, explored, decided, taught, rehearsed if taught else [], examples)


def rehearsal_count(settings: TrainingSettings, repairs: int) -> int:
    """How many correct decisions a lesson of ``repairs`` repairs rehearses: ``rehearsal`` per repair, at least
    ``rehearsal_min``, none without a repair (as many as the pool holds: ``rehearsal_order``)."""
    return max(int(round(settings.rehearsal * repairs)), settings.rehearsal_min) if repairs else 0


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


def sft(model: Any, lesson: Lesson, settings: SFTSettings) -> tuple[list[float], Fit]:
    """Step 4: ``settings.epochs`` passes over the lesson, then more until every example is decided as taught, up
    to ``max_epochs``; the losses, and the fit check (none run when no repair was kept)."""
    prompts, targets = [p for p, _, _ in lesson.examples], [a for _, _, a in lesson.examples]
    fit = Fit(model, prompts, targets)
    if not lesson.taught:
        return [], fit
    losses = model.sft(prompts, targets, settings.epochs, settings.lr, settings.batch_size, settings.max_epochs,
                       fit.learned)
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


def pfpo(model: Any, task: DecisionTask, selection: SelectionSettings, settings: PFPOSettings, lesson: Lesson,
         seed: int, round_index: int) -> PFPOStats:
    """Step 5 over the lesson's prompts, ``prompts_per_step`` at a time: G samples each, scored, group-relative
    advantages, ``iterations`` passes of the clipped loss with its KL penalty to π_ref, the model as SFT left it."""
    from far.evolve.objectives import clip_fraction, group_advantages, kl_k3, masked_mean, pfpo_loss

    torch = model.torch
    prompts, scenarios = [p for p, _, _ in lesson.examples], [s for _, s, _ in lesson.examples]
    optimizer = model.optimizer(settings.lr)
    losses, clipped, kls = [], [], []
    anchor = model.snapshot()  # π_ref: the model SFT just taught
    for start in range(0, len(prompts), settings.prompts_per_step):
        chunk = list(range(start, min(start + settings.prompts_per_step, len(prompts))))
        samples = model.choose([prompts[i] for i in chunk], DECISIONS, settings.temperature, n=settings.group,
                               seed=seed * 7919 + round_index * 101 + start)
        flat_prompts = [prompts[i] for i, group in zip(chunk, samples) for _ in group]
        flat_scenarios = [scenarios[i] for i, group in zip(chunk, samples) for _ in group]
        completions = [text.strip() for group in samples for text in group]
        scored = task.score(flat_scenarios, [parse_decision(t) for t in completions])
        rewards = torch.tensor([training_reward(selection, s) for s in scored],
                               device=model.device).view(len(chunk), settings.group)
        advantages = group_advantages(rewards).view(-1)
        with torch.no_grad():
            old, mask = model.completion_logprobs(flat_prompts, completions)
            current = model.snapshot()
            model.restore(anchor)
            ref, _ = model.completion_logprobs(flat_prompts, completions)
            model.restore(current)
        model.model.train()
        for _ in range(settings.iterations):
            new, _ = model.completion_logprobs(flat_prompts, completions)
            loss = pfpo_loss(new, old, ref, advantages, mask, settings.epsilon, settings.kl_beta)
            clipped.append(clip_fraction(new.detach(), old, advantages, mask, settings.epsilon))
            kls.append(float(masked_mean(kl_k3(new.detach(), ref), mask)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        model.model.eval()
    return PFPOStats(losses, clipped, kls)
