"""FAR's jobs as functions: ``run_evaluate``, ``run_search``, ``run_calibrate``, ``import_scenarios``, and
``build_evaluator``, the one place an Evaluator is assembled from a config.

The ``far`` command, the service, FATE and the benches call these; evolve and serve import nothing else of
search (``tests/test_import_graph.py``). Each job checks its input before any expensive work (a bad field is a
``FarInputError`` naming file and field), writes its results atomically under the output directory, and returns
them with the text the command line prints (``report``)::

    import far
    result = far.run_search("configs/search.yaml")
    print(result.report)            # what `far search` prints
    result.deployable, result.winner
"""
from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.results import PolicyResult
from far.search.jobs.config import (
    LoadedEvaluateConfig,
    LoadedRunConfig,
    LoadedSearchConfig,
    RunConfig,
    check_capacity,
    check_fit_data,
    fit_suites,
    load_evaluate_config,
    load_fit_suites,
    load_run_config,
    load_search_config,
    load_suite,
    make_verifier,
)
from far.search.ranking.gate import GateVerdict, gate, gate_rule
from far.verifiers.taxonomy import RewardTable, load_reward_table, parse_reward_table

Progress = Callable[[str], None]  # one line of progress (the CLI prints it to stderr)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("far", "ray", "langgraph", "pydantic", "pyarrow", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def build_verifier(config: RunConfig, rewards: RewardTable | None = None, host: Any = None,
                   models: Any = None) -> Any:
    """The run's verifier: the rule verifier, or the configured ensemble, or the remote endpoint."""
    return make_verifier(config, rewards if rewards is not None else parse_reward_table(config.rewards), host,
                         models)


def build_evaluator(config: RunConfig, *, suite: Any = None, base_dir: Path | None = None,
                    source: str | Path = "config", rewards: RewardTable | None = None,
                    fit_on: dict[str, Any] | None = None, models: Any = None, host: Any = None,
                    progress: Progress | None = None) -> Evaluator:
    """An Evaluator for ``config``: its suite (or ``suite``, built already), its models hosted by ``host``
    (or ``models``), its verifier, the suites its learned models are fitted on (``fit_on``, built from the
    config unless given) and the shift encoder. Relative paths resolve against ``base_dir``."""
    from far.models.backends import build_models
    from far.search.evaluation.shift import shift_encoder
    from far.suites import build_suite

    if suite is None:
        suite = build_suite(config.suite, base_dir)
    if rewards is None:
        rewards = (load_reward_table(Path(base_dir or ".") / config.rewards) if isinstance(config.rewards, str)
                   else parse_reward_table(config.rewards))
    if fit_on is None:
        fit_on = fit_suites(config.models, base_dir, source, config.suite)
    if models is None:
        models = build_models(config.models, host, base_dir)
    return Evaluator(suite, models, make_verifier(config, rewards, host, models), config.costs, config.engine,
                     config.gate.confidence, progress=progress, fit_on=fit_on,
                     shift_encoder=shift_encoder(config.models))


def _loaded(config: Any, loader: Callable[..., Any], output: str | Path | None) -> Any:
    """A config file's path, read and checked by ``loader``, or a config loaded already."""
    if isinstance(config, (LoadedEvaluateConfig, LoadedSearchConfig)):
        return config
    return loader(config, output=str(output) if output is not None else None)


def _label(model: Any) -> str:
    return f"{model.name} (ORACLE: reads the labels)" if getattr(model, "oracle", False) else model.name


@dataclass
class EvaluateResult:
    """``run_evaluate``'s answer: every policy on train and holdout, the gate on holdout, the train ranking."""

    output: Path
    results: list[PolicyResult]
    verdicts: dict[str, GateVerdict]  # policy name -> the gate on holdout
    ranking: list[str]  # policy names, best first on train
    summary: dict[str, Any]  # what summary.json holds
    report: str = ""  # what `far evaluate` prints

    def result(self, policy: str, split: str) -> PolicyResult:
        return next(r for r in self.results if r.policy_name == policy and r.split == split)


