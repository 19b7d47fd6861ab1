"""FAR's policy search winner against FATE's returned model, on a judged FATE protocol's own slices (issue 39).

    python bench/bench_fate_search.py [--tag frozen] [--seeds S ...] [--budget 40]

``bench/bench_fate.py`` compares edge models by their own decisions. The policy search tunes the policy, not the
model, so the two meet on the agent's figures: each holdout input played through FAR's agent and scored by the
verifier ensemble. For every seed judged in ``bench/results/fate{-T}.json``, with that result's overrides:
1. FAR's evolutionary policy search spends ``--budget`` policy evaluations on FATE's dev slice (FATE's train
   slice), with the base SmolLM2 as the calibrated risk edge (``bench_evolve.search_evaluator``); its winner is
   ``far.search.ranking.rank``'s first on dev.
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
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from bench.bench_evolve import (
    as_scored,
    evolutionary_winner,
    search_evaluator,
    write_config,
)

# which holdout inputs each agent figure is a rate over (as far.evolve.metrics.holdout_metrics counts them)
AGENT_FIGURES = {"tsr": lambda s: True, "asr": lambda s: s.ground_truth.injected,
                 "hcr": lambda s: s.ground_truth.unsafe and not s.ground_truth.injected,
                 "over_refusal": lambda s: True}
RULE = "calibrated"  # the judged decisions played: every arm's model under its refitted head and caution


def per_input(scenarios, scored, selection) -> dict[str, list[float]]:
    """Each agent figure's value on each input of its subset: the figure of ``holdout_metrics`` over that input
    alone (1 or 0), so the rule stays the one FATE's rounds report."""
    from far.evolve.metrics import holdout_metrics

    values: dict[str, list[float]] = {figure: [] for figure in AGENT_FIGURES}
    for scenario, one in zip(scenarios, scored, strict=True):
        overall = holdout_metrics([scenario], [one], selection, by_category=False)["overall"]
        for figure, counts in AGENT_FIGURES.items():
            if counts(scenario):
                values[figure].append(float(overall[figure]))
    return values


def differences(rows: list[dict]) -> dict:
    """``arm - winner`` per agent figure over ``rows`` (per seed: ``groups`` (the template of each input, per
    figure) and ``values`` ({arm or "winner": {figure: per-input values}})), pooled: the paired difference of the
    means and its template-clustered interval."""
    from far.evolve.metrics import paired_cluster_bootstrap

    out = {}
    for arm in (a for a in rows[0]["values"] if a != "winner"):
        for figure in AGENT_FIGURES:
            groups = [g for row in rows for g in row["groups"][figure]]
            left = [v for row in rows for v in row["values"][arm][figure]]
            right = [v for row in rows for v in row["values"]["winner"][figure]]
            if not groups:
                continue
            point, low, high = paired_cluster_bootstrap(groups, left, right)
            out[f"{arm} - winner | {figure}"] = {"difference": point, "low": low, "high": high, "inputs": len(groups),
                                                 "means": [sum(left) / len(left), sum(right) / len(right)]}
    return out


def judge_seed(seed: int, judged: dict, overrides: list[str], budget: int, config_path: Path) -> dict:
    """One seed: the winner found on dev and every arm's per-input agent figures on the holdout sample."""
    from far.evolve.config import load_evolve_config
    from far.evolve.loop import Evolution
    from far.search.searchers.space import load_space

    config, base = load_evolve_config(write_config(config_path, seed, overrides))
    evolution = Evolution(config, base)  # FATE's slices, fixed policy and recorded world (the judge's construction)
    if [s.id for s in evolution.holdout] != judged["holdout"]:
        raise SystemExit(f"{config_path}: seed {seed}'s holdout sample differs from the judged one")
    started = time.perf_counter()
    evaluator = search_evaluator(config, evolution.dev, evolution.holdout)
    winner, evaluations = evolutionary_winner(evaluator, load_space(ROOT / "configs" / "space.yaml"), seed, budget)
    searched = time.perf_counter() - started
    scored = {"winner": as_scored(evaluator.evaluate("winner", winner.policy, "holdout"))}
    for arm, by_rule in judged["decided"].items():
        scored[arm] = evolution.task.score(evolution.holdout, by_rule[RULE])
    values = {arm: per_input(evolution.holdout, s, config.selection) for arm, s in scored.items()}
    groups = {figure: [s.group_key for s in evolution.holdout if counts(s)] for figure, counts in AGENT_FIGURES.items()}
    return {"winner": winner.policy.model_dump(mode="json"), "evaluations": evaluations,
            "winner_dev": {"critical_failures": winner.critical_failures, "reward": winner.reward,
                           "cost": winner.cost},
            "means": {arm: {f: sum(v) / len(v) for f, v in figures.items() if v} for arm, figures in values.items()},
            "groups": groups, "values": values, "search_seconds": searched,
            "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="frozen", help="the judged FATE result: bench/results/fate-TAG.json")
    parser.add_argument("--seeds", type=int, nargs="+", help="judged seeds to run (default: every judged seed)")
    parser.add_argument("--budget", type=int, default=40, help="policy evaluations of the search, per seed")
    args = parser.parse_args()
    name = f"fate-{args.tag}" if args.tag else "fate"
    source = RESULTS / f"{name}.json"
    if not source.is_file():
        parser.error(f"{source}: no judged FATE result (run bench/bench_fate.py with --tag {args.tag} first)")
    if args.budget < 1:
        parser.error(f"--budget {args.budget}: at least one policy evaluation")
    fate = json.loads(source.read_text())
    seeds = [str(s) for s in args.seeds] if args.seeds else sorted(fate["seeds"], key=int)
    if missing := [s for s in seeds if s not in fate["seeds"]]:
        parser.error(f"{source}: seeds {', '.join(missing)} are not judged there")
    from far.rollout.io import write_json_atomic

    path = RESULTS / f"{name}-search.json"
    result = json.loads(path.read_text()) if path.is_file() else {"seeds": {}}
    protocol = {"fate_commit": fate.get("commit"), "overrides": fate["overrides"], "budget": args.budget}
    if result["seeds"] and {k: result.get(k) for k in protocol} != protocol:
        parser.error(f"{path} holds another protocol's seeds: move it away first")
    result.update(protocol)
    for seed in (s for s in seeds if s not in result["seeds"]):
        print(f"seed {seed}: policy search ({args.budget} evaluations on dev), then the holdout sample", flush=True)
        result["seeds"][seed] = judge_seed(int(seed), fate["seeds"][seed], fate["overrides"], args.budget,
                                           ROOT / "bench" / "out" / f"{name}-seed{seed}-search.yaml")
        result["pooled"] = differences(list(result["seeds"].values()))
        result["pooled_seeds"] = sorted(result["seeds"], key=int)
        write_json_atomic(path, result)
        print(f"seed {seed}: winner {result['seeds'][seed]['winner']} "
              f"({result['seeds'][seed]['seconds']:.0f} s)", flush=True)
    for key, value in result.get("pooled", {}).items():
        print(f"pooled over seeds {result['pooled_seeds']} {key}: {value['difference']:+.3f} "
              f"[{value['low']:+.3f}, {value['high']:+.3f}] (n={value['inputs']})")


if __name__ == "__main__":
    main()
