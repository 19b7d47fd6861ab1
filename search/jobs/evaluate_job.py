"""``far evaluate``: the config's named policies on train and holdout, the gate on holdout, the ranking on train
and the attribution of lost reward; Parquet and JSON under the output directory.

Stages: prepare (read and check the config, assemble the evaluator) -> evaluate (every policy on every split)
-> select (gate on holdout, rank on train) -> review (the verifier ensemble's disagreements and sensitivity)
-> write -> render (the text the command prints).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.results import PolicyResult
from far.search.jobs.assemble import Progress, build_evaluator, model_host
from far.search.jobs.config import (
    LoadedEvaluateConfig,
    check_fit_data,
    load_evaluate_config,
    load_fit_suites,
    load_suite,
)
from far.search.jobs.summary import RunSummary, calls_line, run_summary, write_run_files
from far.search.ranking.gate import GateVerdict

ENGINES = ("replay", "graph", "columnar")


@dataclass
class EvaluateResult:
    """``run_evaluate``'s answer: every policy on train and holdout, the gate on holdout, the train ranking."""

    output: Path
    results: list[PolicyResult]
    verdicts: dict[str, GateVerdict]  # policy name -> the gate on holdout
    ranking: list[str]  # policy names, best first on train
    summary: RunSummary  # what summary.json holds
    report: str = ""  # what `far evaluate` prints

    def result(self, policy: str, split: str) -> PolicyResult:
        return next(r for r in self.results if r.policy_name == policy and r.split == split)


@dataclass
class EvaluateRun:
    """A prepared evaluation: the checked config, its suite and the evaluator over its models."""

    loaded: LoadedEvaluateConfig
    suite: Any
    evaluator: Evaluator
    started: float = field(default_factory=time.perf_counter)


@dataclass
class Evaluations:
    """Every policy on every split: results, rollout rows, the per-category breakdown, the review's inputs."""

    results: list[PolicyResult] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    breakdown: list[dict[str, Any]] = field(default_factory=list)
    evaluated: list[Any] = field(default_factory=list)  # sensitivity.Evaluated


@dataclass
class Selection:
    verdicts: dict[str, GateVerdict]  # on holdout
    ranking: list[str]  # on train, best first


@dataclass
class Review:
    """What the verifier ensemble adds: rollouts its members disagree on, and how each member sways the answer."""

    rows: list[dict[str, Any]] | None = None  # None: the verifier is a single rule verifier
    sensitivity: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)


def run_evaluate(config: str | Path | LoadedEvaluateConfig, *, output: str | Path | None = None,
                 engine: str | None = None, progress: Progress | None = None) -> EvaluateResult:
    """``far evaluate`` (see the module's docstring); bad input raises ``FarInputError`` before any model runs."""
    run = prepare(config, output, engine, progress)
    evaluations = evaluate_policies(run, progress)
    selection = select(run, evaluations)
    review = review_verifiers(run, evaluations)
    summary = write(run, evaluations, selection, review)
    return EvaluateResult(run.loaded.output, evaluations.results, selection.verdicts, selection.ranking, summary,
                          render(run, evaluations, selection, review))


def prepare(config: str | Path | LoadedEvaluateConfig, output: str | Path | None, engine: str | None,
            progress: Progress | None) -> EvaluateRun:
    loaded = config if isinstance(config, LoadedEvaluateConfig) else load_evaluate_config(
        config, output=str(output) if output is not None else None)
    if engine:
        if engine not in ENGINES:
            raise FarInputError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})", field="--engine")
        loaded = loaded.model_copy(update={"config": loaded.config.model_copy(update={"engine": engine})})
    suite, fit_on = load_suite(loaded), load_fit_suites(loaded)
    check_fit_data(loaded.config.models, loaded.source, suite, fit_on, "evaluate")
    evaluator = build_evaluator(loaded.config, suite=suite, base_dir=loaded.base_dir, source=loaded.source,
                                rewards=loaded.rewards, fit_on=fit_on, host=model_host(loaded.config),
                                progress=progress)
    run = EvaluateRun(loaded, suite, evaluator)
    if progress is not None:
        progress("\n".join(header(run)))
    return run


