"""FATE benchmark (issue 7) with the real SmolLM2-135M-Instruct + LoRA on this CPU.

    python bench/bench_evolve.py [--seeds 0 1 2] [--rounds 2]

For each seed, ``far evolve configs/evolve.yaml`` (K=4, G=4, dev 32, holdout 64) runs in a fresh process with
``--rounds`` rounds and no early stopping: wall time per round, the process's peak memory, and holdout ASR,
HCR, TSR and over-refusal before round 1 and after each round. Reported per seed and as mean ± spread
(min..max) over seeds. Writes bench/out/evolve.json.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
METRICS = ("asr", "hcr", "tsr", "over_refusal", "mean_r_pf", "malformed")


def run_seed(seed: int, rounds: int, out: Path) -> dict:
    import pyarrow.parquet as pq
    import yaml

    config = yaml.safe_load((ROOT / "configs" / "evolve.yaml").read_text())
    config.update({"seed": seed, "rounds": rounds, "min_improvement": 0.0, "output": str(out),
                   "rewards": str(ROOT / "configs" / "rewards.yaml")})
    path = out.parent / f"evolve_seed{seed}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([sys.executable, "-m", "search", "evolve", str(path)], check=True, cwd=ROOT,
                   env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    peak_mib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    rows = pq.read_table(out / "rounds.parquet").to_pylist()
    return {"seed": seed, "wall_s": time.perf_counter() - started, "peak_rss_mib": peak_mib,
            "round_seconds": [r["seconds"] for r in rows[1:]],
            "rounds": [{k: r[k] for k in ("round", *METRICS, "failures", "buffer", "distinct_rate")} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    out_dir = ROOT / "bench" / "out"
    runs = [run_seed(seed, args.rounds, out_dir / f"evolve-seed{seed}") for seed in args.seeds]
    summary = {}
    for index in range(args.rounds + 1):
        values = {m: [run["rounds"][index][m] for run in runs if index < len(run["rounds"])] for m in METRICS}
        summary[f"round_{index}"] = {m: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}
                                     for m, v in values.items() if v}
    result = {"runs": runs, "summary": summary}
    (out_dir / "evolve.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
