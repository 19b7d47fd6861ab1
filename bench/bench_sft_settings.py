"""One FATE round's lesson, taught under several SFT settings: which settings make the model tell requests apart?

    python bench/bench_sft_settings.py CONFIG.yaml [--variant 'lr=0.002,batch_size=4,max_epochs=12' ...]
                                       [--pfpo] [--set KEY=YAML ...]   (e.g. --set dev_size=64 --set pfpo.lr=5e-5)

Builds ``far evolve``'s Evolution from CONFIG (for issue 16: the unsafe base's config written by
bench_evolve_unsafe.py), finds round 1's failures on dev, proposes and selects repairs once, then, for each
variant, restores the adapter, runs SFT (and PFPO with ``--pfpo``) on the same lesson and measures:
the share of taught examples fitted, and the model's own decision rates on the **check slice** (train data
apart from dev: settings are chosen there, never on the holdout), with the seconds each step took; under
``select=check`` the check slice after every pass too, and the pass kept. ``own_separation``: how well the
caution score max(log π(escalate), log π(refuse)) − log π(handle) ranks the check slice's harmful and injected
requests above the rest (AUROC; 0.5: the model's answers move together, and no threshold tells them apart).

Writes bench/out/sft_settings-<config stem>[-pfpo][-<overrides>][-[<variant>]].json.
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

OWN = ("own_asr", "own_hcr", "own_tsr", "own_over_refusal", "own_separation")


def main() -> None:
    from bench.overrides import apply_overrides
    from evolve.config import load_evolve_config
    from evolve.loop import Evolution, holdout_metrics

    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--variant", action="append", default=[], help="sft settings, e.g. lr=0.002,batch_size=4")
    parser.add_argument("--pfpo", action="store_true", help="run PFPO after SFT, as a round does (whatever "
                        "pfpo.enabled says)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=YAML",
                        help="override a key of the config (dotted for nested: dev_size=64, pfpo.lr=5e-5, "
                             "model.lora_targets=[q_proj,v_proj])")
    args = parser.parse_args()
    config, base = load_evolve_config(args.config)
    if args.set:
        config = type(config).model_validate(apply_overrides(config.model_dump(), args.set))
    started = time.perf_counter()
    evolution = Evolution(config, base, progress=lambda m: print(m, flush=True))
    result: dict = {"config": str(args.config), "overrides": args.set,
                    "targets": list(config.model.lora_targets),
                    "pfpo": config.pfpo.model_dump(),
                    "startup_s": time.perf_counter() - started}

    def figures(scenarios) -> dict:
        scored, scores = evolution.decide_with_scores(scenarios)
        return holdout_metrics(scenarios, scored, config, scores)["overall"]

    def own(scenarios) -> dict:
        return {k: v for k, v in figures(scenarios).items() if k in OWN}

    step = time.perf_counter()
    evolution.kept_check = figures(evolution.check)  # the bar select=check judges every pass against
    result["check_before"] = {k: evolution.kept_check[k] for k in (*OWN, "mean_r_pf")}
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
        changes = [item for item in text.split(",") if item]
        settings = type(config.sft).model_validate(apply_overrides(config.sft.model_dump(), changes))
        evolution.config = config.model_copy(update={"sft": settings})
        evolution.model.restore(snapshot)
        step = time.perf_counter()
        losses, fit, passes = evolution.sft(lesson)
        row = {"variant": text or "config", "sft": settings.model_dump(), "sft_s": time.perf_counter() - step,
               "steps": len(losses), "loss_last": losses[-1] if losses else None, "passes": settings.epochs + fit.extra,
               "fit": fit.share(),
               # sft.select: check: the check slice after every pass, and the pass kept (0-based; None: none safe)
               "passes_check": [{k: m[k] for k in (*OWN[:4], "mean_r_pf")} for m in passes.check],
               "pass_kept": passes.kept}
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
    tag = ("-pfpo" if args.pfpo else "") + "".join(f"-{item}" for item in args.set) + "".join(
        f"-[{text}]" for text in args.variant)
    out = ROOT / "bench" / "out" / f"sft_settings-{Path(args.config).stem}{tag}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