def label(model: Any) -> str:
    return f"{model.name} (ORACLE: reads the labels)" if getattr(model, "oracle", False) else model.name


def header(run: EvaluateRun) -> list[str]:
    models, train, holdout = run.evaluator.models, run.suite.scenarios("train"), run.suite.scenarios("holdout")
    return [f"FAR evaluate: suite {run.suite.name} (train {len(train)}, holdout {len(holdout)}), engine "
            f"{run.loaded.config.engine}", f"  models: edge {label(models.edge)}; cloud {label(models.cloud)}; "
            f"user {label(models.user)}"]


def evaluate_policies(run: EvaluateRun, progress: Progress | None) -> Evaluations:
    from far.rollout.scenario import SPLITS
    from far.search.evaluation.results import breakdown
    from far.search.evaluation.sensitivity import Evaluated

    found = Evaluations()
    total = len(run.loaded.policies) * len(SPLITS)
    for name, policy in run.loaded.policies.items():
        for split in SPLITS:
            scenarios = run.suite.scenarios(split)
            evaluation = run.evaluator.evaluate(name, policy, split, with_rows=True)
            found.results.append(evaluation.result)
            found.breakdown.extend(breakdown(name, split, scenarios, evaluation.verdicts))
            found.rows.extend(evaluation.rows)
            found.evaluated.append(Evaluated(name, policy, split, scenarios, evaluation.trajectories,
                                             evaluation.verdicts))
            if progress is not None:
                progress(f"  [{len(found.results)}/{total}] {name} on {split}: {len(scenarios)} rollouts "
                         f"({time.perf_counter() - run.started:.1f}s)")
    return found


def select(run: EvaluateRun, evaluations: Evaluations) -> Selection:
    """The gate on each policy's holdout result; the ranking of their train results under the gate's limits."""
    from far.search.ranking.gate import gate
    from far.search.ranking.rank import Constraints, rank

    gate_config = run.loaded.config.gate
    verdicts = {r.policy_name: gate(r, gate_config) for r in evaluations.results if r.split == "holdout"}
    train = [r for r in evaluations.results if r.split == "train"]
    return Selection(verdicts, [r.policy_name for r in rank(train, Constraints.from_gate(gate_config))])


def review_verifiers(run: EvaluateRun, evaluations: Evaluations) -> Review:
    from far.search.evaluation.sensitivity import (
        review_rows,
        sensitivity,
        sensitivity_table,
    )
    from far.verifiers.ensemble import EnsembleVerifier
    from far.verifiers.remote import HttpVerifier

    verifier = run.evaluator.verifier
    remote = isinstance(verifier, HttpVerifier)
    if not (remote or isinstance(verifier, EnsembleVerifier)):
        return Review()
    rows = review_rows(evaluations.evaluated)
    members = verifier.endpoint if remote else ", ".join(verifier.member_names)
    review = Review(rows, lines=[f"\nVerifier ensemble ({members}): {len(rows)} rollouts where members disagree "
                                 "(review.parquet)."])
    if remote:
        review.lines.append("No sensitivity report: it re-combines the members' assessments, which stay on the "
                            "server (score in process for it)")
        return review
    review.sensitivity = sensitivity(verifier, evaluations.evaluated, run.loaded.config.gate,
                                     run.evaluator.models.simulated)
    review.lines += [f"Drop or flip each member ({verifier.aggregation}):", sensitivity_table(review.sensitivity)]
    return review


def attribution_rows(results: list[PolicyResult]) -> list[dict[str, Any]]:
    """attribution.parquet: reward lost per policy, split, failure and the policy parameter that decided it."""
    return [{"policy": r.policy_name, "split": r.split, "failure": kind, "parameter": parameter, "reward_lost": lost,
             "count": r.failure_counts.get(kind, 0)}
            for r in results for kind, by_param in r.reward_lost.items() for parameter, lost in by_param.items()]


