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
                 engine: Engine = "replay", confidence: float = 0.95, progress: Progress | None = None) -> None:
        self.suite = suite
        self.models = models
        self.verifier = verifier
        self.costs = costs
        self.engine = engine
        self.confidence = confidence
        self.progress = progress  # progress(message) for long model work
        self._prepared: dict[str, list[Any]] = {}
        self._fitted = False

    def fit(self) -> None:
        """Fit learned backends (calibration, probes) on the train split, once, before any recording."""
        if not self._fitted:
            if self.progress is not None and not self.models.simulated:
                self.progress(f"    fitting learned backends on the train split ({len(self.scenarios('train'))})")
            train = self.scenarios("train")
            # environment-backed suites say what their learned models fit on (e.g. one scenario per call)
            fit_scenarios = getattr(self.suite, "fit_scenarios", None)
            self.models.fit(fit_scenarios(train) if fit_scenarios is not None else train)
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
