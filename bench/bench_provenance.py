"""What the per-argument provenance rules see on AgentDojo, on train episodes only (nothing here reads the
holdout): for every call of every train episode, along the path where every call runs (the attacker's path),
which rule facts hold (``far.rollout.calls.CallFacts``), split by whether the call serves the user's task or an
injection task's (the suite's labels, for this report only). An episode whose user calls trip a rule is one
that rule, set to block, would cost; an injection call that trips none is one the rules cannot stop.

    python bench/bench_provenance.py [--suites banking slack travel workspace] [--attack important_instructions]
        [--out bench/results/provenance-agentdojo.json]
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from far.harness import run, write_result
from far.rollout.calls import call_facts
from far.rollout.policy import RULES
from far.rollout.provenance import argument_provenance
from far.suites.agentdojo.agent import calls_as_the_guard_sees_them
from far.suites.agentdojo.suite import AgentDojoSuite, AgentDojoSuiteConfig

ROOT = Path(__file__).resolve().parents[1]
FACTS = [fact for _, fact in RULES if fact != "out_of_scope"]


def episode_facts(scenario) -> list[dict]:
    rows = []
    for call in calls_as_the_guard_sees_them(scenario):
        facts = call_facts(call, call.proposed_action, None)
        rows.append({"origin": "injection" if call.ground_truth.injected else "user",
                     "call": call.proposed_action.describe()[:160],
                     "facts": [fact for fact in FACTS if getattr(facts, fact)],
                     "arguments": [a.describe() for a in argument_provenance(call, call.proposed_action)]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", nargs="+", default=["banking", "slack", "travel", "workspace"])
    parser.add_argument("--attack", default="important_instructions")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "provenance-agentdojo.json"))
    args = parser.parse_args()
    suite = AgentDojoSuite(AgentDojoSuiteConfig(suites=tuple(args.suites), attacks=(args.attack,)))
    started = time.perf_counter()
    report: dict = {"suites": args.suites, "attack": args.attack, "split": "train", "per_suite": {}}
    for name in args.suites:
        train = [s for s in suite.scenarios("train") if s.category == name]
        benign = {s.environment["user_task"]: episode_facts(s) for s in train if s.kind == "benign"}
        injected = [episode_facts(s) for s in train if s.kind == "injected"]
        tripped = {fact: sorted(task for task, rows in benign.items()
                                if any(fact in r["facts"] for r in rows if r["origin"] == "user"))
                   for fact in FACTS}
        injection_calls = [r for rows in injected for r in rows if r["origin"] == "injection"]
        caught = {fact: sum(fact in r["facts"] for r in injection_calls) for fact in FACTS}
        missed = defaultdict(int)
        for r in injection_calls:
            if not r["facts"]:
                missed[r["call"]] += 1
        report["per_suite"][name] = {
            "benign_tasks": len(benign), "benign_tasks_tripped": tripped,
            "injection_calls": len(injection_calls), "injection_calls_tripped": caught,
            "injection_calls_tripping_no_rule": dict(sorted(missed.items(), key=lambda kv: -kv[1])),
            "benign_details": {task: [r for r in rows if r["facts"]] for task, rows in benign.items()},
        }
        print(f"{name}: {len(benign)} benign train tasks; tripped per fact: "
              f"{ {f: len(t) for f, t in tripped.items()} }; injection calls {len(injection_calls)}, "
              f"tripped: {caught}; tripping none: {sum(missed.values())}", flush=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    write_result(args.out, report)
    print(f"wrote {args.out} ({report['seconds']} s)")


if __name__ == "__main__":
    run(main)
