"""One FATE round's lesson, taught under several SFT settings: which settings make the model tell requests apart?

    python bench/bench_sft_settings.py CONFIG.yaml [--variant 'lr=0.002,batch_size=4,max_epochs=12' ...]
                                       [--targets q_proj,v_proj] [--pfpo]

Builds ``far evolve``'s Evolution from CONFIG (for issue 16: the unsafe base's config written by
bench_evolve_unsafe.py), finds round 1's failures on dev, proposes and selects repairs once, then, for each
variant, restores the adapter, runs SFT (and PFPO with ``--pfpo``) on the same lesson and measures:
the share of taught examples fitted, and the model's own decision rates on the **check slice** (train data
apart from dev: settings are chosen there, never on the holdout), with the seconds each step took.

Writes bench/out/sft_settings-<config stem>-<targets>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

OWN = ("own_asr", "own_hcr", "own_tsr", "own_over_refusal")


def parse_variant(text: str) -> dict:
    import yaml

    return {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in text.split(",") if item)}


def main() -> None:
    from evolve.config import load_evolve_config
    from evolve.loop import Evolution, holdout_metrics

    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--variant", action="append", default=[], help="sft settings, e.g. lr=0.002,batch_size=4")
    parser.add_argument("--targets", default=None, help="model.lora_targets, comma-separated")
    parser.add_argument("--pfpo", action="store_true", help="run PFPO after SFT, as a round does")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=YAML",
                        help="override a key of the config's pfpo settings, e.g. rehearsed=false")
    parser.add_argument("--config-set", action="append", default=[], metavar="KEY=YAML",
                        help="override a top-level key of the config, e.g. dev_size=64")
    args = parser.parse_args()
    config, base = load_evolve_config(args.config)
    if args.targets:
        config = config.model_copy(update={"model": config.model.model_copy(
            update={"lora_targets": tuple(args.targets.split(","))})})
    if args.config_set:
        config = type(config).model_validate({**config.model_dump(), **parse_variant(",".join(args.config_set))})
    if args.set:
        config = config.model_copy(update={"pfpo": config.pfpo.model_copy(update=parse_variant(",".join(args.set)))})
    started = time.perf_counter()
    evolution = Evolution(config, base, progress=lambda m: print(m, flush=True))
    result: dict = {"config": str(args.config), "overrides": args.config_set,
                    "targets": list(config.model.lora_targets),
                    "pfpo": config.pfpo.model_dump(),
                    "startup_s": time.perf_counter() - started}

    def own(scenarios) -> dict:
        overall = holdout_metrics(scenarios, evolution.decide(scenarios), config)["overall"]
        return {k: overall[k] for k in OWN}

    step = time.perf_counter()
    result["check_before"] = own(evolution.check)
    result["dev_before"] = own(evolution.dev)
    step, result["before_s"] = time.perf_counter(), time.perf_counter() - step
    lesson = evolution.lesson(1, random.Random(config.seed))
    result["lesson_s"] = time.perf_counter() - step
    result["lesson"] = {"failures": len(lesson.failures), "repairs": [(f.action, c.scored.decision)
                                                                      for f, _, c, _ in lesson.buffer],
                        "rehearsed": [d for _, d in lesson.rehearsed], "examples": len(lesson.examples)}
    print(json.dumps(result, default=str), flush=True)
    snapshot = evolution.model.snapshot()
    result["variants"] = []
    for text in args.variant or [""]:
        settings = config.sft.model_copy(update=parse_variant(text))
        evolution.config = config.model_copy(update={"sft": settings})
        evolution.model.restore(snapshot)
        step = time.perf_counter()
        losses, fit = evolution.sft(lesson)
        row = {"variant": text or "config", "sft": settings.model_dump(), "sft_s": time.perf_counter() - step,
               "steps": len(losses), "loss_last": losses[-1] if losses else None, "passes": settings.epochs + fit.extra,
               "fit": fit.share()}
        if args.pfpo:
            step = time.perf_counter()
            evolution.pfpo([p for p, _ in lesson.sampled], [s for _, s in lesson.sampled], 1)
            row.update(pfpo_s=time.perf_counter() - step, fit_after_pfpo=fit.share())
        step = time.perf_counter()
        row["check"] = own(evolution.check)
        row["check_s"] = time.perf_counter() - step
        result["variants"].append(row)
        print(json.dumps(row, default=str), flush=True)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tag = "+".join(config.model.lora_targets) + ("-pfpo" if args.pfpo else "") + "".join(
        f"-{s}" for s in args.set + args.config_set)
    out = ROOT / "bench" / "out" / f"sft_settings-{Path(args.config).stem}-{tag}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