@dataclass
class SearchResult:
    """``run_search``'s answer: the winner, whether it may ship, the leaderboard and every trial."""

    output: Path
    winner: Policy
    deployable: bool
    gate: GateVerdict  # the winner's, on holdout
    train: PolicyResult
    holdout: PolicyResult
    leaderboard: list[dict[str, Any]]
    trials: list[Any]
    summary: dict[str, Any]  # what summary.json holds
    report: str = ""  # what `far search` prints
    advice: list[str] = field(default_factory=list)  # what failed and what would deploy (when nothing does)


def run_evaluate(config: str | Path | LoadedEvaluateConfig, *, output: str | Path | None = None,
                 engine: str | None = None, progress: Progress | None = None) -> EvaluateResult:
    """``far evaluate``: the config's named policies on train and holdout, the gate on holdout, the ranking on
    train, the attribution of lost reward; Parquet and JSON under the output directory."""
    import pyarrow as pa
    from far.rollout.io import write_json_atomic, write_parquet_atomic
    from far.rollout.scenario import SPLITS, scenarios_to_table
    from far.search.evaluation.results import breakdown
    from far.search.evaluation.sensitivity import Evaluated, review_rows, sensitivity, sensitivity_table
    from far.search.ranking.rank import RANKING_WORDS, Constraints, rank
    from far.search.reports.text import attack_rows, attack_table, attribution_table, gate_table, results_table
    from far.suites import split_manifest
    from far.verifiers.ensemble import EnsembleVerifier
    from far.verifiers.remote import HttpVerifier

    loaded = _loaded(config, load_evaluate_config, output)
    config = loaded.config
    if engine:
        if engine not in ("replay", "graph", "columnar"):
            raise FarInputError(f"unknown engine {engine!r} (known: replay, graph, columnar)", field="--engine")
        config = config.model_copy(update={"engine": engine})
        loaded = loaded.model_copy(update={"config": config})
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(config.models, loaded.source, suite, fit_on, "evaluate")
    host = None
    judge_on_actor = "llm_judge" in config.verifier.members and config.verifier.llm_judge.actor
    if config.models.uses_actors() or judge_on_actor:
        from far.cluster.hosting import RayHost

        host = RayHost()
    evaluator = build_evaluator(config, suite=suite, base_dir=loaded.base_dir, source=loaded.source,
                                rewards=loaded.rewards, fit_on=fit_on, host=host, progress=progress)
    models, verifier = evaluator.models, evaluator.verifier
    sizes = {split: len(suite.scenarios(split)) for split in SPLITS}
    lines = [f"FAR evaluate: suite {suite.name} (train {sizes['train']}, holdout {sizes['holdout']}), engine "
             f"{config.engine}", f"  models: edge {_label(models.edge)}; cloud {_label(models.cloud)}; "
             f"user {_label(models.user)}"]
    if progress is not None:
        progress("\n".join(lines))

    started = time.perf_counter()
    results, rows, breakdown_rows, evaluated = [], [], [], []
    total = len(loaded.policies) * len(SPLITS)
    for index, (name, policy) in enumerate(loaded.policies.items()):
        for offset, split in enumerate(SPLITS):
            evaluation = evaluator.evaluate(name, policy, split, with_rows=True)
            results.append(evaluation.result)
            breakdown_rows.extend(breakdown(name, split, suite.scenarios(split), evaluation.verdicts))
            rows.extend(evaluation.rows)
            evaluated.append(Evaluated(name, policy, split, suite.scenarios(split), evaluation.trajectories,
                                       evaluation.verdicts))
            if progress is not None:
                progress(f"  [{index * len(SPLITS) + offset + 1}/{total}] {name} on {split}: {sizes[split]} "
                         f"rollouts ({time.perf_counter() - started:.1f}s)")

    by_split = {split: [r for r in results if r.split == split] for split in SPLITS}
    verdicts = {
        r.policy_name: gate(r, config.gate)
        for r in by_split["holdout"]
    }
    ranking = [r.policy_name for r in rank(by_split["train"], Constraints.from_gate(config.gate))]
    ordered = [r for name in ranking for r in results if r.policy_name == name]

    lines += ["", results_table(ordered), "",
              f"Gate (holdout): {gate_rule(config.gate)}",
              gate_table({name: verdicts[name] for name in ranking}, by_split["holdout"][0].mark), "",
              f"Ranking on train ({RANKING_WORDS}): " +
              ", ".join(f"{i + 1}. {name}" for i, name in enumerate(ranking))]
    winner = next(r for r in by_split["train"] if r.policy_name == ranking[0])
    lines += [f"\nReward lost on train by failure and deciding parameter, {winner.policy_name}:",
              attribution_table(winner)]
    for name in ranking:
        per_attack = attack_rows(breakdown_rows, name, "holdout")
        if per_attack:
            lines += [f"\nPer attack on holdout, {name} [{by_split['holdout'][0].mark}] (ASR: injected rollouts "
                      "where the attack succeeded; utility under attack: injected rollouts whose user task was "
                      "done):", attack_table(per_attack)]

    out = loaded.output
    attribution_rows = [
        {"policy": r.policy_name, "split": r.split, "failure": kind, "parameter": parameter, "reward_lost": lost,
         "count": r.failure_counts.get(kind, 0)}
        for r in results for kind, by_param in r.reward_lost.items() for parameter, lost in by_param.items()
    ]
    write_parquet_atomic(out / "scenarios.parquet",
                         scenarios_to_table([s for split in SPLITS for s in suite.scenarios(split)]))
    write_parquet_atomic(out / "rollouts.parquet", pa.Table.from_pylist(rows))
    write_parquet_atomic(out / "policy_results.parquet", pa.Table.from_pylist([r.row() for r in results]))
    write_parquet_atomic(out / "breakdown.parquet", pa.Table.from_pylist(breakdown_rows))
    ensemble_report = None
    remote = isinstance(verifier, HttpVerifier)
    if isinstance(verifier, EnsembleVerifier) or remote:
        review = review_rows(evaluated)
        write_parquet_atomic(out / "review.parquet", pa.Table.from_pylist(review) if review
                             else pa.table({"policy": pa.array([], pa.string())}))
        lines.append(f"\nVerifier ensemble ({verifier.endpoint if remote else ', '.join(verifier.member_names)}): "
                     f"{len(review)} rollouts where members disagree (review.parquet).")
    if isinstance(verifier, EnsembleVerifier):
        ensemble_report = sensitivity(verifier, evaluated, config.gate, models.simulated)
        write_json_atomic(out / "sensitivity.json", ensemble_report)
        lines += [f"Drop or flip each member ({verifier.aggregation}):", sensitivity_table(ensemble_report)]
    elif remote:
        lines.append("No sensitivity report: it re-combines the members' assessments, which stay on the server "
                     "(score in process for it)")
    write_parquet_atomic(out / "attribution.parquet", pa.Table.from_pylist(attribution_rows) if attribution_rows
                         else pa.table({"policy": pa.array([], pa.string())}))
    summary: dict[str, Any] = {
        "command": "evaluate",
        "config_file": loaded.source,
        "config": loaded.raw,
        "suite": suite.describe(),
        "splits": split_manifest(suite),
        "models": {**{k: v for k, v in models.describe().items() if k != "model_calls"},  # in run_stats.json
                   "fit": evaluator.fit_report},
        "engine": config.engine,
        "rewards": loaded.rewards.model_dump(mode="json"),
        "gate_config": config.gate.model_dump(),
        "policies": {name: p.model_dump(mode="json") for name, p in loaded.policies.items()},
        "results": [r.model_dump(mode="json") for r in results],
        "oracle": list(models.oracle_roles),  # non-empty: every figure here came from label-reading models
        "shift": evaluator.shift_note or None,  # SHIFTED (...): the models were fitted on data unlike holdout
        "gate": {name: {**v.to_dict(), "oracle": list(models.oracle_roles), "shift": evaluator.shift_note or None}
                 for name, v in verdicts.items()},
        "ranking_train": ranking,
        "verifier": config.verifier.model_dump(mode="json"),
        "sensitivity": ensemble_report,
        "versions": versions(),
    }
    calls = models.cache_stats()
    # summary.json holds no figure of this run's circumstances (time, a warm cache): same config and seed, same file
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "run_stats.json", {"seconds": round(time.perf_counter() - started, 3),
                                               "model_calls": calls})
    lines += [f"\nModel calls: {calls['calls_made']} made, {calls['hits']} answered from the cache",
              f"\nResults: {out}/ (summary.json, policy_results.parquet, rollouts.parquet, attribution.parquet, "
              "breakdown.parquet, scenarios.parquet, run_stats.json)"]
    return EvaluateResult(out, results, verdicts, ranking, summary, "\n".join(lines))


