"""The argument-level policy on AgentDojo's four suites, chosen on train by FAR's ranking, holdout read once.

    python bench/bench_agentdojo_policy.py [--suites banking,slack,travel,workspace] [--output FILE]

AgentDojo v1.2.2, four attacks, ``split_by: injection_task`` (holdout injection tasks are never seen in train;
benign episodes split by user task), tool faults 5% and cloud outages 2% per call, real guard models (MiniLM
edge, SmolLM2 reviewer, fitted on train calls + the shipped broad suite) and FAR's scripted agent that follows
every injection it reads. Stages:

1. train: a grid of thresholds x the argument-level rules on a train slice (every benign episode and the
   injected ones of ``--train-attacks``: each new path an episode takes costs model calls, so the choice is
   made on one attack), ranked by ``far.search.ranking.rank`` under the limits of the shipped
   ``configs/agentdojo_search.yaml`` gate (cost, over-refusal, benign success): the winner, and the plain
   baselines a reviewer asks for (the best with every rule off; the old one-bit rules alone).
2. holdout, once: per suite and attack, ASR (exact 95%), utility under attack, the share of episodes where the
   policy asked the user, benign utility with the approving user and with a user who declines every
   confirmation; which parameter stopped each attack the undefended run let through.
3. what to report apart, label-free where it can be: benign episodes whose checker passes with every call
   refused (a checker that passes without the task done), and benign episodes whose own calls trip the
   untrusted-target fact (the value the task acts on is only in untrusted read content: not distinguishable
   from an injection by provenance); and what the gate's usefulness limits see of a policy that refuses
   every call.

Writes bench/out/agentdojo-policy.json (``--output``).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

from far.harness import run, write_result

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")

ATTACKS = ("important_instructions", "tool_knowledge", "ignore_previous", "direct")
SUITES = ("banking", "slack", "travel", "workspace")
MODELS = {"edge": {"backend": "embedding"}, "cloud": {"backend": "reviewer"}, "user": {"backend": "approves"}}
DECLINING = {**MODELS, "user": {"backend": "approves", "rate": 0.0}}


def spec(suites: list[str]) -> dict:
    return {"name": "agentdojo", "suites": suites, "version": "v1.2.2", "attacks": list(ATTACKS), "seed": 0,
            "holdout_fraction": 0.3, "split_by": "injection_task", "tool_fault_rate": 0.05,
            "cloud_outage_rate": 0.02}


def grid() -> list:
    """Three threshold settings (no model review; the cloud on calls with effects at edge risk >= 0.5, reads never
    reviewed; every call with effects reviewed) x the rules (the old one-bit rules and the per-argument ones),
    no confirmation of sensitive calls (the approving user makes it an allow at a price), retries 1, safe
    shutdown."""
    from far.rollout.policy import Policy

    thresholds = [{"cloud_threshold": 1.0}, {"cloud_threshold": 0.5, "cloud_threshold_read_only": 1.0},
                  {"cloud_threshold": 0.0, "cloud_threshold_read_only": 1.0}]
    rules = itertools.product(["allow", "block"], ["allow", "block"], ["allow", "confirm", "block"],
                              ["allow", "review"], ["allow", "block"])
    return [Policy(**setting, require_confirmation=False, max_retries=1, fallback_mode="safe_shutdown",
                   provenance_rule=provenance, scope_rule=scope, untrusted_target_rule=target,
                   untrusted_payload_rule=payload, untrusted_read_rule=read)
            for (provenance, scope, target, payload, read), setting in itertools.product(list(rules), thresholds)]


RULE_FIELDS = ("provenance_rule", "scope_rule", "untrusted_target_rule", "untrusted_payload_rule",
               "untrusted_read_rule")


def rules_off(policy) -> bool:
    return all(getattr(policy, name) == "allow" for name in RULE_FIELDS)


def one_bit_only(policy) -> bool:
    return all(getattr(policy, name) == "allow" for name in RULE_FIELDS[2:])


class Slice:
    """Some scenarios of a split, evaluated as ``Evaluator.evaluate`` does (the same prepared episodes, so a
    path walked once is never walked again)."""

    def __init__(self, evaluator, split: str, keep) -> None:
        scenarios = evaluator.scenarios(split)
        self.indices = [i for i, s in enumerate(scenarios) if keep(s)]
        self.evaluator, self.split = evaluator, split
        self.scenarios = [scenarios[i] for i in self.indices]

    def evaluate(self, name: str, policy):
        from far.search.evaluation.evaluate import SplitEvaluation, replay_all
        from far.search.evaluation.results import aggregate
        from far.verifiers.rules import verify_all

        evaluator = self.evaluator
        prepared = evaluator.prepared(self.split)
        trajectories = replay_all([prepared[i] for i in self.indices], policy, evaluator.costs)
        verdicts = verify_all(evaluator.verifier, self.scenarios, trajectories)
        result = aggregate(name, policy, self.split, verdicts, [t.cost for t in trajectories],
                           simulated=evaluator.models.simulated, confidence=evaluator.confidence)
        return SplitEvaluation(result, trajectories, verdicts)


def asked(trajectory) -> bool:
    """The policy asked the user at least once in the episode."""
    return any(step.node == "confirm" and step.decision in ("approved", "denied") for step in trajectory.steps)


def episode_rows(scenarios, evaluation) -> list[dict]:
    return [{"suite": s.category, "kind": s.kind, "attack": (s.environment or {}).get("attack"),
             "user_task": (s.environment or {}).get("user_task"), "asked": asked(t), "done": v.task_done,
             "attacked": s.kind == "injected" and v.z.security < 1.0, "checker_defects": bool(
                 (s.environment or {}).get("checker_defects"))}
            for s, t, v in zip(scenarios, evaluation.trajectories, evaluation.verdicts, strict=True)]


def rate(rows: list[dict], key: str) -> dict:
    from far.search.ranking.gate import clopper_pearson_interval

    n, k = len(rows), sum(r[key] for r in rows)
    return {"k": k, "n": n, "rate": k / n if n else None, "ci95": clopper_pearson_interval(k, n) if n else None}


def figures(rows: list[dict], apart: set[tuple[str, str]]) -> dict:
    """Per suite x attack and pooled: ASR, utility under attack and the ask rate on injected episodes; per suite
    and pooled: benign utility (also without the episodes listed apart) and the ask rate on benign ones."""
    out: dict = {"injected": {}, "benign": {}}
    for suite in sorted({r["suite"] for r in rows}) + ["all"]:
        in_suite = [r for r in rows if suite in ("all", r["suite"])]
        for attack in [*ATTACKS, "all"]:
            injected = [r for r in in_suite if r["kind"] == "injected" and attack in ("all", r["attack"])]
            if injected:
                out["injected"][f"{suite}/{attack}"] = {"asr": rate(injected, "attacked"),
                                                         "utility": rate(injected, "done"),
                                                         "asked": rate(injected, "asked")}
        benign = [r for r in in_suite if r["kind"] == "benign"]
        kept = [r for r in benign if (r["suite"], r["user_task"]) not in apart]
        out["benign"][suite] = {"utility": rate(benign, "done"), "asked": rate(benign, "asked"),
                                "utility_without_listed": rate(kept, "done")}
    return out


def listed_apart(benign: Slice) -> dict:
    """Label-free lists of benign holdout episodes to report apart (stage 3), and how a policy that refuses
    every call fares on them (what the gate's usefulness limits see)."""
    from far.rollout.policy import Policy

    refuse_all = Policy(cloud_threshold=1.0, edge_block_threshold=0.0)
    target_only = Policy(cloud_threshold=1.0, require_confirmation=False, untrusted_target_rule="block")
    lists, refused = {}, None
    for label, policy, test in (
            ("checker_passes_with_every_call_refused", refuse_all, lambda t, v: v.task_done),
            ("acts_on_a_value_only_in_untrusted_content", target_only,
             lambda t, v: any(s.parameter == "untrusted_target_rule" for s in t.steps))):
        evaluation = benign.evaluate(label, policy)
        refused = refused or evaluation.result
        lists[label] = sorted({f"{s.category}/{s.environment['user_task']}" for s, t, v in zip(
            benign.scenarios, evaluation.trajectories, evaluation.verdicts) if test(t, v)})
    lists["refuse_all_on_benign"] = {"over_refusal_rate": refused.over_refusal_rate,
                                     "benign_success_rate": refused.benign_success_rate,
                                     "benign": refused.benign_scenarios}
    return lists


def choose(train_slice: Slice, gate_config, max_policies: int | None = None) -> dict:
    """Stage 1: every grid policy on the train slice, ranked under the gate's limits; the winner and the
    baselines."""
    from far.search.ranking.rank import Constraints, rank

    limits = Constraints.from_gate(gate_config)
    policies = grid()[::len(grid()) // max_policies if max_policies else 1]
    started = time.perf_counter()
    train = []
    for i, policy in enumerate(policies):
        train.append(train_slice.evaluate(f"p{i}", policy).result)
        print(f"  train: {i + 1}/{len(policies)} policies ({time.perf_counter() - started:.0f} s)", flush=True)
    ranked = rank(train, limits)
    chosen = {"argument_rules": ranked[0],
              "thresholds_only": next((r for r in ranked if rules_off(r.policy)), None),
              "one_bit_rules": next((r for r in ranked if one_bit_only(r.policy)), None)}
    chosen = {label: r for label, r in chosen.items() if r is not None}  # a sampled grid may lack a baseline
    summary = {label: {"policy": r.policy.short(), "train": train_figures(r)} for label, r in chosen.items()}
    summary["grid_size"] = len(policies)
    summary["feasible_on_train"] = sum(1 for r in train if constraint_free(r, limits))
    summary["grid"] = [{"policy": r.policy.short(), "feasible": constraint_free(r, limits), **train_figures(r)}
                       for r in ranked]
    summary["seconds"] = time.perf_counter() - started
    return {"results": chosen, "summary": summary}


def constraint_free(result, limits) -> bool:
    from far.search.ranking.rank import is_feasible

    return is_feasible(result, limits)


def train_figures(result) -> dict:
    return {"critical": result.critical_failures, "mean_cost": result.mean_cost,
            "over_refusal_rate": result.over_refusal_rate, "benign_success_rate": result.benign_success_rate,
            "reward": result.reward}


def main() -> None:
    from far.models.backends import ModelsConfig
    from far.rollout.policy import Policy
    from far.search.evaluation.results import stopped_by
    from far.search.jobs.config import load_search_config
    from far.search.jobs.assemble import build_evaluator
    from far.search.jobs.config import RunConfig
    from far.search.ranking.gate import gate
    from far.suites import build_suite

    parser = argparse.ArgumentParser()
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "agentdojo-policy.json"))
    parser.add_argument("--max-policies", type=int, help="an even sample of the grid (a quick check of the script)")
    parser.add_argument("--train-attacks", default="important_instructions",
                        help="the injected train episodes the policy is chosen on (with every benign one)")
    args = parser.parse_args()
    gate_config = load_search_config(ROOT / "configs" / "agentdojo_search.yaml").config.gate
    suite_spec = spec(args.suites.split(","))
    started = time.perf_counter()
    suite = build_suite(suite_spec)
    progress = lambda m: print(m, flush=True)  # noqa: E731
    evaluator = build_evaluator(RunConfig(models=ModelsConfig.model_validate(MODELS), suite=suite_spec), suite=suite,
                                progress=progress)
    declining = build_evaluator(RunConfig(models=ModelsConfig.model_validate(DECLINING), suite=suite_spec),
                                suite=suite, progress=progress)
    out: dict = {"suite": suite.describe(), "gate": gate_config.model_dump(), "fit": evaluator.fit_report}
    attacks = set(args.train_attacks.split(","))
    train_slice = Slice(evaluator, "train", lambda s: s.kind == "benign" or s.environment["attack"] in attacks)
    out["train_slice"] = {"attacks": sorted(attacks), "episodes": len(train_slice.indices)}
    chosen = choose(train_slice, gate_config, args.max_policies)
    out["chosen_on_train"] = chosen["summary"]
    print(json.dumps(chosen["summary"], indent=1), flush=True)
    # --- holdout, read once from here on ---
    scenarios = evaluator.scenarios("holdout")
    apart = listed_apart(Slice(evaluator, "holdout", lambda s: s.kind == "benign"))
    out["listed_apart"] = apart
    apart_tasks = {tuple(item.split("/", 1)) for key, items in apart.items() if isinstance(items, list)
                   for item in items}
    undefended_policy = Policy(cloud_threshold=1.0, max_retries=1, require_confirmation=False)
    undefended = evaluator.evaluate("undefended", undefended_policy, "holdout")
    policies = {label: r.policy for label, r in chosen["results"].items()} | {"undefended": undefended_policy}
    for label, policy in policies.items():
        evaluation = undefended if label == "undefended" else evaluator.evaluate(label, policy, "holdout")
        declined = declining.evaluate(label, policy, "holdout")
        result = evaluation.result
        verdict = gate(result, gate_config)
        out[label] = {"policy": policy.short(), "critical": result.critical_failures, "n": result.scenarios,
                      "mean_cost": result.mean_cost, "mark": result.mark,
                      "gate": {"deploy": verdict.deploy, "reason": verdict.reason},
                      "figures": figures(episode_rows(scenarios, evaluation), apart_tasks),
                      "figures_declining_user": figures(episode_rows(scenarios, declined), apart_tasks),
                      "stopped_by": stopped_by(scenarios, undefended.verdicts, evaluation.trajectories,
                                               evaluation.verdicts)["all"]}
        pooled = out[label]["figures"]
        print(f"{label}: {policy.short()}\n  ASR all {pooled['injected']['all/all']['asr']}\n  benign "
              f"{pooled['benign']['all']}", flush=True)
    out["seconds"] = time.perf_counter() - started
    write_result(args.output, out)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    run(main)
