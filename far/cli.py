"""``far``: the command line. Each command parses its arguments and calls one job (``far``'s
exports); bad input prints one line naming file and field, and exits with status 2."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from far.rollout.errors import FarEnvironmentError, FarInputError

EXIT_BAD_INPUT = 2


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from far.search.jobs.evaluate_job import run_evaluate

    print(run_evaluate(args.config, output=args.output, engine=args.engine, progress=progress).report)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from far.search.jobs.search_job import run_search

    print(run_search(args.config, output=args.output, resume=args.resume, address=args.address,
                     tune_progress=not args.quiet, progress=progress).report)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from far.search.jobs.calibrate_job import run_calibrate

    _, table = run_calibrate(args.config, args.output, folds=args.folds, confidence=args.confidence,
                             progress=progress)
    print(f"{table}\nfar calibrate: wrote {args.output} (models.<role>: {{backend: calibrated, file: "
          f"{args.output}}})", flush=True)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from collections import Counter

    from far.search.jobs.import_job import import_scenarios

    imported = import_scenarios(args.file, args.output, suite=args.suite, seed=args.seed,
                                holdout_fraction=args.holdout_fraction, eval_only=args.eval_only, progress=progress)
    splits = Counter(s.split for s in imported.scenarios)
    eval_only = sum(s.eval_only for s in imported.scenarios)
    known = f", {imported.known_eval_only} of them known by content" if imported.known_eval_only else ""
    print(f"Imported {len(imported.scenarios)} scenarios (train {splits['train']}, holdout {splits['holdout']}; "
          f"evaluation-only {eval_only}{known}), skipped {len(imported.errors)} malformed line(s) -> {args.output}\n"
          f"Use it with: suite: {{name: parquet, path: {args.output}}}")
    return 0


def cmd_dry_run(args: argparse.Namespace) -> int:
    from far.search.jobs.dry_run import dry_run

    print(dry_run(args.policy, args.traces, audit_log=args.audit_log, output=args.output,
                  progress=progress).report())
    return 0


def cmd_evolve(args: argparse.Namespace) -> int:
    from far.evolve.loop import run_evolve

    summary = run_evolve(args.config, args.output, progress=progress)
    kept, output = summary["kept_round"], summary["output"]
    print(f"FAR evolve: {len(summary['rounds']) - 1} round(s), stopped: {summary['stopped']}. The model to ship: "
          + (f"round {kept}'s LoRA adapter, {output}/{summary['kept_adapter']}/. " if kept else
             "the base model (no round beat it on the check slice). ") + f"Results: {output}/ "
          "(rounds.parquet, rounds_by_category.parquet, replay_buffer_round*.parquet, adapter_round*/, "
          "report.html, summary.json)")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from far.serve.service import run_service

    return run_service(args.config, host=args.host, port=args.port, address=args.address, once=args.once)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="far", description="FAR: failure-as-reward policy search for "
                                                             "edge-cloud agents")
    commands = parser.add_subparsers(dest="command", required=True)
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
    importer.add_argument("file", help="JSONL, one scenario per line (format: docs/suites.md)")
    importer.add_argument("--output", required=True, help="Parquet file to write")
    importer.add_argument("--suite", help="suite label (default: the file's stem)")
    importer.add_argument("--seed", type=int, default=0, help="seed of the split for rows without one")
    importer.add_argument("--holdout-fraction", type=float, default=0.3)
    importer.add_argument("--eval-only", action="store_true",
                          help="every scenario is evaluation-only: evaluated, never fitted on (recorded by content)")
    importer.set_defaults(handler=cmd_import)
    dry = commands.add_parser("dry-run", help="would a policy file's guard have fired on these logged agent runs? "
                                              "(shadow mode: decides every call, runs none)")
    dry.add_argument("policy", help="policy file (far search's policy.json)")
    dry.add_argument("traces", help="JSONL of traces or scenarios, as far import-scenarios reads (docs/suites.md)")
    dry.add_argument("--audit-log", help="append every decision to this audit log (JSONL)")
    dry.add_argument("--output", help="also write the counts and the stopped calls here (JSON)")
    dry.set_defaults(handler=cmd_dry_run)
    evolve = commands.add_parser("evolve", help="FATE: improve the edge model from its own failures "
                                                "(repairs, Pareto-front SFT, PFPO), in rounds")
    evolve.add_argument("config", help="evolve configuration (YAML), e.g. configs/evolve.yaml")
    evolve.add_argument("--output", help="output directory (default: the config's 'output')")
    evolve.set_defaults(handler=cmd_evolve)
    serve = commands.add_parser("serve", help="serve the verifier ensemble and policy scoring over REST "
                                              "(Ray Serve)")
    serve.add_argument("config", help="serve configuration (YAML), e.g. configs/serve.yaml")
    serve.add_argument("--host", help="override the config's bind address")
    serve.add_argument("--port", type=int, help="override the config's port")
    serve.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    serve.add_argument("--once", action="store_true", help="start, print the URL and return (the app keeps "
                                                            "running on the Ray cluster)")
    serve.set_defaults(handler=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    known = {name for action in parser._subparsers._group_actions for name in action.choices}
    if argv and argv[0] not in known and not argv[0].startswith("-"):
        argv = ["search", *argv]  # `python -m far CONFIG.yaml` (e.g. under `ray job submit`) runs a search
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
