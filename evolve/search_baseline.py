"""FAR's policy search as a baseline of FATE, on a FATE run's own slices.

The policy search tunes the policy, not the model: each holdout input is played through FAR's agent (the base
SmolLM2 as its calibrated risk edge, the run's cloud, user, verifier and costs) and scored by the verifier
ensemble; its rollouts are read as FATE's actions (``as_scored``), so the arms count the same inputs alike.

- ``search_evaluator``: an evaluator of policies on FATE's dev slice (its "train" split) and holdout sample
  (``SlicesSuite``), on which a search runs outside FATE's room (``bench/bench_fate.py``);
- ``as_scored``: the winner's holdout rollouts as FATE's scored actions.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from far.evolve.task import Action, ScoredAction
from far.rollout.scenario import Scenario
from far.rollout.trajectory import COMPLETED, VETOED


class SlicesSuite:
    """FATE's dev slice as the "train" split and its holdout sample as "holdout": the very scenarios a FATE run of
    the same config and seed uses (``Evolution``'s sampling)."""

    def __init__(self, dev: Sequence[Scenario], holdout: Sequence[Scenario]) -> None:
        self.name = "fate-dev-holdout"
        self._by_split = {"train": list(dev), "holdout": list(holdout)}

    def scenarios(self, split: str) -> list[Scenario]:
        return self._by_split[split]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **{split: len(scenarios) for split, scenarios in self._by_split.items()}}


def search_evaluator(config: Any, dev: Sequence[Scenario], holdout: Sequence[Scenario]) -> Any:
    """An evaluator of policies on FATE's ``dev`` ("train") and ``holdout`` scenarios, with ``config``'s (an
    ``EvolveConfig``) cloud, user, verifier and costs and the base SmolLM2 as a calibrated risk edge
    (``backend: smollm2``)."""
    from far.models.backends import build_models
    from far.search.jobs.assemble import build_evaluator
    from far.search.jobs.config import RunConfig

    models_config = type(config.models).model_validate({**config.models.model_dump(mode="json"),
                                                         "edge": {"backend": "smollm2"}})
    run = RunConfig(models=models_config, rewards=config.rewards, verifier=config.verifier, costs=config.costs)
    return build_evaluator(run, suite=SlicesSuite(dev, holdout), models=build_models(models_config))


def as_scored(evaluation: Any) -> list[ScoredAction]:
    """A policy evaluation's rollouts as FATE's actions: a vetoed rollout refused, a completed one called its last
    executed call (confirmed when a confirm step approved it), any other (denied, handed off, shut down) asked
    the user."""
    out = []
    for verdict, trajectory in zip(evaluation.verdicts, evaluation.trajectories, strict=True):
        executed = trajectory.executions()
        if trajectory.outcome == VETOED:
            action = Action("refuse")
        elif trajectory.outcome == COMPLETED and executed:
            confirmed = any(s.node == "confirm" and s.decision == "approved" for s in trajectory.steps)
            action = Action("call", executed[-1].inputs["call"], confirmed)
        else:
            action = Action("ask")
        out.append(ScoredAction("", action, verdict, tuple(verdict.z), tuple(f.kind.value for f in verdict.failures),
                                trajectory.cost))
    return out
