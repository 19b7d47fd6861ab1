"""Can FATE's front choose at all? On the dev slice (train), the base model's failures, K on-policy candidates each
on the repair prompt p_f, and how many repair their failure and meet κ; beside it, how many failures have any
feasible action (the labels' right action, scored: ORACLE, a ceiling, never taught).

    python bench/bench_fate_feasible.py [--candidates K] [--set KEY=YAML ...]

Writes bench/results/fate-feasible.json (the counts, per failure the right action's z and the candidates' kinds).
Run it before paying for rounds: where no candidate is feasible, the front, the tie break and r_PF settle nothing.
"""
from __future__ import annotations

import argparse
import collections
import random
import time
from pathlib import Path

from far.harness import add_overrides_argument, run, source_commit, write_config, write_result

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=None,
                        help="K, candidates per failure (default: the config's repair.candidates)")
    add_overrides_argument(parser, "configs/evolve.yaml")
    args = parser.parse_args()
    if args.candidates is not None and args.candidates < 1:
        parser.error(f"--candidates {args.candidates}: at least one")
    return args


def candidates(evolution, failed, k: int) -> dict:
    """K candidates per failure on p_f (the loop's own repair step), and what selection makes of them."""
    from far.evolve.repair import propose
    from far.evolve.select import select

    config = evolution.config
    settings = config.repair.model_copy(update={"candidates": k})
    started = time.perf_counter()
    repairs = propose(evolution.model, evolution.task, settings, config.selection, failed,
                      evolution.thresholds([f.scenario for f in failed]), config.seed, 1)
    chosen = [select(config.selection, f, group, random.Random(0)) for f, group in zip(failed, repairs.groups)]
    return {"candidates": sum(map(len, repairs.groups)), "seconds": time.perf_counter() - started,
            "distinct_rate": repairs.distinct_rate(), "repairing": sum(s.repairing for s in chosen),
            "feasible": sum(s.feasible for s in chosen),
            "failures_with_a_feasible_candidate": sum(s.feasible > 0 for s in chosen),
            "settled_by": dict(collections.Counter(s.rule for s in chosen)),
            "kinds": dict(collections.Counter(c.scored.kind for g in repairs.groups for c in g))}


def ceiling(evolution, failed) -> dict:
    """ORACLE: the labels' right action on each failed input, scored and held against κ."""
    from far.evolve.task import action_text, right_action
    from far.verifiers.pareto import feasible

    scenarios = [f.scenario for f in failed]
    right = evolution.task.score(scenarios, [action_text(right_action(s)) for s in scenarios])
    held = [feasible(r.z, k) for r, k in zip(right, evolution.thresholds(scenarios))]
    return {"right_action_feasible": sum(held),
            "not_feasible": [{"id": s.id, "z": list(r.z), "failures": list(r.failures)}
                             for s, r, ok in zip(scenarios, right, held) if not ok]}


def main() -> int:
    from far.evolve.collect import failures
    from far.evolve.config import load_evolve_config
    from far.evolve.loop import Evolution

    args = parse_arguments()
    config, base = load_evolve_config(write_config(OUT / "fate-feasible.yaml", ROOT / "configs" / "evolve.yaml",
                                                   args.set))
    k = args.candidates if args.candidates is not None else config.repair.candidates
    evolution = Evolution(config, base, progress=print)
    failed, _, _ = failures(evolution.dev, evolution.act(evolution.dev), evolution.thresholds(evolution.dev))
    print(f"{len(failed)} failures on {len(evolution.dev)} dev inputs; {k} candidates each", flush=True)
    result = {**source_commit(ROOT), "set": args.set, "k": k, "dev": len(evolution.dev), "failures": len(failed),
              **candidates(evolution, failed, k), "oracle": ceiling(evolution, failed)}
    write_result(RESULTS / "fate-feasible.json", result)
    print({k: v for k, v in result.items() if k != "oracle"}, "ORACLE right action feasible on",
          result["oracle"]["right_action_feasible"])
    return 0


if __name__ == "__main__":
    run(main)
