"""``far evolve``: FATE from the command line (registered into ``far`` by ``serve.cli``)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from rollout.errors import FarInputError


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_evolve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evolve.config import load_evolve_config

    config, base = load_evolve_config(args.config)
    output = Path(args.output) if args.output else Path.cwd() / config.output
    if output.exists() and not output.is_dir():
        raise FarInputError("output path exists and is not a directory", file=output, field="output")
    from evolve.loop import Evolution

    _progress(f"FAR evolve: {config.rounds} rounds of FATE on {config.model.base} (LoRA r={config.model.lora_r}), "
              f"dev {config.dev_size}, holdout {config.holdout_size}, K={config.candidates}, G={config.pfpo.group}")
    summary = Evolution(config, base, progress=_progress).run(output.resolve())
    kept = summary["kept_round"]
    print(f"FAR evolve: {len(summary['rounds']) - 1} round(s), stopped: {summary['stopped']}. The model to ship: "
          + (f"round {kept}'s, {output}/{summary['kept_adapter']}/ (its caution.json beside it). " if kept else
             "the base model (no round beat it on the check slice). ") + f"Results: {output}/ "
          "(rounds.parquet, rounds_by_category.parquet, replay_buffer_round*.parquet, adapter_round*/, "
          "report.html, summary.json)")
    return 0


def add_commands(commands: Any) -> None:
    evolve_cmd = commands.add_parser("evolve", help="FATE: improve the edge model from its own failures "
                                                    "(repairs, Pareto-front SFT, PFPO), in rounds")
    evolve_cmd.add_argument("config", help="evolve configuration (YAML), e.g. configs/evolve.yaml")
    evolve_cmd.add_argument("--output", help="output directory (default: the config's 'output')")
    evolve_cmd.set_defaults(handler=cmd_evolve)
