"""FATE from a base model that is unsafe at round 0 (issue 16): does own-ASR fall, and own-TSR hold?

    python bench/bench_evolve_unsafe.py [--rounds 3] [--examples 96] [--seed 0] [--exploration 0.25] [--candidates 4]
                                        [--reuse-base]

1. The compliant base: SmolLM2-135M-Instruct + LoRA, SFT'd to answer "handle" to ``--examples`` train
   scenarios of the run's suite (``configs/evolve.yaml``'s, ``--set`` applied; every kind, harmful and injected
   included), merged and saved as a plain Hugging Face folder, one per ``--seed``. A guard that acts on
   everything: unsafe at round 0 by construction, the way a model tuned for helpfulness alone would be. Train
   data only; the holdout is never seen.
2. ``far evolve configs/evolve.yaml`` with ``model.base`` = that folder, ``--rounds`` rounds and no early stop
   (the safety gate still rolls back a round that raises own-ASR or own-HCR on the check slice).

Writes bench/out/evolve_unsafe_explore<E>-k<K>-seed<S>.json (per round: own-ASR, own-HCR, own-TSR, own
over-refusal on holdout, the rules that settled each repair, clip fraction, seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def compliant_base(folder: Path, examples: int, seed: int, suite: dict) -> dict:
    """SFT the base towards "handle" on train scenarios of the run's ``suite`` (its config's, overrides
    applied), merge the adapter, save a plain HF folder."""
    from evolve.policy_model import ModelSpec, PolicyModel
    from evolve.task import decision_messages
    from rollout.suites import build_suite

    train = list(build_suite(suite, ROOT / "configs").scenarios("train"))
    chosen = random.Random(f"compliant-{seed}").sample(train, min(examples, len(train)))
    model = PolicyModel(ModelSpec(base="smollm2", seed=seed))
    started = time.perf_counter()
    losses = model.sft([model.prompt(decision_messages(s)) for s in chosen], ["handle"] * len(chosen), epochs=2,
                       lr=5e-4, batch_size=8)
    merged = model.model.merge_and_unload()
    folder.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    kinds: dict[str, int] = {}
    for scenario in chosen:
        kinds[scenario.kind] = kinds.get(scenario.kind, 0) + 1
    return {"examples": len(chosen), "kinds": kinds, "sft_seconds": time.perf_counter() - started,
            "loss_first": losses[0], "loss_last": losses[-1]}


def main() -> None:
    import pyarrow.parquet as pq
    import yaml

    from bench.overrides import apply_overrides

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exploration", type=float, default=0.0, help="evolve.exploration for the run")
    parser.add_argument("--candidates", type=int, default=None, help="evolve.candidates (K) for the run "
                        "(default: configs/evolve.yaml's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=YAML",
                        help="override a key of the evolve config (dotted for nested: model.lora_r=32)")
    parser.add_argument("--reuse-base", action="store_true", help="keep a compliant base built earlier")
    parser.add_argument("--workdir", default=str(ROOT / "bench" / "out" / "evolve_unsafe"))
    args = parser.parse_args()
    workdir = Path(args.workdir)
    config = yaml.safe_load((ROOT / "configs" / "evolve.yaml").read_text())
    if args.candidates is not None:
        config.setdefault("repair", {})["candidates"] = args.candidates
    apply_overrides(config, args.set)
    base = workdir / f"compliant-base-seed{args.seed}"  # each seed's unsafe base built on its own
    if args.reuse_base and (base / "config.json").is_file():
        result: dict = {"base": {"reused": str(base)}}
    else:
        result = {"base": compliant_base(base, args.examples, args.seed, config["suite"])}
    print(json.dumps(result["base"]), flush=True)
    candidates = config.get("repair", {}).get("candidates", 4)
    tag = f"explore{args.exploration:g}-k{candidates}-seed{args.seed}" + "".join(
        f"-{item.replace('=', '')}" for item in args.set)
    run = workdir / f"run-{tag}"
    apply_overrides(config, ["gate.min_improvement=0.0", f"repair.exploration={args.exploration}"])
    config.update({"seed": args.seed, "rounds": args.rounds, "output": str(run),
                   "rewards": str(ROOT / "configs" / "rewards.yaml"), "model": {**config["model"], "base": str(base)}})
    path = workdir / f"evolve-{tag}.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "far", "evolve", str(path)], check=True, cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    rows = pq.read_table(run / "rounds.parquet").to_pylist()
    result["rounds"] = rows
    result["kept_round"] = json.loads((run / "summary.json").read_text())["kept_round"]  # the round a run returns
    result["wall_s"] = time.perf_counter() - started
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out = ROOT / "bench" / "out" / f"evolve_unsafe_{tag}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
