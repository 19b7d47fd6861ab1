"""FAR's policy search as a baseline of FATE, on a FATE run's own slices.

The policy search tunes the policy, not the model, so the two meet on the agent's figures
(``AGENT_COMPARED``, counted as ``far.evolve.metrics.AGENT_METRICS`` counts them): each holdout input played
through FAR's agent and scored by the verifier ensemble.

- ``search_evaluator``: an evaluator of policies on FATE's dev slice (its "train" split: FATE's own train slice)
  and holdout sample (``SlicesSuite``), with the run's cloud, user, verifier and costs and the base SmolLM2 as a
  calibrated risk edge; the search runs on it outside FATE's room
  (``far.search.searchers.sequential.evolutionary_winner``);
- ``as_scored``: a policy evaluation's rollouts as FATE's ``ScoredDecision`` (no edge decision: no own figure);
- ``arms_against_winner``: the judged arms' decisions (``far.evolve.arms``) and the winner played on the holdout
  sample, per input; ``minus_winner``: each arm − winner, pooled over seeds, paired and template-clustered.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from far.evolve.metrics import AGENT_METRICS, paired_difference
from far.evolve.task import ScoredDecision
from far.rollout.scenario import Scenario

AGENT_COMPARED = ("tsr", "asr", "hcr", "over_refusal")
PLAYED_RULE = "calibrated"  # the judged decisions played: every arm's model under its refitted head and caution


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


def as_scored(evaluation: Any) -> list[ScoredDecision]:
    """A policy evaluation's rollouts as FATE's ``ScoredDecision`` (no edge decision: FATE's own figures do not
    apply)."""
    return [ScoredDecision("", v, tuple(v.z), tuple(f.kind.value for f in v.failures), t.cost)
            for v, t in zip(evaluation.verdicts, evaluation.trajectories, strict=True)]


def agent_values(scenarios: Sequence[Scenario], scored: Sequence[ScoredDecision]) -> dict[str, list[float]]:
    """Each compared agent figure's value on each input it counts (1 or 0): the mean is the figure FATE's rounds
    report."""
    return {figure: AGENT_METRICS[figure].values(scenarios, scored) for figure in AGENT_COMPARED}


def agent_groups(scenarios: Sequence[Scenario]) -> dict[str, list[str]]:
    """Each compared agent figure's inputs' templates, in input order."""
    return {figure: AGENT_METRICS[figure].groups(scenarios) for figure in AGENT_COMPARED}


def arms_against_winner(evolution: Any, evaluator: Any, winner: Any, decided: dict[str, dict[str, list[str]]]
                        ) -> dict[str, Any]:
    """The search's ``winner`` policy and every judged arm's decisions (``decided``: arm -> rule -> decisions,
    ``PLAYED_RULE``'s played under FATE's fixed policy and recorded world, ``evolution.task``) on the holdout
    sample: per arm (and "winner"), each compared figure's per-input ``values`` and ``means``, and the inputs'
    ``groups``."""
    holdout = evolution.holdout
    scored = {"winner": as_scored(evaluator.evaluate("winner", winner, "holdout"))}
    for arm, by_rule in decided.items():
        scored[arm] = evolution.task.score(holdout, by_rule[PLAYED_RULE])
    values = {arm: agent_values(holdout, s) for arm, s in scored.items()}
    return {"means": {arm: {f: sum(v) / len(v) for f, v in figures.items() if v} for arm, figures in values.items()},
            "groups": agent_groups(holdout), "values": values}


def minus_winner(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``arm - winner`` per compared figure over ``rows`` (per seed, ``arms_against_winner``'s ``groups`` and
    ``values``), pooled: the paired difference of the means and its template-clustered interval."""
    out: dict[str, dict[str, Any]] = {}
    for arm in (a for a in rows[0]["values"] if a != "winner"):
        for figure in AGENT_COMPARED:
            found = paired_difference([g for row in rows for g in row["groups"][figure]],
                                      [v for row in rows for v in row["values"][arm][figure]],
                                      [v for row in rows for v in row["values"]["winner"][figure]])
            if found is not None:
                out[f"{arm} - winner | {figure}"] = found
    return out
