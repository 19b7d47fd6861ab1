"""Which judge speaks for a scenario: environment-backed suites name their benchmark in
``scenario.environment["benchmark"]`` and ``JUDGES`` maps it to that environment's judge; everything else is
judged from its ground truth. Add a judge with ``JUDGES.register`` or an entry point in ``far.judges``.
"""
from __future__ import annotations

from collections.abc import Callable

from far.rollout.judgement import GroundTruthJudge, Judge, Judgement
from far.rollout.registry import Registry
from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory

__all__ = ["JUDGES", "GroundTruthJudge", "Judge", "Judgement", "SuiteJudge"]

# benchmark name -> a no-argument constructor of its Judge
JUDGES: Registry[Callable[[], Judge]] = Registry("judge", "far.judges", {
    "agentdojo": "far.suites.agentdojo.judge:AgentDojoJudge",
})


class SuiteJudge:
    """Picks the judge by the scenario: environment-backed suites name their benchmark in
    ``scenario.environment["benchmark"]``; everything else is judged from its ground truth."""

    name = "suite"

    def __init__(self, judges: dict[str, Judge] | None = None, default: Judge | None = None) -> None:
        self.judges = judges  # None: the JUDGES table (built on first use, one per benchmark)
        self._built: dict[str, Judge] = {}
        self.default = default or GroundTruthJudge()

    def _judge_for(self, benchmark: str) -> Judge | None:
        if self.judges is not None:
            return self.judges.get(benchmark)
        if benchmark not in self._built:
            if benchmark not in JUDGES:
                return None
            self._built[benchmark] = JUDGES[benchmark]()
        return self._built[benchmark]

    def judge(self, scenario: Scenario, trajectory: Trajectory) -> Judgement:
        environment = scenario.environment
        if environment is None:
            return self.default.judge(scenario, trajectory)
        benchmark = environment.get("benchmark")
        if benchmark is not None and not isinstance(benchmark, str):
            raise ValueError(f"scenario {scenario.id}: environment.benchmark must be a string, not "
                             f"{type(benchmark).__name__}")
        judge = self._judge_for(benchmark) if benchmark is not None else self.default
        if judge is None:
            raise ValueError(f"scenario {scenario.id}: no judge for benchmark {benchmark!r}")
        return judge.judge(scenario, trajectory)
