"""int8 encoders: speed against the change in the probes' holdout AUROC (issue 38: a speed-up counts only where
AUROC on the holdouts moves by less than 0.005).

    python bench/bench_quantize.py [--texts 192] [--agentdojo banking slack] [--out bench/out/quantize.json]

For MiniLM (the edge) and SmolLM2 layer 20 (the reviewer), in float32 and with int8 linear layers
(``encoder_options: {int8: true}``): texts per second on a fixed sample of the built-in suite's probe texts
(torch on every core, FAR's default), and the holdout AUROC of the class-balanced logistic probe fitted on
train, on the built-in suite and on AgentDojo (bench_real.py's survey data: split by template / by user task,
holdout content dropped from train). Encodings go through the model-call cache: float32 ones are usually there.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_real import probe_scores, roc, survey_data  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=192)
    parser.add_argument("--agentdojo", nargs="+", default=["banking", "slack"])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "quantize.json")
    args = parser.parse_args()

    from rollout.models.encoders import build_encoder
    from rollout.models.probe import probe_text
    from rollout.models.spec import CacheConfig, open_cache

    data = survey_data(args.agentdojo)
    cache = open_cache(CacheConfig())
    texts = sorted({probe_text(s) for split in ("train", "holdout") for s in data["edge_cloud"][split]})
    sample = random.Random(0).sample(texts, min(args.texts, len(texts)))
    rows = []
    for name in ("minilm", "smollm2"):
        for int8 in (False, True):
            encoder = build_encoder(name, {"int8": int8}, "bench")
            encoder.encode(sample[:4])  # weights loaded (and quantised) outside the timing
            started = time.perf_counter()
            encoder.encode(sample)
            row = {"encoder": encoder.model_id, "int8": int8,
                   "texts_per_s": round(len(sample) / (time.perf_counter() - started), 1)}
            for suite in data:
                scores, labels = probe_scores(encoder, cache, data[suite]["train"], data[suite]["holdout"],
                                              f"{name} probe")
                row[f"auroc_{suite}"] = round(roc(labels, scores)["auroc"], 4)
                row[f"holdout_{suite}"] = len(labels)
            rows.append(row)
            print(json.dumps(row), flush=True)
        float32, int8_row = rows[-2], rows[-1]
        print(f"{name}: int8 x{int8_row['texts_per_s'] / float32['texts_per_s']:.2f} texts/s; AUROC change "
              + ", ".join(f"{suite} {int8_row[f'auroc_{suite}'] - float32[f'auroc_{suite}']:+.4f}" for suite in data),
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sample_texts": len(sample), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
