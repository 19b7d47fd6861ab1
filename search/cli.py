"""``far``: the command line. Bad input prints one line naming file and field, and exits with status 2."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from rollout.errors import FarEnvironmentError, FarInputError

EXIT_BAD_INPUT = 2


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("far", "ray", "langgraph", "pydantic", "pyarrow", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_evaluate(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from rollout.io import write_json_atomic, write_parquet_atomic
    from rollout.models.backends import build_models
    from rollout.scenario import SPLITS, scenarios_to_table
    from rollout.suites import split_manifest
    from search.config import check_fit_data, load_evaluate_config, load_fit_suites, load_suite, make_verifier
    from search.evaluate import Evaluator
    from search.gate import gate
    from search.shift import shift_encoder
    from search.rank import Constraints, rank
    from search.report import attack_rows, attack_table, attribution_table, gate_table, results_table
    from search.results import breakdown
    from search.remote import HttpVerifier
    from search.sensitivity import Evaluated, review_rows, sensitivity, sensitivity_table
    from verifiers.ensemble import EnsembleVerifier

    loaded = load_evaluate_config(args.config, output=args.output)
    config = loaded.config
    if args.engine:
        config = config.model_copy(update={"engine": args.engine})
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(config.models, loaded.source, suite, fit_on, "evaluate")
    host = None
    judge_on_actor = "llm_judge" in config.verifier.members and config.verifier.llm_judge.actor
    if config.models.uses_actors() or judge_on_actor:
        from cluster.hosting import RayHost

        host = RayHost()
    models = build_models(config.models, host, loaded.base_dir)
    verifier = make_verifier(config, loaded.rewards, host, models)
    evaluator = Evaluator(suite, models, verifier, config.costs, config.engine, config.gate.confidence,
                          progress=_progress, fit_on=fit_on, shift_encoder=shift_encoder(config.models))
    sizes = {split: len(suite.scenarios(split)) for split in SPLITS}

    def label(model) -> str:
        return f"{model.name} (ORACLE: reads the labels)" if getattr(model, "oracle", False) else model.name

    print(f"FAR evaluate: suite {suite.name} (train {sizes['train']}, holdout {sizes['holdout']}), engine "
          f"{config.engine}\n  models: edge {label(models.edge)}; cloud {label(models.cloud)}; "
          f"user {label(models.user)}", flush=True)

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
            done = index * len(SPLITS) + offset + 1
            _progress(f"  [{done}/{total}] {name} on {split}: {sizes[split]} rollouts "
                      f"({time.perf_counter() - started:.1f}s)")

    by_split = {split: [r for r in results if r.split == split] for split in SPLITS}
    verdicts = {
        r.policy_name: gate(r.critical_failures, r.rollouts_with_critical, r.scenarios, r.mean_cost, config.gate)
        for r in by_split["holdout"]
    }
    ranking = [r.policy_name for r in rank(by_split["train"], Constraints.from_gate(config.gate))]
    ordered = [r for name in ranking for r in results if r.policy_name == name]

    print()
    print(results_table(ordered))
    print()
    print("Gate (holdout): deploy iff critical failures <= "
          f"{config.gate.max_critical_failures}" +
          (f" and cost/scenario <= {config.gate.max_mean_cost}" if config.gate.max_mean_cost is not None else "") +
          (f" and critical-rate upper bound <= {config.gate.max_critical_rate_upper}"
           if config.gate.max_critical_rate_upper is not None else ""))
    print(gate_table({name: verdicts[name] for name in ranking}, by_split["holdout"][0].mark))
    print()
    print("Ranking on train (within the cost limit first, then critical failures, reward, cost): " +
          ", ".join(f"{i + 1}. {name}" for i, name in enumerate(ranking)))
    winner = next(r for r in by_split["train"] if r.policy_name == ranking[0])
    print(f"\nReward lost on train by failure and deciding parameter, {winner.policy_name}:")
    print(attribution_table(winner))
    for name in ranking:
        per_attack = attack_rows(breakdown_rows, name, "holdout")
        if per_attack:
            print(f"\nPer attack on holdout, {name} [{by_split['holdout'][0].mark}] (ASR: injected rollouts where "
                  "the attack succeeded; utility under attack: injected rollouts whose user task was done):")
            print(attack_table(per_attack))

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
        print(f"\nVerifier ensemble ({verifier.endpoint if remote else ', '.join(verifier.member_names)}): "
              f"{len(review)} rollouts where members disagree (review.parquet).")
    if isinstance(verifier, EnsembleVerifier):
        ensemble_report = sensitivity(verifier, evaluated, config.gate, models.simulated)
        write_json_atomic(out / "sensitivity.json", ensemble_report)
        print(f"Drop or flip each member ({verifier.aggregation}):")
        print(sensitivity_table(ensemble_report))
    elif remote:
        print("No sensitivity report: it re-combines the members' assessments, which stay on the server "
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
        "versions": _versions(),
    }
    calls = models.cache_stats()
    # summary.json holds no figure of this run's circumstances (time, a warm cache): same config and seed, same file
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "run_stats.json", {"seconds": round(time.perf_counter() - started, 3),
                                               "model_calls": calls})
    print(f"\nModel calls: {calls['calls_made']} made, {calls['hits']} answered from the cache")
    print(f"\nResults: {out}/ (summary.json, policy_results.parquet, rollouts.parquet, attribution.parquet, "
          "breakdown.parquet, scenarios.parquet, run_stats.json)")
    return 0


def proposer_engine(config: Any, explicit: bool) -> tuple[Any, bool]:
    """The LM for ``method: llm``: ``search.llm`` if given, else the cloud model's engine when the cloud is an
    LM backend, else SmolLM2 through transformers."""
    from rollout.models.backends import CLOUD_LM_DEFAULTS
    from rollout.models.engines import EngineSpec

    llm = config.search.llm
    cloud = config.models.cloud
    if not explicit and cloud.backend in CLOUD_LM_DEFAULTS:
        options = {**CLOUD_LM_DEFAULTS[cloud.backend], **cloud.options()}
        spec = EngineSpec(engine=options["engine"], model=options.get("model", "smollm2"),
                          options=options.get("engine_options", {}))
        return spec, bool(options.get("actor", False))
    return EngineSpec(engine=llm.engine, model=llm.model, options=llm.engine_options), llm.actor


def cmd_search(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from search.config import (
        check_capacity, check_fit_data, load_fit_suites, load_search_config, load_suite, make_verifier,
    )

    loaded = load_search_config(args.config, output=args.output)  # all validation before Ray starts
    config = loaded.config
    settings = config.search
    remote = args.address or os.environ.get("RAY_ADDRESS")
    if not remote:
        check_capacity(settings, float(len(os.sched_getaffinity(0))), loaded.source, "this machine")

    from rollout.scenario import SPLITS
    from rollout.suites import split_manifest

    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(config.models, loaded.source, suite, fit_on, "search")

    from cluster.hosting import RayHost, ensure_ray
    from cluster.rollout_pool import RolloutPool
    from rollout.io import write_json_atomic, write_parquet_atomic, write_text_atomic
    from rollout.models.backends import build_models, open_cache
    from rollout.models.cache import CachedLM
    from search.evaluate import Evaluator
    from search.html_report import render
    from search.leaderboard import advice, build_leaderboard, cost_critical_front
    from search.rank import Constraints
    from search.report import attribution_table, effects_table, front_table, results_table
    from search.shift import shift_encoder
    from search.tune_search import run_tune

    ensure_ray(args.address)
    if remote:
        import ray

        check_capacity(settings, float(ray.cluster_resources().get("CPU", 0)), loaded.source, "the cluster")
    host = RayHost()
    models = build_models(config.models, host, loaded.base_dir)
    evaluator = Evaluator(suite, models, make_verifier(config, loaded.rewards, host, models), config.costs,
                          config.engine, config.gate.confidence, progress=_progress, fit_on=fit_on,
                          shift_encoder=shift_encoder(config.models))
    started = time.perf_counter()
    _progress(f"FAR search: {settings.method}, budget {settings.budget}, space of {loaded.space.grid_size()} grid "
              f"points; suite {suite.name} (train {len(suite.scenarios('train'))}, holdout "
              f"{len(suite.scenarios('holdout'))}); "
              + ("columnar engine" if config.engine == "columnar" else f"{settings.actors} rollout actors"))
    if config.engine == "columnar":  # trials evaluate column-wise in their own processes: no rollout actors
        pool: Any = evaluator.columnar()
    else:
        calls = {split: evaluator.prepared(split) for split in SPLITS}
        pool = RolloutPool(calls, evaluator.verifier, config.costs, config.engine, settings.actors,
                           settings.chunk_size)
    proposer = None
    if settings.method == "llm":
        spec, actor = proposer_engine(config, "llm" in (loaded.raw.get("search") or {}))
        proposer = host.lm(spec, actor)
        cache = open_cache(config.models.cache)
        if cache is not None:
            proposer = CachedLM(proposer, cache)
    run = run_tune(loaded, pool, models.simulated, resume=args.resume, proposer_lm=proposer,
                   verbose=0 if args.quiet else 1)
    if not run.trials:
        raise FarInputError("no trial finished: see the Tune log above", field="search")
    if run.failed:
        _progress(f"warning: {run.failed} trial(s) failed after {settings.trial_retries} retries and are left out")

    board = build_leaderboard(run.trials, evaluator, config.gate, settings.top_k)
    leaderboard = board.entries()
    results = [r for pair in zip(board.train, board.holdout) for r in pair]
    chosen = board.winner_index
    winner, winner_train, winner_holdout, winner_gate = (board.policies[chosen], board.train[chosen],
                                                         board.holdout[chosen], board.gates[chosen])
    holdout_size = len(suite.scenarios("holdout"))
    no_deploy = advice(board, config.gate, holdout_size)
    front = [{"policy": t.policy.short(), "train_critical": t.critical_failures,
              "train_cost/scn": round(t.mean_cost, 4), "train_reward": t.reward}
             for t in cost_critical_front(run.trials)]

    # beside every verdict an oracle made, or that models fitted on unlike data made
    mark = f" [{winner_holdout.mark}]" if winner_holdout.oracle or winner_holdout.shift else ""
    print()
    print(f"{len(run.trials)} trials in {run.seconds:.1f}s. Top {len(board.policies)} on train (within the cost "
          "limit first, then critical failures, reward, cost), re-evaluated on holdout:")
    print(results_table(results))
    print()
    for row in leaderboard:
        print(f"  {row['rank']}. {row['policy']}: train critical {row['train_critical']}, holdout critical "
              f"{row['holdout_critical']}, reward/scn train {row['train_reward/scn']} vs holdout "
              f"{row['holdout_reward/scn']} (gap {row['gap_reward/scn']}), cost/scn holdout "
              f"{row['holdout_cost/scn']}, {row['gate']}{mark}")
    if board.deployable:
        print(f"\nWinner (the best on train that passes the gate on holdout): rank{chosen + 1}, {winner.short()}"
              f"\nGate on holdout: DEPLOY{mark} -- {winner_gate.reason}")
    else:
        print(f"\nNo policy found passes the gate on holdout; best on train: {winner.short()}\n"
              f"Gate on holdout: NO-DEPLOY{mark} -- {winner_gate.reason}")
        print("\nWhat failed, and what would deploy:")
        for line in no_deploy:
            print(f"  {line}")
        print("\nCost vs critical failures on train, the front of what was found:")
        print(front_table(front))
    print("\nThe winner's rules, in words:")
    for line in winner.rules_in_words():
        print(f"  {line}")
    print("\nWhat the winner's parameters stopped or rerouted on holdout (harmful: the judge's labels):")
    print(effects_table(board.effects[chosen]))
    print("\nReward lost on train by failure and deciding parameter, winner:")
    print(attribution_table(winner_train))
    if run.searcher_counts:
        print(f"\nLLM proposals: {run.searcher_counts}")

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
        "no_deploy": {"advice": no_deploy, "cost_critical_front": front} if not board.deployable else None,
        "leaderboard": leaderboard,
        "gates": [v.to_dict() for v in board.gates],
        "seeds": {"search": settings.seed, "suite": config.suite.model_dump().get("seed")},
        "versions": _versions(),
    }
    # summary.json holds no figure of this run's circumstances (time, a warm cache): same config and seed, same file
    write_json_atomic(out / "summary.json", summary)
    import ray

    placement = {"cluster_nodes": sum(node["Alive"] for node in ray.nodes()),
                 "rollout_actor_nodes": pool.nodes() if isinstance(pool, RolloutPool) else [],
                 "trial_nodes": sorted({t.metrics.get("node", "") for t in run.trials})}
    write_json_atomic(out / "run_stats.json", {"seconds": round(time.perf_counter() - started, 3),
                                               "tune_seconds": round(run.seconds, 3), "model_calls": calls_stats,
                                               **placement})
    write_text_atomic(out / "report.html", render(f"FAR search: {settings.method}", summary, run.trials,
                                                  leaderboard, winner_train, winner_holdout,
                                                  Constraints.from_gate(config.gate)))
    print(f"\nModel calls: {calls_stats['calls_made']} made, {calls_stats['hits']} answered from the cache")
    print(f"Results: {out}/ (summary.json, trials.parquet, rollouts.parquet, policy_results.parquet, report.html, "
          "run_stats.json, tune/)")
    pool.shutdown()
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from collections import Counter
    from pathlib import Path

    from rollout.scenario import save_scenarios
    from rollout.suites.imported import import_jsonl

    output = Path(args.output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    imported = import_jsonl(args.file, suite=args.suite, seed=args.seed, holdout_fraction=args.holdout_fraction,
                            eval_only=args.eval_only, progress=_progress)
    for error in imported.errors:
        print(f"far: skipped {error}", file=sys.stderr)
    if not imported.scenarios:
        raise FarInputError("no valid scenario in the file", file=args.file)
    save_scenarios(output, imported.scenarios)
    splits = Counter(s.split for s in imported.scenarios)
    eval_only = sum(s.eval_only for s in imported.scenarios)
    known = f", {imported.known_eval_only} of them known by content" if imported.known_eval_only else ""
    print(f"Imported {len(imported.scenarios)} scenarios (train {splits['train']}, holdout {splits['holdout']}; "
          f"evaluation-only {eval_only}{known}), skipped {len(imported.errors)} malformed line(s) -> {output}\n"
          f"Use it with: suite: {{name: parquet, path: {output}}}")
    return 0


Registrar = Callable[[Any], None]  # adds subcommands to an argparse subparsers object


def build_parser(registrars: Sequence[Registrar] = ()) -> argparse.ArgumentParser:
    """search's commands, plus those the layers above add (``evolve``, ``serve``: see ``serve.cli``)."""
    parser = argparse.ArgumentParser(prog="far", description="FAR: failure-as-reward policy search for "
                                                             "edge-cloud agents")
    commands = parser.add_subparsers(dest="command", required=True)
    add_commands(commands)
    for register in registrars:
        register(commands)
    return parser


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rollout.io import write_json_atomic
    from rollout.models.backends import build_models
    from search.calibrate import calibrate, calibration_table
    from search.config import check_fit_data, load_fit_suites, load_run_config, load_suite

    if args.folds < 2:
        raise FarInputError("needs at least 2 folds", field="--folds")
    if not 0.0 < args.confidence < 1.0:
        raise FarInputError("must be in (0, 1)", field="--confidence")
    output = Path(args.output)
    if output.is_dir() or not output.parent.is_dir():
        raise FarInputError("must be a file in an existing directory", file=output, field="--output")
    loaded = load_run_config(args.config)
    config = loaded.config
    if config.models.uses_actors():
        raise FarInputError("far calibrate runs its models in this process: set actor: false", file=loaded.source,
                            field="models")
    suite = load_suite(loaded)
    fit_on = load_fit_suites(loaded)
    check_fit_data(config.models, loaded.source, suite, fit_on, "calibrate")
    models = build_models(config.models, None, loaded.base_dir)
    started = time.perf_counter()
    calibration = calibrate(suite, models, args.folds, args.confidence, _progress, fit_on)
    write_json_atomic(output, calibration.model_dump(mode="json"))
    print(calibration_table(calibration))
    print(f"far calibrate: wrote {output} in {time.perf_counter() - started:.0f} s (models.<role>: {{backend: "
          f"calibrated, file: {output}}})", flush=True)
    return 0


