"""Benchmarks for the policy search (issues 4 and 13). Ratios within one run; absolute times are noisy here.

    python bench/bench_search.py [--seeds 10] [--skip quality overhead actors]

1. Search quality on the default config (``configs/search.yaml``: its suite, its 440-point space, its gate):
   every grid point is evaluated on train and holdout; the grid's best deployable policy is the best on train
   by ``far.search.ranking.rank`` (under the gate's cost limit) that passes the gate on holdout. Each method then proposes
   policies one at a time, answered from those evaluations, until its best so far on train is that policy:
   the evolutionary searcher (the config's settings), random search (``RandomSearcher``, without
   replacement), and Optuna's NSGA-II (objectives reward and cost; critical failures and the cost limit as
   ``constraints_func``). Medians over seeds; also how often the default budget ships that policy.
2. Tune's overhead per trial with actors reused: a real search run (concurrency 1), per trial the time from
   one trial's end (its report) to the next trial's start (entering the trainable); median.
3. Speed-up from 1 to 2 rollout actors on the same search (graph engine, so rollouts dominate).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from far.harness import run, write_result
from far.search.jobs.assemble import build_evaluator
from far.search.jobs.config import load_search_config
from far.search.ranking.gate import gate
from far.search.ranking.rank import Constraints, rank_key
from far.search.searchers.evolutionary import EvolutionarySearcher, RandomSearcher, config_key
from far.search.searchers.space import parse_space

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "search.yaml"
SPACE = parse_space({"parameters": {  # the space of the actor/overhead runs below
    "cloud_threshold": {"type": "float", "low": 0.0, "high": 1.0, "grid": [round(i * 0.05, 2) for i in range(21)]},
    "max_retries": {"type": "int", "low": 0, "high": 5},
    "require_confirmation": {"type": "bool"},
    "fallback_mode": {"type": "choice", "values": ["safe_shutdown", "ask_user", "edge_only", "none"]},
}})


_SWEEPS: dict = {}  # config file -> (train, holdout): the quality and LLM benches share one sweep


def exhaustive(loaded, chunk: int = 2000) -> tuple[dict, dict]:
    """Every grid point of the default config's space on train, column-wise (``far.search.evaluation.columnar``: exact, and
    the only way a space of this size is affordable); holdout lazily (``HoldoutTable``), as only the best on
    train are ever gated."""
    if loaded.source in _SWEEPS:
        return _SWEEPS[loaded.source]
    config = loaded.config
    evaluator = build_evaluator(config.model_copy(update={"engine": "columnar"}), base_dir=loaded.base_dir,
                                rewards=loaded.rewards, progress=lambda message: print(message, flush=True))
    trials = evaluator.columnar()
    names = list(loaded.space.parameters)
    train = {}
    policies = list(loaded.space.grid())
    columns = trials.compiled["train"]
    columnar = trials.evaluator("train")
    for start in range(0, len(policies), chunk):
        batch = policies[start:start + chunk]
        for policy, totals in zip(batch, columnar.evaluate(batch, columns.batches())):
            key = config_key({name: getattr(policy, name) for name in names})
            train[key] = columnar.result("p", policy, "train", totals, evaluator.models.simulated)
        print(f"  train sweep: {min(start + chunk, len(policies))}/{len(policies)} policies", flush=True)
    _SWEEPS[loaded.source] = train, HoldoutTable(trials, loaded.space, evaluator.models.simulated)
    return _SWEEPS[loaded.source]


class HoldoutTable(dict):
    """Holdout results by config key, evaluated column-wise on first access."""

    def __init__(self, trials, space, simulated) -> None:
        super().__init__()
        self.trials, self.space, self.simulated = trials, space, simulated

    def __missing__(self, key):
        policy = self.space.policy(json.loads(key))
        self[key] = self.trials.result("p", policy, "holdout", self.simulated)
        return self[key]


def gated(result, gate_config) -> bool:
    return gate(result.critical_failures, result.rollouts_with_critical, result.scenarios, result.mean_cost,
                gate_config).deploy


def steps_to_optimum(proposals, table, optimum_key, constraints) -> int | None:
    best = None
    for step, key in enumerate(proposals, start=1):
        result = table[key]
        if best is None or rank_key(result, constraints) < rank_key(best, constraints):
            best = result
        if rank_key(best, constraints) == optimum_key:
            return step
    return None


def drive(searcher, table, limit):
    """Suggest / complete one trial at a time, answered from the table (a searcher's own view of a search)."""
    for i in range(limit):
        config = searcher.suggest(str(i))
        if config is None or config == searcher.FINISHED:
            return
        result = table[config_key(config)]
        searcher.on_trial_complete(str(i), {"critical_failures": result.critical_failures, "reward": result.reward,
                                            "cost": result.cost, "mean_cost": result.mean_cost})
        yield config_key(config)


def evolutionary(loaded, table, seed, constraints):
    settings = loaded.config.search.evolutionary.model_dump()
    yield from drive(EvolutionarySearcher(loaded.space, seed=seed, constraints=constraints, **settings), table,
                     len(table))


def random_search(loaded, table, seed, constraints):
    yield from drive(RandomSearcher(loaded.space, seed=seed), table, len(table))


def optuna_search(sampler_name, loaded, table, seed, constraints, limit):
    """Optuna's constrained samplers: objectives reward (max) and cost (min) for NSGA-II, reward for TPE;
    constraints critical failures <= 0 and cost per scenario <= the gate's limit (``constraints_func``, values
    <= 0 are satisfied). At most ``limit`` trials (Optuna's own cost grows with the trials told)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cost_limit = constraints.max_mean_cost

    def constraints_func(trial):
        return [trial.user_attrs["critical"],
                trial.user_attrs["mean_cost"] - (cost_limit if cost_limit is not None else 1e18)]

    if sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed, constraints_func=constraints_func,
                                                population_size=loaded.config.search.evolutionary.population)
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=constraints_func)
        study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(limit):
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, list(domain.grid_values()))
                  for name, domain in loaded.space.parameters.items()}
        result = table[config_key(config)]
        trial.set_user_attr("critical", float(result.critical_failures))
        trial.set_user_attr("mean_cost", float(result.mean_cost))
        study.tell(trial, [result.reward, result.cost] if sampler_name == "nsga2" else result.reward)
        yield config_key(config)  # repeats count: a sampler may propose a point again, and pays for it


def winner_within_budget(proposals, train, holdout, constraints, gate_config, budget, top_k):
    """What ``far search`` would report after ``budget`` trials: the best of the top-k on train that passes the
    gate on holdout, else the best on train."""
    seen = list(dict.fromkeys(key for _, key in zip(range(budget), proposals)))
    top = sorted(seen, key=lambda k: rank_key(train[k], constraints))[:top_k]
    return next((key for key in top if gated(holdout[key], gate_config)), top[0] if top else None)


CHECKED = 1000  # the best on train gated on holdout, in train order, when looking for the best deployable


def target_of(train, holdout, constraints, gate_config):
    """(train order, the target, the best deployable or None): the best on train that passes the gate on holdout
    among the best ``CHECKED`` on train, else the best on train."""
    ordered = sorted(train, key=lambda k: rank_key(train[k], constraints))
    optimum = next((k for k in ordered[:CHECKED] if gated(holdout[k], gate_config)), None)
    return ordered, optimum if optimum is not None else ordered[0], optimum


def search_quality(seeds: int, optuna_limit: int = 3000) -> dict:
    """Issues 13 and 36: on the default config (its space with the rules), evaluations until each method's best
    so far (``far.search.ranking.rank`` under the gate's cost limit, on train) is the grid's best deployable policy -- or,
    where nothing in the grid deploys, its best on train (what ``far search`` reports); and what the default
    budget ships."""
    loaded = load_search_config(CONFIG, output=str(ROOT / "bench" / "out" / "unused"))
    config = loaded.config
    constraints = Constraints.from_gate(config.gate)
    started = time.perf_counter()
    train, holdout = exhaustive(loaded)
    exhaustive_s = time.perf_counter() - started
    ordered, target, optimum = target_of(train, holdout, constraints, config.gate)
    optimum_key = rank_key(train[target], constraints)
    checked = ordered[:CHECKED]
    out: dict = {"grid": len(train), "exhaustive_train_s": round(exhaustive_s, 1), "seeds": seeds,
                 "target": "best deployable" if optimum is not None else
                           f"best on train (none of the best {len(checked)} on train deploys)",
                 "policy": json.loads(target), "its_train_position": ordered.index(target) + 1,
                 "ties_on_train": sum(rank_key(train[k], constraints) == optimum_key for k in ordered),
                 "train": {"critical": train[target].critical_failures, "reward": train[target].reward,
                           "cost/scn": round(train[target].mean_cost, 4)},
                 "holdout": {"critical": holdout[target].critical_failures,
                             "cost/scn": round(holdout[target].mean_cost, 4)}}
    print(json.dumps(out), flush=True)
    methods = {"evolutionary": lambda s: evolutionary(loaded, train, s, constraints),
               "random": lambda s: random_search(loaded, train, s, constraints),
               "optuna_tpe": lambda s: optuna_search("tpe", loaded, train, s, constraints, optuna_limit),
               "optuna_nsga2": lambda s: optuna_search("nsga2", loaded, train, s, constraints, optuna_limit)}
    budget, top_k = config.search.budget, config.search.top_k
    for name, method in methods.items():
        steps = [steps_to_optimum(method(seed), train, optimum_key, constraints) for seed in range(seeds)]
        shipped = [winner_within_budget(method(seed), train, holdout, constraints, config.gate, budget, top_k)
                   for seed in range(seeds)]
        reached = sorted(s for s in steps if s is not None)
        # the median over seeds, counting a seed that never reached it as worse than any that did
        median = reached[seeds // 2] if len(reached) > seeds // 2 else None
        out[name] = {"evaluations": steps, "median": median,
                     "median_fraction_of_grid": round(median / len(train), 5) if median else None,
                     f"ships_within_budget_{budget}": sum(k is not None and rank_key(train[k], constraints)
                                                         == optimum_key for k in shipped)}
        print(name, json.dumps(out[name]), flush=True)
    return out


def llm_quality(seeds: int, budget: int) -> dict:
    """Issue 13: the LLM searcher with the shipped settings (``method: llm``: SmolLM2 on the transformers engine,
    constrained to the proposal's JSON schema) on the default config, evaluations answered from the exhaustive
    table: the share of proposals that are valid (parse and lie in the space), and whether and when its best so
    far reaches the grid's best deployable policy, against random search at the same budget."""
    from far.models.engines import EngineSpec, build_engine
    from far.search.jobs.config import ProposerSettings
    from far.search.searchers.llm_proposer import LLMProposalSearcher

    loaded = load_search_config(CONFIG, output=str(ROOT / "bench" / "out" / "unused"))
    config = loaded.config
    constraints = Constraints.from_gate(config.gate)
    train, holdout = exhaustive(loaded)
    _, target, _ = target_of(train, holdout, constraints, config.gate)
    optimum_key = rank_key(train[target], constraints)
    llm = ProposerSettings()
    lm = build_engine(EngineSpec(engine=llm.engine, model=llm.model, options=llm.engine_options))
    out: dict = {"budget": budget, "seeds": seeds, "engine": llm.engine, "model": llm.model, "runs": []}
    for seed in range(seeds):
        started = time.perf_counter()
        searcher = LLMProposalSearcher(loaded.space, lm, warmup=llm.warmup, temperature=llm.temperature,
                                       max_tokens=llm.max_tokens, seed=seed, constraints=constraints,
                                       **config.search.evolutionary.model_dump())
        proposals = list(drive(searcher, train, budget))
        counts = dict(searcher.counts)
        run = {"seed": seed, "counts": counts,
               "valid_rate": (counts["accepted"] + counts["duplicate"]) / max(1, counts["proposed"]),
               "llm_steps_to_optimum": steps_to_optimum(proposals, train, optimum_key, constraints),
               "random_steps_to_optimum": steps_to_optimum(
                   list(random_search(loaded, train, seed, constraints))[:budget], train, optimum_key, constraints),
               "seconds": round(time.perf_counter() - started, 1)}
        out["runs"].append(run)
        print("llm", json.dumps(run), flush=True)
    proposed = sum(r["counts"]["proposed"] for r in out["runs"])
    valid = sum(r["counts"]["accepted"] + r["counts"]["duplicate"] for r in out["runs"])
    out["valid_rate"] = valid / max(1, proposed)
    out["llm_reached"] = sum(r["llm_steps_to_optimum"] is not None for r in out["runs"])
    out["random_reached"] = sum(r["random_steps_to_optimum"] is not None for r in out["runs"])
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
    from far.cluster.rollout_pool import RolloutPool
    from far.search.jobs.config import load_search_config
    from far.search.searchers.tune import run_tune

    loaded = load_search_config(path)
    config = loaded.config
    evaluator = build_evaluator(config, base_dir=loaded.base_dir, rewards=loaded.rewards)
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
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--optuna-limit", type=int, default=3000, help="trials per Optuna run at most")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "search.json"))
    parser.add_argument("--skip", nargs="*", default=[], choices=["quality", "llm", "overhead", "actors"])
    parser.add_argument("--llm-seeds", type=int, default=3)
    parser.add_argument("--llm-budget", type=int, default=60)
    args = parser.parse_args()
    results: dict = {}
    if "quality" not in args.skip:
        results["search_quality"] = search_quality(args.seeds, args.optuna_limit)
        print(json.dumps(results["search_quality"]), flush=True)
    if "llm" not in args.skip:
        results["llm_quality"] = llm_quality(args.llm_seeds, args.llm_budget)
        print(json.dumps({k: v for k, v in results["llm_quality"].items() if k != "runs"}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        if "overhead" not in args.skip:
            results["tune_overhead"] = tune_overhead(Path(tmp))
            print(json.dumps(results["tune_overhead"]), flush=True)
        if "actors" not in args.skip:
            results["actors"] = actor_speedup(Path(tmp))
            print(json.dumps(results["actors"]), flush=True)
        ray.shutdown()
    write_result(args.out, results)


if __name__ == "__main__":
    run(main)