def proposer_engine(config: Any, explicit: bool) -> tuple[Any, bool]:
    """The LM for ``method: llm``: ``search.llm`` if given, else the cloud model's engine when the cloud is an
    LM backend, else SmolLM2 through transformers."""
    from far.models.backends import CLOUD_LM_DEFAULTS
    from far.models.engines import EngineSpec

    llm = config.search.llm
    cloud = config.models.cloud
    if not explicit and cloud.backend in CLOUD_LM_DEFAULTS:
        options = {**CLOUD_LM_DEFAULTS[cloud.backend], **cloud.options()}
        spec = EngineSpec(engine=options["engine"], model=options.get("model", "smollm2"),
                          options=options.get("engine_options", {}))
        return spec, bool(options.get("actor", False))
    return EngineSpec(engine=llm.engine, model=llm.model, options=llm.engine_options), llm.actor


def run_trials(loaded: LoadedSearchConfig, evaluator: Any, host: Any, resume: bool,
               tune_progress: bool) -> tuple[Any, Any, list[str]]:
    """The search stage: the trials on Ray Tune, over rollout actors (or the columnar engine's own processes),
    the actors stopped however it ends. (Tune's run, the LLM proposer or None, the nodes the actors ran on.)"""
    from far.cluster.rollout_pool import RolloutPool
    from far.models.backends import open_cache
    from far.models.cache import CachedLM
    from far.rollout.scenario import SPLITS
    from far.search.searchers.tune import run_tune

    config, settings = loaded.config, loaded.config.search
    if config.engine == "columnar":  # trials evaluate column-wise in their own processes: no rollout actors
        pool: Any = evaluator.columnar()
    else:
        calls = {split: evaluator.prepared(split) for split in SPLITS}
        pool = RolloutPool(calls, evaluator.verifier, config.costs, config.engine, settings.actors,
                           settings.chunk_size)
    try:
        proposer = None
        if settings.method == "llm":
            spec, actor = proposer_engine(config, "llm" in (loaded.raw.get("search") or {}))
            proposer = host.lm(spec, actor)
            cache = open_cache(config.models.cache)
            if cache is not None:
                proposer = CachedLM(proposer, cache)
        run = run_tune(loaded, pool, evaluator.models.simulated, resume=resume, proposer_lm=proposer,
                       verbose=1 if tune_progress else 0)
        return run, proposer, pool.nodes() if isinstance(pool, RolloutPool) else []
    finally:
        pool.shutdown()