def write(run: EvaluateRun, evaluations: Evaluations, selection: Selection, review: Review) -> RunSummary:
    """The Parquet tables, ``sensitivity.json``, ``summary.json`` and ``run_stats.json``, each atomically."""
    from far.rollout.io import (
        write_json_atomic,
        write_parquet_atomic,
        write_rows_atomic,
    )
    from far.rollout.scenario import SPLITS, scenarios_to_table

    out, suite = run.loaded.output, run.suite
    write_parquet_atomic(out / "scenarios.parquet",
                         scenarios_to_table([s for split in SPLITS for s in suite.scenarios(split)]))
    write_rows_atomic(out / "rollouts.parquet", evaluations.rows)
    write_rows_atomic(out / "policy_results.parquet", [r.row() for r in evaluations.results])
    write_rows_atomic(out / "breakdown.parquet", evaluations.breakdown)
    write_rows_atomic(out / "attribution.parquet", attribution_rows(evaluations.results), empty_column="policy")
    if review.rows is not None:
        write_rows_atomic(out / "review.parquet", review.rows, empty_column="policy")
    if review.sensitivity is not None:
        write_json_atomic(out / "sensitivity.json", review.sensitivity)
    summary = run_summary("evaluate", run.loaded, suite, run.evaluator, answer(run, evaluations, selection, review))
    write_run_files(out, summary, {"seconds": round(time.perf_counter() - run.started, 3),
                                   "model_calls": run.evaluator.models.cache_stats()})
    return summary


def answer(run: EvaluateRun, evaluations: Evaluations, selection: Selection, review: Review) -> dict[str, Any]:
    loaded, config, oracle = run.loaded, run.loaded.config, list(run.evaluator.models.oracle_roles)
    shift = run.evaluator.shift_note or None
    return {
        "rewards": loaded.rewards.model_dump(mode="json"),
        "gate_config": config.gate.model_dump(),
        "policies": {name: p.model_dump(mode="json") for name, p in loaded.policies.items()},
        "results": [r.model_dump(mode="json") for r in evaluations.results],
        "gate": {name: {**v.to_dict(), "oracle": oracle, "shift": shift} for name, v in selection.verdicts.items()},
        "ranking_train": selection.ranking,
        "verifier": config.verifier.model_dump(mode="json"),
        "sensitivity": review.sensitivity,
    }


def render(run: EvaluateRun, evaluations: Evaluations, selection: Selection, review: Review) -> str:
    """What ``far evaluate`` prints: results, the gate, the ranking, the winner's lost reward, per attack."""
    from far.search.ranking.gate import gate_rule
    from far.search.ranking.rank import RANKING_WORDS
    from far.search.reports.text import (
        attack_rows,
        attack_table,
        attribution_table,
        gate_table,
        results_table,
    )

    ranking, results = selection.ranking, evaluations.results
    holdout_mark = next(r.mark for r in results if r.split == "holdout")
    winner = next(r for r in results if r.split == "train" and r.policy_name == ranking[0])
    lines = [*header(run), "", results_table([r for name in ranking for r in results if r.policy_name == name]), "",
             f"Gate (holdout): {gate_rule(run.loaded.config.gate)}",
             gate_table({name: selection.verdicts[name] for name in ranking}, holdout_mark), "",
             f"Ranking on train ({RANKING_WORDS}): " + ", ".join(f"{i + 1}. {n}" for i, n in enumerate(ranking)),
             f"\nReward lost on train by failure and deciding parameter, {winner.policy_name}:",
             attribution_table(winner)]
    for name in ranking:
        per_attack = attack_rows(evaluations.breakdown, name, "holdout")
        if per_attack:
            lines += [f"\nPer attack on holdout, {name} [{holdout_mark}] (ASR: injected rollouts where the attack "
                      "succeeded; utility under attack: injected rollouts whose user task was done):",
                      attack_table(per_attack)]
    lines += review.lines
    lines += [f"\n{calls_line(run.evaluator.models.cache_stats())}",
              f"\nResults: {run.loaded.output}/ (summary.json, policy_results.parquet, rollouts.parquet, "
              "attribution.parquet, breakdown.parquet, scenarios.parquet, run_stats.json)"]
    return "\n".join(lines)
