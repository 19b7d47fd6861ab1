"""``far``: the command line. Bad input prints one line naming file and field, and exits with status 2."""
from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from rollout.errors import FarInputError

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

    from rollout.backends import build_models
    from rollout.io import write_json_atomic, write_parquet_atomic
    from rollout.scenario import SPLITS, scenarios_to_table
    from rollout.suites import build_suite, split_manifest
    from search.config import load_evaluate_config
    from search.evaluate import Evaluator
    from search.gate import gate
    from search.rank import rank
    from search.report import attribution_table, gate_table, results_table
    from verifiers.rules import RuleVerifier

    loaded = load_evaluate_config(args.config, output=args.output)
    config = loaded.config
    if args.engine:
        config = config.model_copy(update={"engine": args.engine})
    suite = build_suite(config.suite, loaded.base_dir)
    host = None
    if config.models.uses_actors():
        from cluster.hosting import RayHost

        host = RayHost()
    models = build_models(config.models, host)
    evaluator = Evaluator(suite, models, RuleVerifier(loaded.rewards), config.costs, config.engine,
                          config.gate.confidence, progress=_progress)
    sizes = {split: len(suite.scenarios(split)) for split in SPLITS}
    for split, size in sizes.items():
        if size == 0:
            raise FarInputError(f"the {split} split is empty: train and holdout both need scenarios "
                                "(raise suite.size or change suite.holdout_fraction)", file=loaded.source,
                                field="suite")
    def label(model) -> str:
        return f"{model.name} (SIMULATED)" if getattr(model, "simulated", True) else model.name

    print(f"FAR evaluate: suite {suite.name} (train {sizes['train']}, holdout {sizes['holdout']}), engine "
          f"{config.engine}\n  models: edge {label(models.edge)}; cloud {label(models.cloud)}; "
          f"user {label(models.user)}", flush=True)

    started = time.perf_counter()
    results, rows = [], []
    total = len(loaded.policies) * len(SPLITS)
    for index, (name, policy) in enumerate(loaded.policies.items()):
        for offset, split in enumerate(SPLITS):
            evaluation = evaluator.evaluate(name, policy, split, with_rows=True)
            results.append(evaluation.result)
            rows.extend(evaluation.rows)
            done = index * len(SPLITS) + offset + 1
            _progress(f"  [{done}/{total}] {name} on {split}: {sizes[split]} rollouts "
                      f"({time.perf_counter() - started:.1f}s)")

    by_split = {split: [r for r in results if r.split == split] for split in SPLITS}
    verdicts = {
        r.policy_name: gate(r.critical_failures, r.rollouts_with_critical, r.scenarios, r.mean_cost, config.gate)
        for r in by_split["holdout"]
    }
    ranking = [r.policy_name for r in rank(by_split["train"])]
    ordered = [r for name in ranking for r in results if r.policy_name == name]

    print()
    print(results_table(ordered))
    print()
    print("Gate (holdout): deploy iff critical failures <= "
          f"{config.gate.max_critical_failures}" +
          (f" and cost/scenario <= {config.gate.max_mean_cost}" if config.gate.max_mean_cost is not None else "") +
          (f" and critical-rate upper bound <= {config.gate.max_critical_rate_upper}"
           if config.gate.max_critical_rate_upper is not None else ""))
    print(gate_table({name: verdicts[name] for name in ranking}))
    print()
    print("Ranking on train (critical failures, then reward, then cost): " +
          ", ".join(f"{i + 1}. {name}" for i, name in enumerate(ranking)))
    winner = next(r for r in by_split["train"] if r.policy_name == ranking[0])
    print(f"\nReward lost on train by failure and deciding parameter, {winner.policy_name}:")
    print(attribution_table(winner))

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
    write_parquet_atomic(out / "attribution.parquet", pa.Table.from_pylist(attribution_rows) if attribution_rows
                         else pa.table({"policy": pa.array([], pa.string())}))
    summary: dict[str, Any] = {
        "command": "evaluate",
        "config_file": loaded.source,
        "config": loaded.raw,
        "suite": suite.describe(),
        "splits": split_manifest(suite),
        "models": models.describe(),
        "engine": config.engine,
        "rewards": loaded.rewards.model_dump(mode="json"),
        "gate_config": config.gate.model_dump(),
        "policies": {name: p.model_dump(mode="json") for name, p in loaded.policies.items()},
        "results": [r.model_dump(mode="json") for r in results],
        "gate": {name: v.to_dict() for name, v in verdicts.items()},
        "ranking_train": ranking,
        "versions": _versions(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    write_json_atomic(out / "summary.json", summary)
    calls = models.cache_stats()
    print(f"\nModel calls: {calls['calls_made']} made, {calls['hits']} answered from the cache")
    print(f"\nResults: {out}/ (summary.json, policy_results.parquet, rollouts.parquet, attribution.parquet, "
          "scenarios.parquet)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="far", description="FAR: failure-as-reward policy search for "
                                                             "edge-cloud agents")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser("evaluate", help="evaluate named policies on train and holdout, apply the gate")
    evaluate.add_argument("config", help="run configuration (YAML)")
    evaluate.add_argument("--output", help="output directory (default: the config's 'output')")
    evaluate.add_argument("--engine", choices=["replay", "graph"], help="override the config's engine")
    evaluate.set_defaults(handler=cmd_evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except FarInputError as error:
        print(f"far: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("far: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