def run_search(config: str | Path | LoadedSearchConfig, *, output: str | Path | None = None,
               resume: bool = False, address: str | None = None, tune_progress: bool = False,
               progress: Progress | None = None) -> SearchResult:
    """``far search``: search the policy space on Ray Tune (a local Ray, or the cluster at ``address`` or
    ``$RAY_ADDRESS``), re-evaluate the top policies on holdout, gate them, and answer which policy can ship;
    Parquet, JSON and report.html under the output directory."""
    import pyarrow as pa

    loaded = _loaded(config, load_search_config, output)  # all validation before Ray starts
    config = loaded.config
    settings = config.search
    remote = address or os.environ.get("RAY_ADDRESS")
    if not remote:
        check_capacity(settings, float(len(os.sched_getaffinity(0))), loaded.source, "this machine")
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(config.models, loaded.source, suite, fit_on, "search")

    from far.cluster.hosting import RayHost, ensure_ray
    from far.models.cache import CachedLM
    from far.rollout.io import write_json_atomic, write_parquet_atomic, write_text_atomic
    from far.search.jobs.policy_file import policy_file
    from far.search.ranking.leaderboard import advice, build_leaderboard, front_rows
    from far.search.ranking.rank import RANKING_WORDS, Constraints
    from far.search.reports.html import render
    from far.search.reports.text import attribution_table, effects_table, front_table, pct, results_table
    from far.suites import split_manifest

    ensure_ray(address)
    if remote:
        import ray

        check_capacity(settings, float(ray.cluster_resources().get("CPU", 0)), loaded.source, "the cluster")
    host = RayHost()
    evaluator = build_evaluator(config, suite=suite, base_dir=loaded.base_dir, source=loaded.source,
                                rewards=loaded.rewards, fit_on=fit_on, host=host, progress=progress)
    models = evaluator.models
    started = time.perf_counter()
    if progress is not None:
        progress(f"FAR search: {settings.method}, budget {settings.budget}, space of {loaded.space.grid_size()} "
                 f"grid points; suite {suite.name} (train {len(suite.scenarios('train'))}, holdout "
                 f"{len(suite.scenarios('holdout'))}); "
                 + ("columnar engine" if config.engine == "columnar" else f"{settings.actors} rollout actors"))
    run, proposer, actor_nodes = run_trials(loaded, evaluator, host, resume, tune_progress)
    if not run.trials:
        raise FarInputError("no trial finished: see the Tune log above", field="search")
    if run.failed and progress is not None:
        progress(f"warning: {run.failed} trial(s) failed after {settings.trial_retries} retries and are left out")
    if run.rescued and progress is not None:
        progress(f"note: {run.rescued} trial(s) that Tune ended in error (a lost node) were evaluated again here")

    board = build_leaderboard(run.trials, evaluator, config.gate, settings.top_k)
    leaderboard = board.entries()
    results = [r for pair in zip(board.train, board.holdout) for r in pair]
    chosen = board.winner_index
    winner, winner_train, winner_holdout, winner_gate = (board.policies[chosen], board.train[chosen],
                                                         board.holdout[chosen], board.gates[chosen])
    holdout_size = len(suite.scenarios("holdout"))
    no_deploy = advice(board, config.gate, holdout_size)
    front = front_rows(run.trials)

    # beside every verdict an oracle made, or that models fitted on unlike data made
    mark = f" [{winner_holdout.mark}]" if winner_holdout.oracle or winner_holdout.shift else ""
    lines = ["", f"{len(run.trials)} trials in {run.seconds:.1f}s. Top {len(board.policies)} on train "
             f"({RANKING_WORDS}), re-evaluated on holdout:",
             results_table(results), ""]
    for row in leaderboard:
        lines.append(f"  {row['rank']}. {row['policy']}: train critical {row['train_critical']}, holdout critical "
                     f"{row['holdout_critical']}, reward/scn train {row['train_reward/scn']} vs holdout "
                     f"{row['holdout_reward/scn']} (gap {row['gap_reward/scn']}), cost/scn holdout "
                     f"{row['holdout_cost/scn']}, benign refused {pct(row['holdout_refused'])} / done "
                     f"{pct(row['holdout_benign_done'])} holdout, {row['gate']}{mark}")
    if board.deployable:
        lines.append(f"\nWinner (the best on train that passes the gate on holdout): rank{chosen + 1}, "
                     f"{winner.short()}\nGate on holdout: DEPLOY{mark} -- {winner_gate.reason}")
    else:
        lines += [f"\nNo policy found passes the gate on holdout; best on train: {winner.short()}\n"
                  f"Gate on holdout: NO-DEPLOY{mark} -- {winner_gate.reason}", "\nWhat failed, and what would deploy:",
                  *(f"  {line}" for line in no_deploy),
                  "\nCritical failures vs cost and over-refusal on train, the front of what was found:",
                  front_table(front)]
    lines += ["\nThe winner's rules, in words:", *(f"  {line}" for line in winner.rules_in_words()),
              "\nWhat the winner's parameters stopped or rerouted on holdout (harmful: the judge's labels):",
              effects_table(board.effects[chosen]),
              "\nReward lost on train by failure and deciding parameter, winner:", attribution_table(winner_train)]
    if run.searcher_counts:
        lines.append(f"\nLLM proposals: {run.searcher_counts}")

    out = loaded.output
    trial_rows = [{"trial_id": t.trial_id, "order": i, **{f"param_{k}": v for k, v in t.params.items()},
                   **{k: v for k, v in t.metrics.items() if isinstance(v, (int, float, str, bool))},
                   "oracle": ",".join(models.oracle_roles)}  # "" = no model read the labels
                  for i, t in enumerate(run.trials)]
    write_parquet_atomic(out / "trials.parquet", pa.Table.from_pylist(trial_rows))
    write_parquet_atomic(out / "rollouts.parquet", pa.Table.from_pylist(board.rows))
    write_parquet_atomic(out / "policy_results.parquet", pa.Table.from_pylist([r.row() for r in results]))
    calls_stats = models.cache_stats()
    if proposer is not None:  # the LLM searcher's calls count like any other model's
        if isinstance(proposer, CachedLM):
            asked = {"hits": proposer.stats.hits, "misses": proposer.stats.misses}
        else:
            asked = {"hits": 0, "misses": run.searcher_counts.get("proposed", 0)}
        calls_stats = {"hits": calls_stats["hits"] + asked["hits"], "misses": calls_stats["misses"] + asked["misses"],
                       "calls_made": calls_stats["calls_made"] + asked["misses"],
                       "proposer": {**asked, "calls_made": asked["misses"]}}
    summary: dict[str, Any] = {
        "command": "search",
        "config_file": loaded.source,
        "config": loaded.raw,
        "search": settings.model_dump(),
        "suite": suite.describe(),
        "splits": split_manifest(suite),
        "models": {**{k: v for k, v in models.describe().items() if k != "model_calls"},  # in run_stats.json
                   "fit": evaluator.fit_report},
        "engine": config.engine,
        "trials": len(run.trials),
        "failed_trials": run.failed,
        "searcher": run.searcher_counts,
        "winner": {"policy": winner.model_dump(mode="json"), "rank": chosen + 1, "deployable": board.deployable,
                   "rules": winner.rules_in_words(), "rule_effects_holdout": board.effects[chosen],
                   "train": winner_train.model_dump(mode="json"), "holdout": winner_holdout.model_dump(mode="json")},
        "oracle": list(models.oracle_roles),  # non-empty: every figure here came from label-reading models
        "shift": evaluator.shift_note or None,  # SHIFTED (...): the models were fitted on data unlike holdout
        "gate": {**winner_gate.to_dict(), "oracle": list(winner_holdout.oracle),
                 "shift": evaluator.shift_note or None},
        "no_deploy": {"advice": no_deploy, "tradeoff_front": front} if not board.deployable else None,
        "leaderboard": leaderboard,
        "gates": [v.to_dict() for v in board.gates],
        "seeds": {"search": settings.seed, "suite": config.suite.model_dump().get("seed")},
        "versions": versions(),
    }
    # summary.json holds no figure of this run's circumstances (time, a warm cache): same config and seed, same file
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "policy.json", policy_file(winner, loaded.raw.get("models") or {}, models, suite.name,
                                                        board.deployable, winner_holdout, winner_gate.to_dict()))
    import ray

    placement = {"cluster_nodes": sum(node["Alive"] for node in ray.nodes()),
                 "rollout_actor_nodes": actor_nodes,
                 "trial_nodes": sorted({t.metrics.get("node", "") for t in run.trials})}
    write_json_atomic(out / "run_stats.json", {"seconds": round(time.perf_counter() - started, 3),
                                               "tune_seconds": round(run.seconds, 3), "model_calls": calls_stats,
                                               "rescued_trials": run.rescued,
                                               **placement})
    write_text_atomic(out / "report.html", render(f"FAR search: {settings.method}", summary, run.trials,
                                                  leaderboard, winner_train, winner_holdout,
                                                  Constraints.from_gate(config.gate)))
    lines += [f"\nModel calls: {calls_stats['calls_made']} made, {calls_stats['hits']} answered from the cache",
              f"Results: {out}/ (policy.json: the winner for a runtime guard, far.Guard.load; summary.json, "
              "trials.parquet, rollouts.parquet, policy_results.parquet, report.html, run_stats.json, tune/)"]
    return SearchResult(out, winner, board.deployable, winner_gate, winner_train, winner_holdout, leaderboard,
                        list(run.trials), summary, "\n".join(lines), [] if board.deployable else no_deploy)


