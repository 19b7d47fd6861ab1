"""Where a FATE run's own-TSR comes from: the evolving model's own decisions against the right one, per round.

    python bench/bench_evolve_confusion.py bench/out/evolve-fx1000h-seed1 [--split holdout|check] [--rounds 0,2]

Replays a finished ``far evolve`` run offline (its config ``--config``, or beside it as ``<run>.yaml``, as
bench_evolve.py writes):
for the base model and each saved ``adapter_round<t>/`` with its decision rule (caution.json), the greedy
decisions on the run's holdout sample (reported only; or its check slice) tallied as right -> made, where right is
``own_right_decision`` (refuse harm or injection, escalate what needs the cloud, handle the rest). Own-TSR
counts only the diagonal, so the tally shows which kind of request a rise came from (a rolled-back round's
folder holds the model kept, so its line repeats the round before). Prints one line per round and writes
bench/out/confusion-<run>-<split>.json.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from far.evolve.finished_run import add_run_arguments, load_finished_run
from far.evolve.metrics import OWN_METRICS
from far.harness import run, write_result

OUT = Path(__file__).resolve().parents[1] / "bench" / "out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("holdout", "check"), default="holdout")
    add_run_arguments(parser)
    args = parser.parse_args()
    finished, config, base = load_finished_run(args)
    folder, summary, rounds = finished.folder, finished.summary, finished.rounds
    import torch
    from far.evolve.calibrate import cautious_decisions
    from far.evolve.decision_head import DecisionRule
    from far.evolve.metrics import own_right_decision
    from far.evolve.policy_model import PolicyModel
    from far.evolve.task import DECISIONS, decision_messages
    from far.suites import build_suite

    suite = build_suite(config.suite, base)
    by_id = {s.id: s for split in ("train", "holdout") for s in suite.scenarios(split)}
    scenarios = [by_id[i] for i in summary[args.split]]
    model = PolicyModel(config.model)
    prompts = [model.prompt(decision_messages(s)) for s in scenarios]
    right = [own_right_decision(s) for s in scenarios]
    out = {"run": folder.name, "split": args.split, "scenarios": len(scenarios), "rounds": {}}
    for t in rounds:  # ascending: round 0, the base model, is decided before any adapter is loaded
        rule = DecisionRule()  # round 0: the base model as it is
        if t:
            adapter = folder / f"adapter_round{t}"
            model.load_adapter(adapter)
            rule = DecisionRule.from_json(json.loads((adapter / "caution.json").read_text()))
        with torch.inference_mode():
            logp = model.option_logprobs(prompts, DECISIONS).cpu().tolist()
        made = cautious_decisions(rule.scores(logp), rule.caution)
        caution = rule.caution
        tally = collections.Counter(f"{r}->{m}" for r, m in zip(right, made))
        own_tsr = OWN_METRICS["own_tsr"].mean(scenarios, made)
        out["rounds"][str(t)] = {"caution": caution, "decision_head": rule.head is not None, "own_tsr": own_tsr,
                                 "tally": dict(sorted(tally.items()))}
        print(f"round {t}: caution {caution:+.2f}{' on a head' if rule.head else ''}, own-TSR {own_tsr:.3f}, "
              f"{dict(sorted(tally.items()))}", flush=True)
    write_result(OUT / f"confusion-{folder.name}-{args.split}.json", out)


if __name__ == "__main__":
    run(main)
