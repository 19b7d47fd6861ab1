"""Evaluate policies on a suite's splits: record model outputs once, roll out, verify, aggregate.

Engines: ``replay`` walks the agent's node functions over recorded model outputs (the default, fast);
``graph`` runs the compiled LangGraph agent with the models called live. Both give identical trajectories.
``columnar`` (``evaluation.columnar``) gives the same aggregates as array operations over the recorded outputs;
where rollouts or rows are asked for, it replays.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from far.rollout.agent import DEFAULT_COSTS, Costs, build_graph, rollout_prepared, run_live
from far.rollout.calls import FITTED_ROLES, Fittable, ModelRecord, ModelSet, RecordedCalls
from far.rollout.policy import Policy
from far.rollout.progress import rate_reporter
from far.rollout.scenario import Scenario, Split, model_input
from far.rollout.trajectory import Trajectory
from far.search.evaluation.fitting import FitPlan, FitSources, fit_data, fit_data_of, group_folds, without_content
from far.search.evaluation.results import PolicyResult, aggregate, rollout_row
from far.suites import Suite
from far.verifiers.rules import Verifier, verify_all
from far.verifiers.verdict import Verdict

Engine = Literal["replay", "graph", "columnar"]
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
                 engine: Engine = "replay", confidence: float = 0.95, progress: Progress | None = None,
                 fit_on: dict[str, FitSources] | None = None, folds: int = 5, shift_encoder: Any = None) -> None:
        self.suite = suite
        self.folds = folds  # train is recorded out-of-fold: by models fitted without the scenario's group
        self.fit_on = dict(fit_on or {})  # role -> the suites its model is fitted on (``evaluation.fitting``)
        self.models = models
        self.verifier = verifier
        self.costs = costs
        self.engine = engine
        self.confidence = confidence
        self.progress = progress  # progress(message) for long model work
        self._prepared: dict[str, list[Any]] = {}
        self._columnar: Any = None  # the splits as ColumnarTrials (engine columnar), compiled on first use
        self._fitted = False
        self.fit_report: dict[str, Any] = {}  # what the learned backends were fitted on (set by ``fit``)
        self._holdout_content: set[tuple[str, str]] = set()
        self._plan = FitPlan({}, set())
        self.shift_encoder = shift_encoder  # measures how unlike the fit data the holdout is (``evaluation.shift``)
        self.shifts: list[Any] = []
        self.shift_note = ""  # SHIFTED (...) beside every figure when the holdout is unlike the fit data
        self._train_parts: list[tuple[list[int], ModelSet]] | None = None

    def fit(self) -> None:
        """Fit learned backends (calibration, probes) on train splits, once, before any recording: the
        evaluated suite's, or for a role with ``fit_on`` the suites named there (``evaluation.fitting``). Whatever
        the source, a fitting scenario whose content (request and proposed action) is also in the evaluated
        holdout is dropped: holdout never shapes a model, whatever the files are called."""
        if self._fitted:
            return
        evaluated = fit_data(self.suite, "holdout", self.progress)
        holdout = {model_input(s) for s in evaluated}
        own, leaked_own = without_content(fit_data(self.suite, "train", self.progress), holdout)
        plan = FitPlan(self.fit_on, holdout, self.progress)
        self._holdout_content, self._plan = holdout, plan
        leaked = {"own": leaked_own, **plan.dropped}
        self.fit_report = {"train": len(own), **plan.sizes(), "dropped_as_holdout_content": leaked}
        if self.progress is not None and not self.models.simulated:
            sources = "".join(f"; {role} on {' + '.join(s.names + (('this suite',) if s.own else ()))}"
                              for role, s in self.fit_on.items())
            self.progress(f"    fitting learned backends on train ({len(own)} scenarios{sources}; "
                          f"{sum(leaked.values())} dropped: same content as holdout)")
        by_role = plan.by_role(own)
        self.models.fit(own, by_role=by_role, progress=self.progress)
        if self.shift_encoder is not None and self.models.learns:
            self._measure_shift(own, by_role, evaluated)
        self._fitted = True

    def _measure_shift(self, own: list[Scenario], by_role: dict[str, list[Scenario]],
                       evaluated: list[Scenario]) -> None:
        from far.search.evaluation.shift import measure_shift, shift_mark

        sources: dict[str, tuple[list[str], list[Scenario]]] = {}  # fitting data -> the roles fitted on it
        for role in FITTED_ROLES:
            if isinstance(getattr(self.models, role), Fittable):
                fit_on = self.fit_on.get(role)
                label = ("this suite's train" if fit_on is None
                         else " + ".join(fit_on.names + (("this suite's train",) if fit_on.own else ())))
                sources.setdefault(label, ([], by_role.get(role, own)))[0].append(role)
        self.shifts = [measure_shift(f"{label} ({', '.join(roles)})", data, evaluated, self.shift_encoder)
                       for label, (roles, data) in sources.items()]
        self.shift_note = shift_mark(self.shifts)
        self.fit_report["shift"] = [s.to_dict() for s in self.shifts]
        if self.progress is not None:
            for shift in self.shifts:
                self.progress(f"    shift: {shift.unlike:.1%} of the holdout unlike {shift.fitted_on}"
                              f"{' -- SHIFTED' if shift.shifted else ''}")

    def scenarios(self, split: Split) -> Sequence[Scenario]:
        return self.suite.scenarios(split)

    def parts(self, split: Split) -> list[tuple[list[int], ModelSet]]:
        """The split's scenarios (by index) and the models that judge them. Holdout: the models fitted on
        all of train. Train, when a model learns: ``folds`` parts by group, each judged by copies fitted on the
        other parts -- a policy is chosen on train from outputs of models that never saw those scenarios,
        as they will not have seen holdout's (in-sample outputs made every learned guard look perfect)."""
        self.fit()
        everything = [(list(range(len(self.scenarios(split)))), self.models)]
        if split != "train" or not self.models.learns:
            return everything
        if not self.learns_here():
            self.fit_report["train_outputs"] = "out-of-sample: every learned model was fitted on other suites"
            return everything
        if self._train_parts is None:
            train, plan = list(self.scenarios("train")), self._plan
            self._train_parts = []
            for fold, (fit_index, measure_index) in enumerate(group_folds(train, self.folds)):
                if self.progress is not None:
                    self.progress(f"    train out-of-fold {fold + 1}/{self.folds}: models fitted without "
                                  f"{len(measure_index)} scenarios' groups")
                data, _ = without_content(fit_data_of(self.suite, [train[i] for i in fit_index]),
                                          self._holdout_content)
                copies = self.models.refitted(data, plan.by_role(data), self.progress, keep=plan.elsewhere)
                self._train_parts.append((measure_index, copies))
            self.fit_report["train_outputs"] = (f"out-of-fold, {len(self._train_parts)} folds by group"
                                                if self._train_parts else "in-sample (under 2 groups)")
            self._train_parts = self._train_parts or everything
        return self._train_parts

    def learns_here(self) -> bool:
        """Some learned model is fitted on the evaluated suite's train split (so its train outputs must be
        recorded out-of-fold); a model fitted on other suites alone never saw it."""
        return any(isinstance(getattr(self.models, role), Fittable) and role not in self._plan.elsewhere
                   for role in FITTED_ROLES)

    def prepared(self, split: Split) -> list[Any]:
        """The split ready to roll out, shared by every policy evaluated after: recorded model outputs
        (``RecordedCalls``), or the suite's own episodes where it prepares them (environment-backed suites)."""
        if split not in self._prepared:
            scenarios = self.scenarios(split)
            prepare = getattr(self.suite, "prepare", None)
            items: list[Any] = [None] * len(scenarios)
            for indices, models in self.parts(split):
                subset = [scenarios[i] for i in indices]
                if prepare is not None:
                    done = prepare(subset, models)
                else:
                    report = None
                    if self.progress is not None and not models.simulated:
                        report = rate_reporter(self.progress, f"    recording model outputs, {split}")
                    done = prepare_calls(subset, models.record(subset, progress=report), models)
                for i, item in zip(indices, done, strict=True):
                    items[i] = item
            self._prepared[split] = items
        return self._prepared[split]

    def columnar(self) -> Any:
        """The splits compiled to columns (``columnar.ColumnarTrials``), once; a one-line error where the
        columnar engine does not apply (``far.search.jobs.config.check_engine`` says so earlier, from the config)."""
        from far.rollout.errors import FarInputError
        from far.rollout.scenario import SPLITS
        from far.search.evaluation.columnar import ColumnarTrials, compile_columns, unsupported

        if self._columnar is None:
            prepared = {split: self.prepared(split) for split in SPLITS}
            problem = next(filter(None, (unsupported(items, self.verifier) for items in prepared.values())), None)
            if problem is not None:
                raise FarInputError(f"engine columnar cannot evaluate this run: {problem}", field="engine")
            compiled = {split: compile_columns(items) for split, items in prepared.items()}
            self._columnar = ColumnarTrials(compiled, self.verifier, self.costs, self.confidence)
        return self._columnar

    def rollouts(self, policy: Policy, split: Split, limit: int | None = None) -> list[Trajectory]:
        """The policy's rollouts of the split's scenarios (the first ``limit`` of them)."""
        if self.engine in ("replay", "columnar"):
            return replay_all(self.prepared(split)[:limit], policy, self.costs)
        if hasattr(self.suite, "prepare"):  # episodes walk each guarded call through the LangGraph graph
            return rollout_prepared(self.prepared(split)[:limit], policy, self.costs, build_graph(policy))
        scenarios = self.scenarios(split)[:limit]
        trajectories: list[Any] = [None] * len(scenarios)
        for indices, models in self.parts(split):
            indices = [i for i in indices if i < len(scenarios)]
            for i, trajectory in zip(indices, graph_all([scenarios[i] for i in indices], policy, models, self.costs)):
                trajectories[i] = trajectory
        return trajectories

    def _marked(self, result: PolicyResult) -> PolicyResult:
        return result.model_copy(update={"shift": self.shift_note}) if self.shift_note else result

    def evaluate(self, name: str, policy: Policy, split: Split, with_rows: bool = False,
                 limit: int | None = None) -> SplitEvaluation:
        """One policy on a split (its first ``limit`` scenarios); ``with_rows``: with a row per rollout (replayed
        under engine columnar, whose evaluation without rows has aggregates only: no trajectories or
        verdicts)."""
        if self.engine == "columnar" and not with_rows and limit is None:
            result = self.columnar().result(name, policy, split, self.models.simulated, self.models.oracle_roles)
            return SplitEvaluation(self._marked(result), [], [])
        scenarios = self.scenarios(split)[:limit]
        trajectories = self.rollouts(policy, split, limit)
        with gc_paused():
            verdicts = verify_all(self.verifier, scenarios, trajectories)
        result = aggregate(name, policy, split, verdicts, [t.cost for t in trajectories],
                           simulated=self.models.simulated, confidence=self.confidence,
                           oracle=self.models.oracle_roles)
        evaluation = SplitEvaluation(self._marked(result), trajectories, verdicts)
        if with_rows:
            oracle = ",".join(self.models.oracle_roles)  # "" = no model read the labels
            evaluation.rows = [
                {**rollout_row(name, s, t, v, "replay" if self.engine == "columnar" else self.engine),
                 "oracle": oracle, "shift": self.shift_note}
                for s, t, v in zip(scenarios, trajectories, verdicts)
            ]
        return evaluation