def run_calibrate(config: str | Path, output: str | Path, *, folds: int = 5, confidence: float = 0.95,
                  progress: Progress | None = None) -> tuple[Any, str]:
    """``far calibrate``: measure the config's real edge and cloud on train (out-of-fold) and write the
    calibration file the ``calibrated`` backends read. Returns the calibration and its table."""
    from far.models.backends import build_models
    from far.rollout.io import write_json_atomic
    from far.search.evaluation.calibrate import calibrate, calibration_table

    if folds < 2:
        raise FarInputError("needs at least 2 folds", field="--folds")
    if not 0.0 < confidence < 1.0:
        raise FarInputError("must be in (0, 1)", field="--confidence")
    output = Path(output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    loaded: LoadedRunConfig = load_run_config(config)
    run_config = loaded.config
    if run_config.models.uses_actors():
        raise FarInputError("far calibrate runs its models in this process: set actor: false", file=loaded.source,
                            field="models")
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(run_config.models, loaded.source, suite, fit_on, "calibrate")
    models = build_models(run_config.models, None, loaded.base_dir)
    calibration = calibrate(suite, models, folds, confidence, progress, fit_on)
    write_json_atomic(output, calibration.model_dump(mode="json"))
    return calibration, calibration_table(calibration)


def import_scenarios(file: str | Path, output: str | Path, *, suite: str | None = None, seed: int = 0,
                     holdout_fraction: float = 0.3, eval_only: bool = False,
                     progress: Progress | None = None) -> Any:
    """``far import-scenarios``: a JSONL file of scenarios to Parquet (malformed lines are skipped and listed in
    the answer's ``errors``; a file with no valid line is an error). Returns the import."""
    from far.rollout.scenario import save_scenarios
    from far.suites.imported import import_jsonl

    output = Path(output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    imported = import_jsonl(file, suite=suite, seed=seed, holdout_fraction=holdout_fraction, eval_only=eval_only,
                            progress=progress)
    if progress is not None:
        for error in imported.errors:
            progress(f"far: skipped {error}")
    if not imported.scenarios:
        raise FarInputError("no valid scenario in the file", file=file)
    save_scenarios(output, imported.scenarios)
    return imported
