"""The shift warning (``far.search.evaluation.shift``) on the suites at hand: how unlike each suite's holdout (and the other
suite's splits) is to the train split the models would be fitted on, in MiniLM's space.

    python bench/bench_shift.py [--out bench/out/shift.json]

Each row: fitting data (a suite's train split, its fit scenarios), evaluated data, the threshold (the 5%
quantile of the fitting data's out-of-fold nearest-neighbour similarity), the share of evaluated scenarios
below it (``unlike``), and whether that share crosses ``SHIFT_LIMIT``. Train splits only are fitted on.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from far.harness import run, write_result

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")

SUITES = {
    "built-in": {"name": "edge_cloud", "seed": 7, "size": 4000, "holdout_fraction": 0.3},  # configs/search.yaml
    "agentdojo": {"name": "agentdojo", "suites": ["banking", "slack"], "version": "v1.2.2",
                  "attacks": ["important_instructions"], "seed": 0, "holdout_fraction": 0.3,
                  "split_by": "injection_task"},
    "agentdojo travel": {"name": "agentdojo", "suites": ["travel"], "version": "v1.2.2",
                         "attacks": ["important_instructions"], "seed": 0, "holdout_fraction": 0.3,
                         "split_by": "injection_task"},
}
FITTED = ("built-in", "agentdojo")  # travel is only judged: guards fitted on banking + slack, run on travel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "shift.json")
    args = parser.parse_args()

    from far.models.spec import ModelsConfig
    from far.search.evaluation.fitting import fit_data
    from far.search.evaluation.shift import SHIFT_LIMIT, measure_shift, shift_encoder
    from far.suites import build_suite

    encoder = shift_encoder(ModelsConfig())
    data = {}
    for name, config in SUITES.items():
        suite = build_suite(config, ROOT)
        data[name] = {split: fit_data(suite, split) for split in ("train", "holdout")}
    rows = []
    for fitted in FITTED:
        for evaluated in SUITES:
            for split in ("holdout",) if evaluated == fitted else ("train", "holdout"):
                started = time.perf_counter()
                shift = measure_shift(f"{fitted} train", data[fitted]["train"], data[evaluated][split], encoder)
                rows.append({**shift.to_dict(), "evaluated_on": f"{evaluated} {split}",
                             "seconds": round(time.perf_counter() - started, 1)})
                print(f"fitted on {fitted} train, evaluated on {evaluated} {split}: {shift.unlike:.1%} unlike "
                      f"(threshold {shift.threshold:.3f}; limit {SHIFT_LIMIT:.0%}) "
                      f"{'SHIFTED' if shift.shifted else ''}", flush=True)
    write_result(args.out, {"suites": SUITES, "rows": rows})


if __name__ == "__main__":
    run(main)
