"""Evaluate policies on a suite's splits: record model outputs once, roll out, verify, aggregate.

Engines: ``replay`` walks the agent's node functions over recorded model outputs (the default, fast);
``graph`` runs the compiled LangGraph agent with the models called live. Both give identical trajectories.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from rollout.agent import DEFAULT_COSTS, Costs, build_graph, rollout_prepared, run_live
from rollout.calls import ModelRecord, ModelSet, RecordedCalls
from rollout.policy import Policy
from rollout.scenario import Scenario, Split
from rollout.suites import Suite
from rollout.trajectory import Trajectory
from search.results import PolicyResult, aggregate, rollout_row
from verifiers.rules import Verifier, verify_all
from verifiers.verdict import Verdict

Engine = Literal["replay", "graph"]
Progress = Callable[[str], None]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: rollouts allocate many small acyclic objects, and generational passes over a
    growing heap cost more than the rollouts themselves. Reference counting still frees everything."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def fit_data(suite: Suite, split: Split) -> list[Scenario]:
    """What learned models fit on from a suite's split: its scenarios, or what the suite says to fit on
    (environment-backed suites give one scenario per proposed call)."""
    scenarios = suite.scenarios(split)
    fit_scenarios = getattr(suite, "fit_scenarios", None)
    return list(fit_scenarios(scenarios) if fit_scenarios is not None else scenarios)


def fit_content(scenario: Scenario) -> tuple[str, str]:
    """What a model sees of a scenario: the request and the proposed action (ids and labels aside)."""
    return scenario.request, scenario.proposed_action.model_dump_json()


def without_content(scenarios: Sequence[Scenario], excluded: set[tuple[str, str]]) -> tuple[list[Scenario], int]:
    kept = [s for s in scenarios if fit_content(s) not in excluded]
    return kept, len(scenarios) - len(kept)


def prepare_calls(scenarios: Sequence[Scenario], records: Sequence[ModelRecord],
                  models: ModelSet) -> list[RecordedCalls]:
    return [RecordedCalls(s, r, models.environment) for s, r in zip(scenarios, records, strict=True)]


def replay_all(prepared: Sequence[Any], policy: Policy, costs: Costs = DEFAULT_COSTS) -> list[Trajectory]:
    with gc_paused():
        return rollout_prepared(prepared, policy, costs)


def graph_all(scenarios: Sequence[Scenario], policy: Policy, models: ModelSet,
              costs: Costs = DEFAULT_COSTS) -> list[Trajectory]:
    graph = build_graph(policy)
    return [run_live(graph, s, models, costs) for s in scenarios]


@dataclass
class SplitEvaluation:
    result: PolicyResult
    trajectories: list[Trajectory]
    verdicts: list[Verdict]
    rows: list[dict[str, Any]] = field(default_factory=list)


class Evaluator:
    """Holds a suite, its models and the verifier; records each split's model outputs once."""

    def __init__(self, suite: Suite, models: ModelSet, verifier: Verifier, costs: Costs = DEFAULT_COSTS,
                 engine: Engine = "replay", confidence: float = 0.95, progress: Progress | None = None,
                 fit_on: dict[str, Suite] | None = None) -> None:
        self.suite = suite
        self.fit_on = dict(fit_on or {})  # role -> the suite whose train split that role's model is fitted on
        self.models = models
        self.verifier = verifier
        self.costs = costs
        self.engine = engine
        self.confidence = confidence
        self.progress = progress  # progress(message) for long model work
        self._prepared: dict[str, list[Any]] = {}
        self._fitted = False
        self.fit_report: dict[str, Any] = {}  # what the learned backends were fitted on (set by ``fit``)

    def fit(self) -> None:
        """Fit learned backends (calibration, probes) on a train split, once, before any recording: the
        evaluated suite's, or for a role with ``fit_on`` another suite's. Whatever the source, a fitting
        scenario whose content (request and proposed action) is also in the evaluated holdout is dropped:
        holdout never shapes a model, whatever the files are called."""
        if self._fitted:
            return
        holdout = {fit_content(s) for s in fit_data(self.suite, "holdout")}
        own, leaked_own = without_content(fit_data(self.suite, "train"), holdout)
        by_role, leaked = {}, {"own": leaked_own}
        for role, suite in self.fit_on.items():
            by_role[role], leaked[role] = without_content(fit_data(suite, "train"), holdout)
        self.fit_report = {"train": len(own), **{f"{role}_train": len(s) for role, s in by_role.items()},
                           "dropped_as_holdout_content": leaked}
        if self.progress is not None and not self.models.simulated:
            sources = "".join(f"; {role} on {getattr(s, 'name', 'another suite')}" for role, s in self.fit_on.items())
            self.progress(f"    fitting learned backends on train ({len(own)} scenarios{sources}; "
                          f"{sum(leaked.values())} dropped: same content as holdout)")
        self.models.fit(own, by_role=by_role, progress=self.progress)
        self._fitted = True

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        return self.suite.scenarios(split)

    def prepared(self, split: Split) -> list[Any]:
        """The split ready to roll out, shared by every policy evaluated after: recorded model outputs
        (``RecordedCalls``), or the suite's own episodes where it prepares them (environment-backed suites)."""
        if split not in self._prepared:
            self.fit()
            scenarios = self.scenarios(split)
            prepare = getattr(self.suite, "prepare", None)
            if prepare is not None:
                self._prepared[split] = prepare(scenarios, self.models)
                return self._prepared[split]
            report = None
            if self.progress is not None and not self.models.simulated:
                report = lambda done, total: self.progress(f"    recording model outputs, {split}: {done}/{total}")  # noqa: E731
            records = self.models.record(scenarios, progress=report)
            self._prepared[split] = prepare_calls(scenarios, records, self.models)
        return self._prepared[split]

    def rollouts(self, policy: Policy, split: Split) -> list[Trajectory]:
        if self.engine == "replay":
            return replay_all(self.prepared(split), policy, self.costs)
        self.fit()
        if hasattr(self.suite, "prepare"):  # episodes walk each guarded call through the LangGraph graph
            return rollout_prepared(self.prepared(split), policy, self.costs, build_graph(policy))
        return graph_all(self.scenarios(split), policy, self.models, self.costs)

    def evaluate(self, name: str, policy: Policy, split: Split, with_rows: bool = False) -> SplitEvaluation:
        scenarios = self.scenarios(split)
        trajectories = self.rollouts(policy, split)
        with gc_paused():
            verdicts = verify_all(self.verifier, scenarios, trajectories)
        result = aggregate(name, policy, split, verdicts, [t.cost for t in trajectories],
                           simulated=self.models.simulated, confidence=self.confidence,
                           oracle=self.models.oracle_roles)
        evaluation = SplitEvaluation(result, trajectories, verdicts)
        if with_rows:
            oracle = ",".join(self.models.oracle_roles)  # "" = no model read the labels
            evaluation.rows = [
                {**rollout_row(name, s, t, v, self.engine), "oracle": oracle}
                for s, t, v in zip(scenarios, trajectories, verdicts)
            ]
        return evaluation
