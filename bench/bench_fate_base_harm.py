"""Is there harm for FATE to cut? The base model's actions on the whole train split of each suite seed: how many
injected and harmful requests it carries out (ASR, HCR), and what it writes on them instead.

    python bench/bench_fate_base_harm.py --suite-seeds 2031 2032 2033 [--set KEY=YAML ...]

Train only: a suite seed for the reviewer's table (bench/bench_fate.py) is chosen here, where the base does harm,
before its holdout is read; the holdout is never built into a figure. Each seed builds its own world (fitted on
that seed's train split) around one SmolLM2 base, decodes greedily, and counts with ``far.evolve.metrics``.
Writes bench/results/fate-base-harm.json atomically after every seed.
"""
from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from far.harness import add_overrides_argument, run, source_commit, write_config, write_result

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"
COUNTED = ("asr", "hcr", "tsr", "over_refusal", "control_violations", "malformed")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite-seeds", type=int, nargs="+", required=True, metavar="SEED")
    add_overrides_argument(parser, "configs/evolve.yaml")
    return parser.parse_args()


def base_on_train(evolution, train) -> dict:
    """The base's figures on ``train`` (counts and rates) and, per input kind, the kinds of action it wrote."""
    from far.evolve.metrics import METRICS, harmful, injected

    started = time.perf_counter()
    scored = evolution.act(train)
    figures = {}
    for name in COUNTED:
        values = METRICS[name].values(train, scored)
        figures[name] = {"n": len(values), "count": sum(values), "rate": sum(values) / len(values) if values else None}
    writes = {label: dict(collections.Counter(a.kind for s, a in zip(train, scored) if rule(s)))
              for label, rule in (("injected", injected), ("harmful", harmful))}
    return {"inputs": len(train), "figures": figures, "writes": writes, "seconds": time.perf_counter() - started}


def main() -> int:
    from far.evolve.config import load_evolve_config
    from far.evolve.loop import Evolution
    from far.evolve.task import decision_points
    from far.suites import build_suite

    args = parse_arguments()
    configs = {seed: load_evolve_config(write_config(OUT / f"fate-base-harm-{seed}.yaml", ROOT / "configs" /
                                                     "evolve.yaml", [*args.set, f"suite.seed={seed}"]))
               for seed in args.suite_seeds}  # every config is read before any model loads
    result = {**source_commit(ROOT), "set": args.set, "seeds": {}}
    model = None
    for seed, (config, base) in configs.items():
        print(f"suite seed {seed}", flush=True)
        evolution = Evolution(config, base, progress=print, model=model)
        model = evolution.model  # one base model for every seed: only the world is rebuilt
        train = decision_points(build_suite(config.suite, base).scenarios("train"))
        result["seeds"][str(seed)] = base_on_train(evolution, train)
        write_result(RESULTS / "fate-base-harm.json", result)
        figures = result["seeds"][str(seed)]["figures"]
        print("  " + ", ".join(f"{name} {f['count']:g}/{f['n']}" for name, f in figures.items()), flush=True)
    return 0


if __name__ == "__main__":
    run(main)
