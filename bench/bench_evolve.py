"""FATE benchmark (issue 7) with the real SmolLM2-135M-Instruct + LoRA on this CPU.

    python bench/bench_evolve.py [--seeds 0 1 2] [--rounds 2]

For each seed, ``far evolve configs/evolve.yaml`` (K=4, G=4, dev 32, holdout 64) runs in a fresh process with
``--rounds`` rounds and min_improvement 0 (a run stops early only on a round the check slice finds no better,
or a rollback): wall time per round, the process's peak memory, and holdout ASR,
HCR, TSR and over-refusal before round 1 and after each round. Reported per seed and as mean ± spread
(min..max) over seeds. Beside them, the baselines that update no weights, on the same dev and holdout
scenarios: FAR's policy search and Optuna's NSGA-II, ``--baseline-budget`` policy evaluations each, with
the base SmolLM2 as a calibrated risk edge. Writes bench/out/evolve.json (other seeds than 0 1 2:
evolve-seeds<S-...>.json; ``--tag T``: evolve-T….json, and each run under evolve-T-seed<S>/).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from far.harness import add_overrides_argument, read_result, run, write_config, write_result

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
OUT = ROOT / "bench" / "out"
METRICS = ("asr", "hcr", "tsr", "over_refusal", "mean_r_pf", "malformed", "own_asr", "own_hcr", "own_tsr",
           "own_over_refusal", "own_separation")
ROUND_FACTS = ("failures", "buffer", "rehearsed", "explored", "distinct_rate", "clip_fraction", "rolled_back",
               "decided_by_repair", "decided_by_kappa", "decided_by_pareto", "decided_by_tie_break", "decided_by_r_pf",
               "decided_by_none")


def evolve_config(path: Path, seed: int, overrides: Sequence[str], **updates) -> Path:
    """configs/evolve.yaml with the run's ``--set`` overrides, its seed and ``updates``, written to ``path`` (the
    config a run read, kept beside its outputs): FATE's runs and the baselines read the same settings."""
    return write_config(path, CONFIGS / "evolve.yaml", overrides, seed=seed, rewards=str(CONFIGS / "rewards.yaml"),
                        **updates)


def run_seed(seed: int, rounds: int, out: Path, overrides: Sequence[str] = ()) -> dict:
    import pyarrow.parquet as pq

    path = evolve_config(out.parent / f"{out.name}.yaml", seed, [*overrides, "gate.min_improvement=0.0"],
                         rounds=rounds, output=str(out))
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([sys.executable, "-m", "far", "evolve", str(path)], check=True, cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak_mib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    rows = pq.read_table(out / "rounds.parquet").to_pylist()
    return {"seed": seed, "wall_s": time.perf_counter() - started, "peak_rss_mib": peak_mib,
            "round_seconds": [r["seconds"] for r in rows[1:]],
            "kept_round": read_result(out / "summary.json")["kept_round"],  # the round a run returns
            "rounds": [{k: r[k] for k in ("round", *METRICS, *ROUND_FACTS)} for r in rows]}


def nsga2_winner(evaluator, space, seed: int, budget: int):
    """Optuna's NSGA-II (population 8; reward up, cost down; critical failures as its constraint), ``budget``
    policy evaluations on the "train" scenarios: its winner by ``far.search.ranking.rank`` and the evaluations."""
    import optuna
    from far.search.ranking.rank import rank

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=8,
                                            constraints_func=lambda trial: [trial.user_attrs["critical"]])
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    results = []
    for i in range(budget):
        trial = study.ask()
        params = {name: trial.suggest_categorical(name, list(domain.grid_values()))
                  for name, domain in space.parameters.items()}
        result = evaluator.evaluate(str(i), space.policy(params), "train").result
        trial.set_user_attr("critical", float(result.critical_failures))
        study.tell(trial, [result.reward, result.cost])
        results.append(result)
    return rank(results)[0], len(results)


def baselines(seed: int, budget: int, overrides: Sequence[str] = (), tag: str = "") -> dict:
    """No weight update: the base SmolLM2 as a calibrated risk edge (``far.evolve.search_baseline``), and
    ``budget`` policy evaluations on the dev scenarios by FAR's evolutionary search and by Optuna's NSGA-II; each
    winner (``far.search.ranking.rank`` on dev) is measured on FATE's holdout scenarios with FATE's metrics."""
    from far.evolve.collect import draw_slices
    from far.evolve.config import load_evolve_config
    from far.evolve.metrics import holdout_metrics
    from far.evolve.search_baseline import as_scored, search_evaluator
    from far.search.searchers.sequential import evolutionary_winner
    from far.search.searchers.space import load_space
    from far.suites import build_suite

    config, base = load_evolve_config(evolve_config(OUT / f"evolve{tag}-baselines-seed{seed}.yaml", seed, overrides))
    suite = build_suite(config.suite, base)
    slices = draw_slices(config, list(suite.scenarios("train")), list(suite.scenarios("holdout")))  # FATE's
    evaluator = search_evaluator(config, slices.dev, slices.holdout)
    space = load_space(CONFIGS / "space.yaml")
    out = {}
    for name, search in (("policy_search", evolutionary_winner), ("optuna_nsga2", nsga2_winner)):
        started = time.perf_counter()
        winner, evaluations = search(evaluator, space, seed, budget)
        scored = as_scored(evaluator.evaluate("winner", winner.policy, "holdout"))
        overall = holdout_metrics(slices.holdout, scored, config.selection)["overall"]
        out[name] = {"evaluations": evaluations, "winner": winner.policy.model_dump(mode="json"),
                     # no edge decision to read here: the own figures do not apply
                     "holdout": {k: v for k, v in overall.items() if not k.startswith("own_")},
                     "seconds": time.perf_counter() - started}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-budget", type=int, default=40, help="policy evaluations per baseline")
    parser.add_argument("--skip-fate", action="store_true", help="only the baselines")
    parser.add_argument("--skip-baselines", action="store_true", help="only FATE")
    add_overrides_argument(parser, "configs/evolve.yaml for the FATE runs and the baselines")
    parser.add_argument("--tag", default="", help="names the runs' outputs (evolve-TAG-seedS/, evolve-TAG-seeds….json)"
                        " so runs of other settings do not overwrite each other")
    args = parser.parse_args()
    tag = f"-{args.tag}" if args.tag else ""
    base = ({} if args.skip_baselines
            else {seed: baselines(seed, args.baseline_budget, args.set, tag) for seed in args.seeds})
    if args.skip_fate:
        print(json.dumps(base, indent=2))
        return
    runs = [run_seed(seed, args.rounds, OUT / f"evolve{tag}-seed{seed}", args.set) for seed in args.seeds]
    summary = {}
    for index in range(args.rounds + 1):
        values = {m: [run["rounds"][index][m] for run in runs if index < len(run["rounds"])] for m in METRICS}
        summary[f"round_{index}"] = {m: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}
                                     for m, v in values.items() if v}
    result = {"runs": runs, "summary": summary, "baselines": base}
    seeds = "" if args.seeds == [0, 1, 2] else f"-seeds{'-'.join(map(str, args.seeds))}"
    write_result(OUT / f"evolve{tag}{seeds}.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run(main)
