"""Encoding speed of the two probe encoders on the built-in suite's texts (issue 38's first-run goal), uncached.

    python bench/bench_encode.py [--texts 192] [--out bench/out/encode.json]

For each encoder (MiniLM for the edge, SmolLM2 layer 20 for the reviewer) and each way of running it: texts per
second on a fixed random sample of the distinct probe texts of ``configs/search.yaml``'s suite, and the largest
relative change of a vector against the first way (float rounding only, or the figures would move).

    shipped order   the texts in the order given (what FAR did before batching by length)
    by length       FAR's SmolLM2 encoder: batches of similar length (MiniLM's sentence-transformers sorts itself)
    2 threads       by length, with torch on both cores (the default now: ``threads`` None = every core)

And how far each rate is from what this CPU can do at all: the matmul work per text (2 x the parameters of the
layers it runs through x its tokens) times the rate, against the fp32 matmul rate torch reaches on the same
cores (square 1024 matmuls), and the share of that peak the issue's goal rate would need.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def timed(encode, texts):
    started = time.perf_counter()
    vectors = encode(texts)
    return vectors, len(texts) / (time.perf_counter() - started)


GOALS = {"MiniLM (edge)": 150.0, "SmolLM2 layer 20 (reviewer)": 20.0}  # texts/s, issue 38


def matmul_peak(threads: int, size: int = 1024, seconds: float = 3.0) -> float:
    """GFLOP/s of fp32 square matmuls on ``threads`` cores: about the best any fp32 encoder can do here."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        done += 1
    return 2 * size ** 3 * done / (time.perf_counter() - started) / 1e9


def gflop_per_text(layers, tokenizer, texts) -> float:
    """Matmul work of one text, on average: 2 x the layers' parameters x its tokens (attention over ~60 tokens
    and the embeddings add a few per cent: left out, so the figure is a floor)."""
    parameters = sum(p.numel() for p in layers.parameters())
    tokens = sum(len(tokenizer(t)["input_ids"]) for t in texts) / len(texts)
    return 2 * parameters * tokens / 1e9


def relative_change(a, b) -> float:
    import numpy as np

    return float((np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=192)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "encode.json")
    args = parser.parse_args()

    import numpy as np

    from rollout.models.encoders import MiniLMEncoder, SmolLM2Encoder
    from rollout.models.probe import probe_text
    from rollout.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(name="edge_cloud", seed=7, size=4000, holdout_fraction=0.3))
    texts = sorted({probe_text(s) for split in ("train", "holdout") for s in suite.scenarios(split)})
    texts = random.Random(0).sample(texts, min(args.texts, len(texts)))
    rows = []
    work: dict[str, float] = {}  # encoder -> GFLOP per text
    for name, encoder in (("MiniLM (edge)", MiniLMEncoder(threads=1)),
                          ("SmolLM2 layer 20 (reviewer)", SmolLM2Encoder(threads=1))):
        encoder.encode(texts[:4])  # load the weights outside the timing
        if isinstance(encoder, SmolLM2Encoder):  # the order FAR batched in before: as given
            def given_order(batch, encoder=encoder):
                return np.concatenate([encoder.encode([t for t in batch[i:i + encoder.batch_size]])
                                       for i in range(0, len(batch), encoder.batch_size)])
        else:
            given_order = encoder.encode
        reference, rate = timed(given_order, texts)
        rows.append({"encoder": name, "way": "shipped order, 1 thread", "texts_per_s": round(rate, 1),
                     "max_relative_change": 0.0})
        vectors, rate = timed(encoder.encode, texts)
        rows.append({"encoder": name, "way": "by length, 1 thread", "texts_per_s": round(rate, 1),
                     "max_relative_change": relative_change(vectors, reference)})
        encoder.threads = 2  # FAR's default: every core this process may use (two here)
        vectors, rate = timed(encoder.encode, texts)
        rows.append({"encoder": name, "way": "by length, 2 threads", "texts_per_s": round(rate, 1),
                     "max_relative_change": relative_change(vectors, reference)})
        for row in rows[-3:]:
            print(f"{row['encoder']:<28} {row['way']:<24} {row['texts_per_s']:>7.1f} texts/s  "
                  f"max relative change {row['max_relative_change']:.1e}", flush=True)
        if isinstance(encoder, SmolLM2Encoder):
            work[name] = gflop_per_text(encoder._model.layers, encoder._tokenizer, texts)
        else:
            work[name] = gflop_per_text(encoder._model[0].auto_model.encoder, encoder._model.tokenizer, texts)
    peak = matmul_peak(threads=2)
    print(f"fp32 matmul peak, 2 threads: {peak:.0f} GFLOP/s", flush=True)
    headroom = []
    for name, gflop in work.items():
        rate = next(r["texts_per_s"] for r in rows if r["encoder"] == name and r["way"] == "by length, 2 threads")
        headroom.append({"encoder": name, "gflop_per_text": round(gflop, 3), "gflop_per_s": round(gflop * rate, 1),
                         "share_of_peak": round(gflop * rate / peak, 3), "goal_texts_per_s": GOALS[name],
                         "goal_share_of_peak": round(gflop * GOALS[name] / peak, 3)})
        row = headroom[-1]
        print(f"{name:<28} {gflop:.2f} GFLOP/text: {row['gflop_per_s']:.0f} GFLOP/s = {row['share_of_peak']:.0%} "
              f"of peak; the goal ({GOALS[name]:.0f}/s) needs {row['goal_share_of_peak']:.0%}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"texts": len(texts), "rows": rows, "matmul_peak_gflop_s": round(peak, 1),
                                    "headroom": headroom}, indent=2))


if __name__ == "__main__":
    main()
