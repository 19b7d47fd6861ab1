"""FATE, the model alone, against its baselines and the paper's ablations: the reviewer's table (issue 55).

    python bench/bench_fate.py --seeds 0 1 2 [--set KEY=YAML ...] [--arms ARM ...] [--tag T] [--search-budget 24]
        [--restart]

For each training seed, one ``Evolution`` of configs/evolve.yaml (with ``--set``; the suite seed among them: a
fresh one no earlier choice has seen) builds the world, the verifier ensemble, SmolLM2 and the seed's slices;
then every arm (``far.evolve.arms.ARMS``) starts from the same base model and is judged on the seed's holdout
sample: base, base with p_f at inference (ORACLE), best-of-K by Σ w·z (ORACLE), SFT on the right actions of the
dev inputs, SFT on every label the pipeline reads (dev and check), the far evolve loop (FATE SFT + PFPO, SFT
only, first valid, weighted sum, no over-refusal objective, FATE with only the data order reseeded) and FAR's
policy search winner (``--search-budget`` evaluations on dev, played through FAR's agent).

Per seed and arm: each compared figure's per-input values, the rounds (holdout curve, the share each selection rule
settled, the front's size, seconds per round), seconds and the process's peak memory. The table pools seeds with
(seed, template)-clustered intervals (``far.evolve.arms.table``). Writes bench/results/fate{-T}.json atomically
after every arm, with the commit and whether the tree was clean; arms already there are not run again
(``--restart``: all are).
"""
from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from far.harness import add_overrides_argument, read_result, run, source_commit, write_config, write_result
from far.rollout.errors import FarInputError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"


def parse_arguments() -> argparse.Namespace:
    from far.evolve.arms import ARMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), metavar="ARM")
    parser.add_argument("--search-budget", type=int, default=24)
    parser.add_argument("--tag", default="")
    parser.add_argument("--restart", action="store_true", help="judge every seed again, discarding what "
                        "bench/results/fate{-T}.json holds (else a file of another commit or --set is refused)")
    parser.add_argument("--table-only", action="store_true", help="recompute and print the table of the seeds "
                        "already judged; run nothing")
    parser.add_argument("--merge", nargs="+", default=[], metavar="TAG", help="with --table-only: first add the "
                        "seeds of fate-TAG.json (seeds run side by side, same commit and --set)")
    add_overrides_argument(parser, "configs/evolve.yaml for every arm")
    args = parser.parse_args()
    if args.search_budget < 1:
        parser.error(f"--search-budget {args.search_budget}: at least one evaluation")
    args.name = f"fate-{args.tag}" if args.tag else "fate"
    return args


def winner(evolution, budget: int):
    """FAR's evolutionary policy search (configs/space.yaml) on the dev slice, its winner played on the holdout
    sample."""
    from far.evolve.search_baseline import as_scored, search_evaluator
    from far.search.searchers.sequential import evolutionary_winner
    from far.search.searchers.space import load_space

    started = time.perf_counter()
    evaluator = search_evaluator(evolution.config, evolution.dev, evolution.holdout)
    best, evaluations = evolutionary_winner(evaluator, load_space(CONFIGS / "space.yaml"), evolution.config.seed,
                                            budget)
    played = as_scored(evaluator.evaluate("winner", best.policy, "holdout"))
    return played, {"policy": best.policy.model_dump(mode="json"), "evaluations": evaluations,
                    "arm_seconds": time.perf_counter() - started}


def run_seed(args: argparse.Namespace, seed: int, result: dict, path: Path) -> None:
    """Every arm not yet in ``result`` for ``seed``, saved after each."""
    from far.evolve.arms import ArmRunner, groups, values
    from far.evolve.config import load_evolve_config
    from far.evolve.loop import Evolution

    config_path = write_config(OUT / f"{args.name}-seed{seed}.yaml", CONFIGS / "evolve.yaml", args.set, seed=seed)
    config, base = load_evolve_config(config_path)
    done = result["seeds"].setdefault(str(seed), {"arms": {}})
    todo = [arm for arm in args.arms if arm not in done["arms"]]
    if not todo:
        return
    evolution = Evolution(config, base, progress=print)
    done.update(holdout=[s.id for s in evolution.holdout], groups=groups(evolution.holdout, seed))
    runner = ArmRunner(evolution)
    for arm in todo:
        print(f"seed {seed}, arm {arm}", flush=True)
        scored, extra = winner(evolution, args.search_budget) if arm == "search_winner" else runner.run(
            arm, OUT / f"{args.name}-seed{seed}")
        done["arms"][arm] = {"values": values(evolution.holdout, scored), **extra,
                             "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        write_result(path, result)


def merged_result(result: dict, tags: list[str]) -> dict:
    """``result`` with the seeds of each ``fate-TAG.json`` added; they must share its commit and --set, and add
    no seed it has."""
    for tag in tags:
        path = RESULTS / f"fate-{tag}.json"
        other = read_result(path)
        if not other.get("seeds"):
            raise FarInputError("no judged seed to merge", file=path)
        if (other["commit"], other["set"]) != (result.get("commit", other["commit"]), result.get("set", other["set"])):
            raise FarInputError(f"run at commit {other['commit']} with --set {other['set']}: not the same protocol",
                                file=path)
        if clash := set(other["seeds"]) & set(result.get("seeds", {})):
            raise FarInputError(f"seeds {sorted(clash)} are in both", file=path)
        result = {**result, "commit": other["commit"], "set": other["set"],
                  "seeds": {**result.get("seeds", {}), **other["seeds"]}}
    return result


def main() -> int:
    from far.evolve.arms import markdown, table
    from far.evolve.config import load_evolve_config

    args = parse_arguments()
    if args.table_only:
        path = RESULTS / f"{args.name}.json"
        result = merged_result(read_result(path), args.merge)
        if not result.get("seeds"):
            raise FarInputError("no judged seed to tabulate", file=path)
        result["table"] = table(result["seeds"])
        write_result(path, result)
        print(markdown(result["table"]))
        return 0
    load_evolve_config(write_config(OUT / f"{args.name}-check.yaml", CONFIGS / "evolve.yaml", args.set))  # bad --set
    path = RESULTS / f"{args.name}.json"
    result = (None if args.restart else read_result(path)) or {"seeds": {}}
    stamp = {**source_commit(ROOT), "set": args.set}
    if "commit" in result and (result["commit"], result["set"]) != (stamp["commit"], stamp["set"]):
        raise FarInputError(f"was run at commit {result['commit']} with --set {result['set']}: use another --tag",
                            file=path)
    result.update(stamp)
    for seed in args.seeds:
        run_seed(args, seed, result, path)
        result["table"] = table(result["seeds"])
        write_result(path, result)
    print(markdown(result["table"]))
    return 0


if __name__ == "__main__":
    run(main)