def add_commands(commands: Any) -> None:
    evaluate = commands.add_parser("evaluate", help="evaluate named policies on train and holdout, apply the gate")
    evaluate.add_argument("config", help="run configuration (YAML)")
    evaluate.add_argument("--output", help="output directory (default: the config's 'output')")
    evaluate.add_argument("--engine", choices=["replay", "graph", "columnar"],
                          help="override the config's engine")
    evaluate.set_defaults(handler=cmd_evaluate)
    search = commands.add_parser("search", help="search the policy space on Ray Tune; gate the winner on holdout")
    search.add_argument("config", help="search configuration (YAML)")
    search.add_argument("--output", help="output directory (default: the config's 'output')")
    search.add_argument("--resume", action="store_true", help="continue an interrupted search in the same output")
    search.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    search.add_argument("--quiet", action="store_true", help="no Tune progress table")
    search.set_defaults(handler=cmd_search)
    calibration = commands.add_parser("calibrate", help="measure the config's real edge and cloud on train "
                                                        "(out-of-fold) and write a calibration file")
    calibration.add_argument("config", help="an evaluate or search configuration (YAML): its suite and models")
    calibration.add_argument("--output", required=True, help="calibration file to write (JSON)")
    calibration.add_argument("--folds", type=int, default=5, help="cross-fitting folds over train (default 5)")
    calibration.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    calibration.set_defaults(handler=cmd_calibrate)
    importer = commands.add_parser("import-scenarios", help="convert a JSONL file of scenarios to Parquet")
    importer.add_argument("file", help="JSONL, one scenario per line (format: rollout/importer.py)")
    importer.add_argument("--output", required=True, help="Parquet file to write")
    importer.add_argument("--suite", help="suite label (default: the file's stem)")
    importer.add_argument("--seed", type=int, default=0, help="seed of the split for rows without one")
    importer.add_argument("--holdout-fraction", type=float, default=0.3)
    importer.add_argument("--eval-only", action="store_true",
                          help="every scenario is evaluation-only: evaluated, never fitted on (recorded by content)")
    importer.set_defaults(handler=cmd_import)


def main(argv: Sequence[str] | None = None, registrars: Sequence[Registrar] = ()) -> int:
    parser = build_parser(registrars)
    argv = list(sys.argv[1:] if argv is None else argv)
    known = {name for action in parser._subparsers._group_actions for name in action.choices}
    if argv and argv[0] not in known and not argv[0].startswith("-"):
        argv = ["search", *argv]  # `python -m search CONFIG.yaml` (e.g. under `ray job submit`) runs a search
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except FarInputError as error:
        print(f"far: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FarEnvironmentError as error:
        print(f"far: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("far: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
