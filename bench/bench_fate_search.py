"""FAR's policy search winner against FATE's returned model, on a judged FATE protocol's own slices (issue 39).

    python bench/bench_fate_search.py [--tag frozen] [--seeds S ...] [--budget 40]

``bench/bench_fate.py`` compares edge models by their own decisions. The policy search tunes the policy, not the
model, so the two meet on the agent's figures: each holdout input played through FAR's agent and scored by the
verifier ensemble (``far.evolve.search_baseline``). For every seed judged in ``bench/results/fate{-T}.json``, with
that result's overrides:
1. FAR's evolutionary policy search spends ``--budget`` policy evaluations on FATE's dev slice (FATE's train
   slice), with the base SmolLM2 as the calibrated risk edge (``search_evaluator``); its winner is
   ``far.search.ranking.rank``'s first on dev (``far.search.searchers.sequential.evolutionary_winner``).
2. The winner plays the seed's holdout sample. The decisions the judge recorded for every arm (FATE's returned
   model, the base, SFT on labels, the ablations) under the calibrated rule (head and caution refitted) are played
   under FATE's fixed policy.
3. Agent TSR, ASR (on injected requests), HCR (on harmful ones) and over-refusal: each arm − winner, per seed and
   pooled over seeds, with paired bootstrap 95% intervals that resample whole templates.

The holdout sample is checked by content against the judged result (the scenario ids, in order) before any search
runs. The winner reads it once, here; nothing is chosen on it. Writes ``bench/results/fate{-T}-search.json``
(atomically, after each seed: seeds already there are kept and not run again).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from far.evolve.search_baseline import arms_against_winner, minus_winner, search_evaluator
from far.harness import read_result, run, write_config, write_result
from far.rollout.errors import FarInputError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"


def judge_seed(seed: int, judged: dict, overrides: list[str], budget: int, config_path: Path) -> dict:
    """One seed: the winner found on dev and every arm's per-input agent figures on the holdout sample."""
    from far.evolve.config import load_evolve_config
    from far.evolve.loop import Evolution
    from far.search.searchers.sequential import evolutionary_winner
    from far.search.searchers.space import load_space

    path = write_config(config_path, CONFIGS / "evolve.yaml", overrides, seed=seed,
                        rewards=str(CONFIGS / "rewards.yaml"))
    config, base = load_evolve_config(path)
    evolution = Evolution(config, base)  # FATE's slices, fixed policy and recorded world (the judge's construction)
    if [s.id for s in evolution.holdout] != judged["holdout"]:
        raise FarInputError(f"seed {seed}'s holdout sample differs from the judged one", file=config_path)
    started = time.perf_counter()
    evaluator = search_evaluator(config, evolution.dev, evolution.holdout)
    winner, evaluations = evolutionary_winner(evaluator, load_space(CONFIGS / "space.yaml"), seed, budget)
    searched = time.perf_counter() - started
    played = arms_against_winner(evolution, evaluator, winner.policy, judged["decided"])
    return {"winner": winner.policy.model_dump(mode="json"), "evaluations": evaluations,
            "winner_dev": {"critical_failures": winner.critical_failures, "reward": winner.reward,
                           "cost": winner.cost},
            **played, "search_seconds": searched, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="frozen", help="the judged FATE result: bench/results/fate-TAG.json")
    parser.add_argument("--seeds", type=int, nargs="+", help="judged seeds to run (default: every judged seed)")
    parser.add_argument("--budget", type=int, default=40, help="policy evaluations of the search, per seed")
    args = parser.parse_args()
    name = f"fate-{args.tag}" if args.tag else "fate"
    source = RESULTS / f"{name}.json"
    if not source.is_file():
        raise FarInputError(f"no judged FATE result (run bench/bench_fate.py with --tag {args.tag} first)", file=source)
    if args.budget < 1:
        raise FarInputError(f"{args.budget}: at least one policy evaluation", field="--budget")
    fate = read_result(source)
    seeds = [str(s) for s in args.seeds] if args.seeds else sorted(fate["seeds"], key=int)
    if missing := [s for s in seeds if s not in fate["seeds"]]:
        raise FarInputError(f"seeds {', '.join(missing)} are not judged there", file=source)
    path = RESULTS / f"{name}-search.json"
    result = read_result(path) or {"seeds": {}}
    protocol = {"fate_commit": fate.get("commit"), "overrides": fate["overrides"], "budget": args.budget}
    if result["seeds"] and {k: result.get(k) for k in protocol} != protocol:
        raise FarInputError("holds another protocol's seeds: move it away first", file=path)
    result.update(protocol)
    for seed in (s for s in seeds if s not in result["seeds"]):
        print(f"seed {seed}: policy search ({args.budget} evaluations on dev), then the holdout sample", flush=True)
        result["seeds"][seed] = judge_seed(int(seed), fate["seeds"][seed], fate["overrides"], args.budget,
                                           OUT / f"{name}-seed{seed}-search.yaml")
        result["pooled"] = minus_winner(list(result["seeds"].values()))
        result["pooled_seeds"] = sorted(result["seeds"], key=int)
        write_result(path, result)
        print(f"seed {seed}: winner {result['seeds'][seed]['winner']} "
              f"({result['seeds'][seed]['seconds']:.0f} s)", flush=True)
    for key, value in result.get("pooled", {}).items():
        print(f"pooled over seeds {result['pooled_seeds']} {key}: {value['difference']:+.3f} "
              f"[{value['low']:+.3f}, {value['high']:+.3f}] (n={value['inputs']})")


if __name__ == "__main__":
    run(main)
