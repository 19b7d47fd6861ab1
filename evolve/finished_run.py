"""A finished ``far evolve`` run, read back to replay its rounds offline: its folder, the config it read, its
summary and the rounds to replay, checked before any model loads (bad input: a ``FarInputError`` naming the file
or the option).

    parser = argparse.ArgumentParser(); add_run_arguments(parser)
    run, config, base = load_finished_run(parser.parse_args())
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError


@dataclass(frozen=True)
class FinishedRun:
    folder: Path
    config: Path  # the config the run read
    summary: dict[str, Any]  # its summary.json
    rounds: list[int]  # to replay, ascending: round 0, the base model, first


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run (``run``), the rounds to replay (``--rounds``) and its config (``--config``) on ``parser``."""
    parser.add_argument("run", type=Path, help="a far evolve output folder with summary.json")
    parser.add_argument("--rounds", default=None, help="comma-separated rounds (default: every saved one)")
    parser.add_argument("--config", type=Path, default=None, help="the run's config (default: <run>.yaml beside it)")


def saved_rounds(folder: Path, summary: dict[str, Any]) -> list[int]:
    """Round 0 (the base model) and every round whose adapter was saved (``adapter_round<t>/``)."""
    return [0] + [t for t in range(1, len(summary["rounds"])) if (folder / f"adapter_round{t}").is_dir()]


def finished_run(folder: Path, rounds: str | None = None, config: Path | None = None) -> FinishedRun:
    """The run in ``folder``, its config (``config``, or ``<run>.yaml`` beside it, as the FATE benchmarks write it)
    and the rounds asked for (``rounds``: comma-separated; default: every saved one)."""
    folder = folder.resolve()
    config_path = config or folder.parent / f"{folder.name}.yaml"
    for path, what in ((folder / "summary.json", "run"), (config_path, "--config")):
        if not path.is_file():
            raise FarInputError("not found (a finished far evolve run, and the config it read)", file=path, field=what)
    summary = json.loads((folder / "summary.json").read_text())
    saved = saved_rounds(folder, summary)
    try:
        chosen = sorted({int(r) for r in rounds.split(",")}) if rounds else saved
    except ValueError:
        raise FarInputError(f"{rounds!r} is not a comma-separated list of round numbers", field="--rounds") from None
    if missing := [t for t in chosen if t not in saved]:
        raise FarInputError(f"{missing} not saved in {folder} (saved: {saved})", field="--rounds")
    return FinishedRun(folder, config_path, summary, chosen)


def load_finished_run(args: argparse.Namespace, threads: int = 1) -> tuple[FinishedRun, Any, Path]:
    """The run ``args`` name (``add_run_arguments``), checked, then its ``EvolveConfig`` and the config's folder;
    torch on ``threads`` threads (a replay runs beside other jobs)."""
    finished = finished_run(args.run, args.rounds, args.config)
    import torch

    torch.set_num_threads(threads)
    from far.evolve.config import load_evolve_config

    config, base = load_evolve_config(finished.config)
    return finished, config, base
