"""Encoders at the CPU's speed (issue 53): texts/s per precision on this host, and what bf16 does to the guards.

    python bench/bench_encode.py [--texts 192] [--suites edge_cloud,agentdojo,broad_requests]
                                 [--out bench/out/encode.json]

Host: the CPU model and flags (the result's ``machine``, ``far.harness.machine``) and whether torch finds AMX /
AVX512-BF16 (``torch``: ``far.models.encoders.bf16_native``, what ``precision: auto`` follows), and the matmul
rate torch reaches on both cores in fp32 and bf16 (square 1024).

Speed: for each encoder (MiniLM for the edge, SmolLM2 layer 20 for the reviewer), uncached texts/s on a fixed
random sample of the built-in suite's distinct probe texts, as FAR runs it (by length, every core), in fp32 and
in bf16 autocast, and the smallest cosine between a text's fp32 and bf16 vectors.

Figures: for each suite and guard, the shipped fit (the suite's train split plus ``broad_requests``', balanced,
holdout content dropped; broad_requests alone for itself), once on fp32 vectors and once on bf16, scored on
the suite's holdout: AUROC and TPR at 5% FPR per precision and the change. The issue allows < 0.005.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from far.harness import machine, run, write_result
from far.search.evaluation.guards import BROAD, SUITES, fitted, guard_model, guard_scores, roc_figures, split_data

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")
DIGITS = 4  # the figures' rounding in the result file


def progress(message: str) -> None:
    print(message, flush=True)


def torch_on_cpu() -> dict:
    """What torch finds on this CPU: the kernels it dispatches to, and whether bf16 runs natively (what
    ``precision: auto`` follows). The CPU's model, flags and cores: ``far.harness.machine``."""
    import torch
    from far.models.encoders import bf16_native

    return {"capability": torch.backends.cpu.get_cpu_capability(), "bf16_native": bf16_native()}


def matmul_peak(dtype_name: str, size: int = 1024, seconds: float = 3.0) -> float:
    """GFLOP/s of square matmuls in ``dtype_name`` on every core: about the best an encoder can do here."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        done += 1
    return 2 * size ** 3 * done / (time.perf_counter() - started) / 1e9


def speed(texts: list[str]) -> list[dict]:
    import numpy as np
    from far.models.encoders import MiniLMEncoder, SmolLM2Encoder

    rows = []
    for name, kind in (("MiniLM (edge)", MiniLMEncoder), ("SmolLM2 layer 20 (reviewer)", SmolLM2Encoder)):
        vectors = {}
        for precision in PRECISIONS:
            encoder = kind(precision=precision)
            encoder.encode(texts[:4])  # load the weights outside the timing
            started = time.perf_counter()
            vectors[precision] = encoder.encode(texts)
            rows.append({"encoder": name, "precision": precision,
                         "texts_per_s": round(len(texts) / (time.perf_counter() - started), 1)})
        a, b = vectors["fp32"], vectors["bf16"]
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        rows[-1]["min_cosine_to_fp32"] = round(float(cosine.min()), 6)
        rows[-1]["speedup"] = round(rows[-1]["texts_per_s"] / rows[-2]["texts_per_s"], 2)
        for row in rows[-2:]:
            print(json.dumps(row), flush=True)
    return rows


def figures(names: list[str]) -> list[dict]:
    """Holdout AUROC / TPR at 5% FPR of the shipped fit, per suite, guard and precision, and the change."""
    import numpy as np
    from far.rollout.scenario import model_input

    data = split_data(names, progress)
    rows = []
    for role in ("edge", "cloud"):
        label = type(guard_model(role, "fp32")).label
        for name in names:
            holdout = data[name]["holdout"]
            parts = [data[name]["train"]] + ([data[BROAD]["train"]] if name != BROAD and BROAD in data else [])
            labels = np.array([label(s) for s in holdout])
            row = {"role": role, "suite": name, "n": len(holdout), "positives": int(labels.sum())}
            for precision in PRECISIONS:
                guard = fitted(role, parts, {model_input(s) for s in holdout}, precision, progress)
                row[precision] = roc_figures(labels, guard_scores(guard, holdout), digits=DIGITS)
            row["auroc_change"] = round(row["bf16"]["auroc"] - row["fp32"]["auroc"], 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=192)
    parser.add_argument("--suites", default="edge_cloud,agentdojo,broad_requests")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "encode.json")
    args = parser.parse_args()

    from far.models.encoders import load_torch
    from far.models.probe import probe_text
    from far.suites import build_suite

    started = time.time()
    load_torch(None)
    about = {"machine": machine(), "torch": torch_on_cpu()}
    print(json.dumps(about), flush=True)
    peaks = {precision: round(matmul_peak(precision), 1) for precision in PRECISIONS}
    print(f"matmul GFLOP/s, every core: {peaks}", flush=True)
    suite = build_suite(SUITES["edge_cloud"])
    texts = sorted({probe_text(s) for split in ("train", "holdout") for s in suite.scenarios(split)})
    texts = random.Random(0).sample(texts, min(args.texts, len(texts)))
    result = {"date": time.strftime("%Y-%m-%d"), "torch": about["torch"], "matmul_gflop_s": peaks, "texts": len(texts),
              "speed": speed(texts), "figures": figures(args.suites.split(",")) if args.suites else []}
    result["seconds"] = round(time.time() - started)
    write_result(args.out, result)
    print(f"wrote {args.out} in {result['seconds']} s")


if __name__ == "__main__":
    run(main)
