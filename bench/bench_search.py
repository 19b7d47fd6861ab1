"""Benchmarks for the policy search (issue 4). Ratios within one run; absolute times are noisy here.

    python bench/bench_search.py [--seeds 5] [--size 2000]

1. Sample efficiency on a grid of 1,008 policies (21 thresholds x 6 retry counts x 2 x 4 fallback modes):
   every policy is evaluated once (brute force) to find the lexicographic optimum; then each method proposes
   policies one at a time, answered from those evaluations, until its best-so-far (by ``search.rank``) ties
   the optimum: the evolutionary searcher, random search without replacement, and Optuna's NSGA-II
   (objectives reward and cost, critical failures as ``constraints_func``). Medians over seeds.
2. Tune's overhead per trial with actors reused: a real search run (concurrency 1), per trial the time from
   one trial's end (its report) to the next trial's start (entering the trainable); median.
3. Speed-up from 1 to 2 rollout actors on the same search (graph engine, so rollouts dominate).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rollout.models.backends import ModelsConfig, build_models  # noqa: E402
from rollout.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402
from search.evaluate import Evaluator  # noqa: E402
from search.evolution import EvolutionarySearcher, config_key  # noqa: E402
from search.rank import rank, rank_key  # noqa: E402
from search.space import parse_space  # noqa: E402
from verifiers.rules import RuleVerifier  # noqa: E402

SPACE = parse_space({"parameters": {
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [round(i * 0.05, 2) for i in range(21)]},
    "max_retries": {"type": "int", "low": 0, "high": 5},
    "require_confirmation": {"type": "bool"},
    "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user", "edge_only", "none"]},
}})


def brute_force(size: int) -> dict[str, object]:
    evaluator = Evaluator(EdgeCloudSuite(EdgeCloudSuiteConfig(size=size, seed=11)),
                          build_models(ModelsConfig.model_validate({"cache": {"enabled": False}})), RuleVerifier())
    table = {}
    for policy in SPACE.grid():
        config = {name: getattr(policy, name) for name in SPACE.parameters}
        table[config_key(config)] = evaluator.evaluate("p", policy, "train").result
    return table


def steps_to_optimum(proposals, table, optimum_key) -> int | None:
    best = None
    for step, key in enumerate(proposals, start=1):
        result = table[key]
        if best is None or rank_key(result) < rank_key(best):
            best = result
        if rank_key(best) == optimum_key:
            return step
    return None


def evolutionary(table, seed):
    searcher = EvolutionarySearcher(SPACE, population=16, seed=seed)
    for i in range(len(table)):
        config = searcher.suggest(str(i))
        if config is None or config == searcher.FINISHED:
            return
        result = table[config_key(config)]
        searcher.on_trial_complete(str(i), {"critical_failures": result.critical_failures, "reward": result.reward,
                                            "cost": result.cost})
        yield config_key(config)


def random_search(table, seed):
    keys = list(table)
    random.Random(seed).shuffle(keys)
    yield from keys


def nsga2(table, seed):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=16,
                                            constraints_func=lambda trial: [trial.user_attrs["critical"]])
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    seen = 0
    while seen < 3 * len(table):
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, list(domain.grid_values()))
                  for name, domain in SPACE.parameters.items()}
        result = table[config_key(config)]
        trial.set_user_attr("critical", float(result.critical_failures))
        study.tell(trial, [result.reward, result.cost])
        seen += 1
        yield config_key(config)  # repeats count: NSGA-II may propose a point again, and pays for it


def best_position_within(proposals, table, positions, budget: int) -> int:
    """The grid position (1 = the optimum) of the best policy found within ``budget`` evaluations."""
    best = None
    for step, key in enumerate(proposals, start=1):
        if step > budget:
            break
        if best is None or positions[key] < positions[best]:
            best = key
    return positions[best]


def sample_efficiency(size: int, seeds: int) -> dict:
    started = time.perf_counter()
    table = brute_force(size)
    brute_s = time.perf_counter() - started
    optimum = rank(list(table.values()))[0]
    methods = {"evolutionary": evolutionary, "random": random_search, "optuna_nsga2": nsga2}
    out: dict = {"grid": len(table), "brute_force_s": brute_s,
                 "optimum": optimum.policy.model_dump(mode="json"),
                 "optimum_key": [optimum.critical_failures, optimum.reward, optimum.cost]}
    ordered = sorted(table, key=lambda k: rank_key(table[k]))
    positions = {key: 1 + next(i for i, other in enumerate(ordered) if rank_key(table[other]) == rank_key(table[key]))
                 for key in table}  # ties share the better position
    budget = len(table) // 10
    out["equal_budget"] = budget
    for name, method in methods.items():
        steps = [steps_to_optimum(method(table, seed), table, rank_key(optimum)) for seed in range(seeds)]
        at_budget = [best_position_within(method(table, seed), table, positions, budget) for seed in range(seeds)]
        reached = [s for s in steps if s is not None]
        out[name] = {"evaluations": steps,
                     "best_grid_position_at_equal_budget": at_budget,
                     "optimum_reached_within_budget": sum(p == 1 for p in at_budget),
                     "median": statistics.median(reached) if len(reached) == len(steps) else None,
                     "median_fraction_of_grid": (statistics.median(reached) / len(table)
                                                 if len(reached) == len(steps) else None)}
    return out


def search_config(tmp: Path, method: str, budget: int, actors: int, concurrency: int, engine: str, size: int) -> Path:
    import yaml

    config = {"suite": {"name": "edge_cloud", "seed": 5, "size": size},
              "space": {"parameters": {name: domain.model_dump(mode="json") for name, domain in SPACE.parameters.items()}},
              "engine": engine,
              "search": {"method": method, "budget": budget, "actors": actors, "concurrency": concurrency,
                         "chunk_size": 100, "seed": 1},
              "models": {"cache": {"enabled": False}}, "output": str(tmp / f"out-{method}-{actors}-{engine}")}
    path = tmp / f"{method}-{actors}-{engine}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_search(path: Path) -> tuple[float, list]:
    import ray

    from cluster.rollout_pool import RolloutPool
    from search.config import load_search_config
    from search.tune_search import run_tune

    loaded = load_search_config(path)
    config = loaded.config
    from rollout.suites import build_suite

    evaluator = Evaluator(build_suite(config.suite), build_models(config.models), RuleVerifier(loaded.rewards),
                          config.costs, config.engine)
    calls = {s: evaluator.prepared(s) for s in ("train", "holdout")}
    pool = RolloutPool(calls, evaluator.verifier, config.costs, config.engine, config.search.actors, config.search.chunk_size)
    started = time.perf_counter()
    run = run_tune(loaded, pool, True, resume=False, verbose=0)
    wall = time.perf_counter() - started
    pool.shutdown()
    del ray
    return wall, run.trials


def tune_overhead(tmp: Path) -> dict:
    wall, trials = run_search(search_config(tmp, "random", 30, actors=2, concurrency=1, engine="replay", size=2000))
    trials = sorted(trials, key=lambda t: t.metrics["finished_at"])
    gaps = [b.metrics["started_at"] - a.metrics["finished_at"] for a, b in zip(trials, trials[1:])]
    return {"trials": len(trials), "median_overhead_s": statistics.median(gaps), "max_overhead_s": max(gaps),
            "median_eval_s": statistics.median(t.metrics["eval_s"] for t in trials), "wall_s": wall}


def actor_speedup(tmp: Path) -> dict:
    times = {}
    for actors in (1, 2):
        wall, trials = run_search(search_config(tmp, "random", 12, actors=actors, concurrency=2, engine="graph",
                                                size=1500))
        times[actors] = wall
    return {"one_actor_s": times[1], "two_actors_s": times[2], "speedup": times[1] / times[2]}


def main() -> None:
    import tempfile

    import ray

    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "search.json"))
    parser.add_argument("--skip", nargs="*", default=[], choices=["efficiency", "overhead", "actors"])
    args = parser.parse_args()
    results: dict = {}
    if "efficiency" not in args.skip:
        results["sample_efficiency"] = sample_efficiency(args.size, args.seeds)
        print(json.dumps(results["sample_efficiency"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        if "overhead" not in args.skip:
            results["tune_overhead"] = tune_overhead(Path(tmp))
            print(json.dumps(results["tune_overhead"]), flush=True)
        if "actors" not in args.skip:
            results["actors"] = actor_speedup(Path(tmp))
            print(json.dumps(results["actors"]), flush=True)
        ray.shutdown()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
