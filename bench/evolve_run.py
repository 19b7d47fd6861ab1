"""A finished ``far evolve`` run named on a bench script's command line: its folder, the config it read and the
rounds to replay, checked before any model loads (one line and exit 2 on a bad one, as argparse does)."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FinishedRun:
    folder: Path
    config: Path
    summary: dict[str, Any]
    rounds: list[int]  # ascending: round 0, the base model, first


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a far evolve output folder with summary.json")
    parser.add_argument("--rounds", default=None, help="comma-separated rounds (default: every saved one)")
    parser.add_argument("--config", type=Path, default=None, help="the run's config (default: <run>.yaml beside it)")


def finished_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> FinishedRun:
    """The run, its config (``--config``, or ``<run>.yaml`` beside it, as bench_evolve.py writes) and the rounds
    asked for (``--rounds``; default: round 0 and every saved ``adapter_round<t>/``)."""
    run = args.run.resolve()
    config_path = args.config or run.parent / f"{run.name}.yaml"
    for path, what in ((run / "summary.json", "run"), (config_path, "--config")):
        if not path.is_file():
            parser.error(f"{what}: {path} not found (a finished far evolve run, and the config it read)")
    summary = json.loads((run / "summary.json").read_text())
    saved = [0] + [t for t in range(1, len(summary["rounds"])) if (run / f"adapter_round{t}").is_dir()]
    try:
        rounds = sorted({int(r) for r in args.rounds.split(",")}) if args.rounds else saved
    except ValueError:
        parser.error(f"--rounds: {args.rounds!r} is not a comma-separated list of round numbers")
    if missing := [t for t in rounds if t not in saved]:
        parser.error(f"--rounds: {missing} not saved in {run} (saved: {saved})")
    return FinishedRun(run, config_path, summary, rounds)


def load_run(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, FinishedRun, Any, Path]:
    """Parse the command line (``add_run_arguments`` already added), check the run, then load its config, with
    torch on one thread (beside other jobs on 2 cores): (the arguments, the run, its ``EvolveConfig``, the config's
    folder)."""
    args = parser.parse_args()
    finished = finished_run(parser, args)
    import torch

    torch.set_num_threads(1)
    from far.evolve.config import load_evolve_config

    config, base = load_evolve_config(finished.config)
    return args, finished, config, base
