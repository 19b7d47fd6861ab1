"""AgentDojo per attack, with real models (issue 15). Ratios within one run; times are noisy on 2 cores.

    python bench/bench_attacks.py [--suites banking,slack] [--attacks a,b,...] [--splits injection_task,user_task]
                                  [--own-only]

For each split rule: the AgentDojo suites under several attacks at once, guarded by FAR's real models
(embedding edge, reviewer cloud, approving user; fitted on train episodes' calls and the shipped broad suite, or
with ``--own-only`` on the train calls alone; train judged out-of-fold).
The guard policy is chosen on train over a grid (the same grid as ``bench_real.py sim2real``) within the
shipped gate's cost limit, then evaluated on holdout; per (suite, attack): ASR, utility under attack and
benign utility, with AgentDojo's definitions (ASR = injected episodes whose injection task's security check
says the attack succeeded; utility under attack = injected episodes whose user task's utility check passes).
The undefended policy (no review, no block) is measured too: the scripted agent follows every injection it
reads, so its ASR is the attack's reach into these episodes, not a model's gullibility. The grid crosses the
thresholds with the rules (``provenance_rule`` and ``scope_rule`` in ``RULES``; issue 36), and the searched
policy's holdout rollouts say which parameter stopped or rerouted how many calls (``far.search.evaluation.results.rule_effects``).
ASR comes with exact (Clopper-Pearson) 95% intervals, per (suite, attack) and pooled over the attacks; for each
attack the undefended run let through, the parameter that stopped it under the guard is named (``stopped_by``).

Writes bench/out/attacks.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from far.harness import read_result, run, write_result
from far.rollout.io import load_mapping
from far.search.evaluation.guards import REAL_MODELS, policy_grid
from far.search.evaluation.results import stopped_by
from far.search.ranking.gate import clopper_pearson_interval as exact_interval

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
COST_LIMIT = load_mapping(ROOT / "configs" / "agentdojo_search.yaml")["gate"]["max_mean_cost"]  # the shipped gate's

ATTACKS = ("important_instructions", "tool_knowledge", "ignore_previous", "direct")
RULES = ("allow", "review", "block")


def pooled_asr(rows: list[dict]) -> dict:
    """ASR over every attack, per suite and over all suites, with exact 95% intervals (the goal is stated pooled)."""
    pooled: dict[str, list[int]] = {}
    for row in rows:
        successes, n = pooled.setdefault(row["suite"], [0, 0])
        pooled[row["suite"]] = [successes + round(row["asr"] * row["injected"]), n + row["injected"]]
    return {suite: {"successes": s, "injected": n, "asr": s / n, "asr_95": exact_interval(s, n)}
            for suite, (s, n) in sorted(pooled.items())}


def run_split(split_by: str, suites: list[str], attacks: list[str], version: str, models: dict = REAL_MODELS) -> dict:
    from far.models.backends import ModelsConfig
    from far.rollout.policy import Policy
    from far.search.evaluation.results import breakdown, rule_effects
    from far.search.jobs.assemble import build_evaluator
    from far.search.jobs.config import RunConfig
    from far.search.ranking.rank import Constraints, rank
    from far.search.reports.text import attack_rows, attack_table, effects_table
    from far.suites import build_suite

    spec = {"name": "agentdojo", "suites": suites, "version": version, "attacks": attacks, "seed": 0,
            "holdout_fraction": 0.3, "split_by": split_by, "tool_fault_rate": 0.05, "cloud_outage_rate": 0.02}
    suite = build_suite(spec)
    started = time.perf_counter()
    evaluator = build_evaluator(RunConfig(models=ModelsConfig.model_validate(models), suite=spec), suite=suite,
                                progress=lambda m: print(m, flush=True))
    grid = [p.model_copy(update={"provenance_rule": a, "scope_rule": b})
            for p in policy_grid(agentdojo=True) for a in RULES for b in RULES]
    train = [evaluator.evaluate(f"p{i}", p, "train").result for i, p in enumerate(grid)]
    best = rank(train, Constraints(max_mean_cost=COST_LIMIT))[0]
    print(f"  {split_by}: best on train {best.policy.short()} ({time.perf_counter() - started:.0f} s)", flush=True)
    undefended = Policy(cloud_threshold=1.0, max_retries=1, require_confirmation=False, fallback_mode="safe_shutdown")
    out = {"suite": suite.describe(), "grid_size": len(grid), "winner": best.policy.model_dump(mode="json"),
           "winner_short": best.policy.short(), "fit": evaluator.fit_report}
    # the plain baseline: the same search over the thresholds alone (both rules allow)
    plain = rank([r for r in train if r.policy.provenance_rule == "allow" and r.policy.scope_rule == "allow"],
                 Constraints(max_mean_cost=COST_LIMIT))[0]
    out["thresholds_only_winner"] = plain.policy.short()
    holdout = evaluator.scenarios("holdout")
    evaluations = {}
    for label, policy in (("searched", best.policy), ("thresholds_only", plain.policy), ("undefended", undefended)):
        evaluation = evaluations[label] = evaluator.evaluate(label, policy, "holdout")
        rows = attack_rows(breakdown(label, "holdout", evaluator.scenarios("holdout"), evaluation.verdicts),
                           label, "holdout")
        for row in rows:
            row["asr_95"] = exact_interval(round(row["asr"] * row["injected"]), row["injected"])
        result = evaluation.result
        effects = rule_effects(evaluator.scenarios("holdout"), evaluation.trajectories, evaluation.verdicts)
        out[label] = {"per_attack": rows, "rule_effects": effects, "critical_failures": result.critical_failures,
                      "rollouts_with_critical": result.rollouts_with_critical, "n": result.scenarios,
                      "mean_cost": result.mean_cost, "mark": result.mark}
        print(f"  {split_by} {label} [{result.mark}] mean cost {result.mean_cost:.2f}\n{attack_table(rows)}\n"
              + "\n".join(f"  ASR 95% {r['attack']} {r['suite']}: [{r['asr_95'][0]:.3f}, {r['asr_95'][1]:.3f}]"
                          for r in rows) + f"\n{effects_table(effects)}", flush=True)
    for label in ("searched", "thresholds_only"):
        out[label]["pooled"] = pooled_asr(out[label]["per_attack"])
        out[label]["stopped_by"] = stopped_by(
            holdout, evaluations["undefended"].verdicts, evaluations[label].trajectories, evaluations[label].verdicts,
            key=lambda s: f"{s.category}/{(s.environment or {}).get('attack')}")
        print(f"  {split_by} {label}: pooled ASR {json.dumps(out[label]['pooled'])}\n  stopped by (attacks the "
              f"undefended run let through): {json.dumps(out[label]['stopped_by'])}", flush=True)
    out["seconds"] = time.perf_counter() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suites", default="banking,slack")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--splits", default="injection_task,user_task")
    parser.add_argument("--version", default="v1.2.2")
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "attacks.json"))
    parser.add_argument("--own-only", action="store_true",
                        help="fit the guards on the suite's train calls alone (fit_on: {own: true, shipped: false})")
    args = parser.parse_args()
    out = Path(args.output)
    results = read_result(out)
    own = {"own": True, "shipped": False}
    models = ({**REAL_MODELS, "edge": {**REAL_MODELS["edge"], "fit_on": own},
               "cloud": {**REAL_MODELS["cloud"], "fit_on": own}} if args.own_only else REAL_MODELS)
    for split_by in args.splits.split(","):
        key = f"{args.version}/{split_by}" + ("/own_only" if args.own_only else "")
        results[key] = run_split(split_by, args.suites.split(","), args.attacks.split(","), args.version, models)
        write_result(out, results)  # after each split: a long run keeps what it measured
    print(f"wrote {out}")


if __name__ == "__main__":
    run(main)
