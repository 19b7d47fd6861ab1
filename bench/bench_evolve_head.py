"""How much of a FATE round's own-TSR is the decision head's and how much the training's (issue 16).

    python bench/bench_evolve_head.py bench/out/evolve-hd1000-seed0 [--config RUN.yaml] [--rounds 0,2]

Replays a finished ``far evolve`` run offline (its config ``--config``, or beside it as ``<run>.yaml``, as
bench_evolve.py writes). For the base model (round 0) and each saved ``adapter_round<t>/``, the decision rule
is fitted afresh on the run's calibration slice (train) as a round fits it (``Evolution.calibrate``: the head,
then the caution), and the model's own decisions on the run's holdout sample are reported without the rule (the
model's argmax) and with it (holdout: reported only, never fitted on). Round 0 with the rule is the calibration
with no training at all: what FATE's training adds is the gap from it.
Prints one line per (round, head) and writes bench/out/head-<run>.json.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from far.evolve.finished_run import add_run_arguments, load_finished_run
from far.evolve.metrics import OWN_METRICS
from far.harness import run, write_result
from far.rollout.errors import FarInputError

OUT = Path(__file__).resolve().parents[1] / "bench" / "out"
FIGURES = (*OWN_METRICS, "own_separation", "asr", "hcr", "tsr", "over_refusal")  # reported on the holdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    finished, config, base = load_finished_run(parser.parse_args())
    folder, config_path, summary, rounds = finished.folder, finished.config, finished.summary, finished.rounds
    from far.evolve.decision_head import DecisionRule
    from far.evolve.loop import Evolution

    if not config.data.calibration_size:
        raise FarInputError("data.calibration_size is 0: no slice to fit a rule on", file=config_path)
    if config.calibration.harm_bar != "zero":  # kept's bar is the run's history (each kept round's decisions)
        raise FarInputError(f"harm_bar {config.calibration.harm_bar}: only zero is replayed", file=config_path,
                            field="calibration.harm_bar")
    evolution = Evolution(config, base)
    if [s.id for s in evolution.holdout] != summary["holdout"]:
        raise FarInputError(f"draws another holdout than {folder}'s summary.json", file=config_path)
    out = {"run": folder.name, "holdout": len(evolution.holdout), "calibration": len(evolution.calibration),
           "rounds": {}}
    for t in rounds:  # ascending: round 0, the base model, is decided before any adapter is loaded
        if t:
            evolution.model.load_adapter(folder / f"adapter_round{t}")
        out["rounds"][str(t)] = {}
        for rule in ("none", "head_and_caution"):
            started = time.perf_counter()
            fitted = evolution.calibrate() if rule != "none" else None
            evolution.rule = fitted.rule if fitted else DecisionRule()
            holdout = evolution.evaluate()["overall"]
            row = {"caution": evolution.rule.caution, "head_fitted": evolution.rule.head is not None,
                   "calibration": {k: fitted.figures[k] for k in OWN_METRICS} if fitted else None,
                   "holdout": {k: holdout[k] for k in FIGURES}, "seconds": time.perf_counter() - started}
            out["rounds"][str(t)][rule] = row
            print(f"round {t} rule {rule:16s}: caution {row['caution']:+.2f}; holdout own-TSR "
                  f"{holdout['own_tsr']:.3f} own-ASR {holdout['own_asr']:.3f} own-HCR {holdout['own_hcr']:.3f} "
                  f"own over-refusal {holdout['own_over_refusal']:.3f}; end to end ASR {holdout['asr']:.3f} "
                  f"HCR {holdout['hcr']:.3f} ({row['seconds']:.0f}s)", flush=True)
            write_result(OUT / f"head-{folder.name}.json", out)


if __name__ == "__main__":
    run(main)
