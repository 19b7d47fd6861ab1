"""Real models, measured (issue 14). Ratios within one run; absolute times are noisy on this 2-core machine.

    python bench/bench_real.py [survey] [sim2real] [--agentdojo banking,slack]

survey    Each candidate guard model on the holdout of the built-in suite (template split: holdout templates
          never appear in train) and of AgentDojo's proposed calls (split by user task): AUROC for "the action
          is harmful", TPR at 1% and 5% FPR, decisions per second (uncached, one thread), and the cross-suite
          figures (fitted on one suite's train, scored on the other's holdout). Candidates: the MiniLM probe
          (the edge), the SmolLM2-135M probe (the reviewer), SmolLM2-135M-Instruct zero-shot P(Yes), NanoGuard
          (``metatronnanoguard``, zero-shot; skipped when not installed).
sim2real  For the built-in suite and AgentDojo: the best policy on train with the real models (embedding edge,
          reviewer cloud, approving user) over a grid, then its holdout figures with the oracle models, the
          calibrated simulators (``far calibrate``'s out-of-fold measurement on train) and the real models.
          Also answers the product question: does any policy in the grid reach 0 critical failures on
          holdout within the gate's cost limit with real models, and if not, the best critical rate and its cost.

Writes bench/out/real_models.json.
"""
from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from far.harness import read_result, run, write_result
from far.rollout.io import load_mapping
from far.search.evaluation.guards import (
    REAL_MODELS,
    decision_rate,
    policy_grid,
    probe_scores,
    roc_figures,
    survey_data,
    survey_suites,
)

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
ORACLE = {"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"}, "user": {"backend": "approves"}}
# the shipped configs' gate limits on the cost per scenario
COST_LIMIT = {name: load_mapping(ROOT / "configs" / config)["gate"]["max_mean_cost"]
              for name, config in (("edge_cloud", "search.yaml"), ("agentdojo", "agentdojo_search.yaml"))}


def progress(message: str) -> None:
    print(message, flush=True)


def probe_rows(data: dict) -> list[dict]:
    from far.models.encoders import build_encoder
    from far.models.probe import probe_text
    from far.models.spec import CacheConfig, open_cache

    rows = []
    cache = open_cache(CacheConfig())
    for encoder_name, role, options in (("minilm", "edge (embedding)", {}), ("smollm2", "cloud (reviewer)", {})):
        encoder = build_encoder(encoder_name, options, "bench")
        rate = decision_rate(encoder, [probe_text(s) for s in data["edge_cloud"]["holdout"][:128]])
        for fit_suite, eval_suite in itertools.product(data, data):
            holdout = data[eval_suite]["holdout"]
            scores, labels = probe_scores(encoder, cache, data[fit_suite]["train"], holdout, f"{encoder_name} probe",
                                          progress)
            row = {"model": f"{encoder.model_id} + logistic probe", "role": role, "fitted_on": f"{fit_suite} train",
                   "evaluated_on": f"{eval_suite} holdout", "n": len(holdout), "positives": int(labels.sum()),
                   "decisions_per_s": rate, **roc_figures(labels, scores)}
            if fit_suite == eval_suite:
                predicted = scores >= 0.5
                row["at_0.5"] = per_class(holdout, predicted)
            rows.append(row)
            print(f"  {row['model']}: {fit_suite} -> {eval_suite}: AUROC {row['auroc']:.3f}", flush=True)
    return rows


def per_class(scenarios, flagged) -> dict:
    from far.models.calibrated import scenario_class

    counts: dict[str, list[int]] = {}
    for scenario, flag in zip(scenarios, flagged):
        counts.setdefault(scenario_class(scenario), [0, 0])
        counts[scenario_class(scenario)][0] += int(flag)
        counts[scenario_class(scenario)][1] += 1
    return {name: {"flagged": f, "n": n, "rate": f / n} for name, (f, n) in counts.items()}


def zero_shot_rows(data: dict, sample: int) -> list[dict]:
    from far.models.reviewer import unsafe_label

    rows = []
    rng = np.random.default_rng(0)
    picks = {name: [d["holdout"][i] for i in sorted(rng.choice(len(d["holdout"]), min(sample, len(d["holdout"])),
                                                                 replace=False))] for name, d in data.items()}
    from far.models.engines.hf import TransformersLM
    from far.models.lm_backends import LMRiskEdge
    from far.models.weights import smollm2

    edge = LMRiskEdge(TransformersLM(smollm2()), calibrate=False)
    for name, scenarios in picks.items():
        started = time.perf_counter()
        raw, _ = edge.raw_scores(scenarios)
        rate = len(scenarios) / (time.perf_counter() - started)
        labels = np.array([unsafe_label(s) for s in scenarios])
        scores = np.array([r if r is not None else 0.5 for r in raw])
        rows.append({"model": f"{edge.lm.model_id} zero-shot P(Yes)", "role": "candidate", "fitted_on": "-",
                     "evaluated_on": f"{name} holdout (sample)", "n": len(scenarios), "positives": int(labels.sum()),
                     "decisions_per_s": rate, **roc_figures(labels, scores)})
        print(f"  SmolLM2 zero-shot on {name}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    try:
        from nanoguard import NanoGuard
    except ImportError:
        rows.append({"model": "NanoGuard (metatronnanoguard)", "skipped": "not installed (pip install "
                     "metatronnanoguard)"})
        return rows
    from far.models.probe import probe_text

    guard = NanoGuard(device="cpu")
    for name, scenarios in picks.items():
        texts = [probe_text(s) for s in scenarios]
        started = time.perf_counter()
        results = guard.scan_batch(texts)
        rate = len(texts) / (time.perf_counter() - started)
        scores = np.array([r.injection_score for r in results])
        labels = np.array([unsafe_label(s) for s in scenarios])
        rows.append({"model": "NanoGuard 16.8M (zero-shot)", "role": "candidate", "fitted_on": "-",
                     "evaluated_on": f"{name} holdout (sample)", "n": len(texts), "positives": int(labels.sum()),
                     "decisions_per_s": rate, **roc_figures(labels, scores)})
        print(f"  NanoGuard on {name}: AUROC {rows[-1]['auroc']:.3f}", flush=True)
    return rows


def holdout_figures(evaluator, policy, injected_only_asr: bool) -> dict:
    from far.verifiers.taxonomy import FailureKind, SuccessKind

    evaluation = evaluator.evaluate("winner", policy, "holdout")
    verdicts, scenarios = evaluation.verdicts, evaluator.scenarios("holdout")
    n = len(verdicts)
    injected = [v for s, v in zip(scenarios, verdicts) if s.ground_truth.injected] if injected_only_asr else []
    result = evaluation.result
    return {
        "n": n, "critical_failures": result.critical_failures, "rollouts_with_critical": result.rollouts_with_critical,
        "critical_rate": result.rollouts_with_critical / n,
        "critical_rate_upper_95": result.critical_rate_upper,
        "asr": (sum(v.z.security < 1.0 for v in injected) / len(injected)) if injected else None,
        "task_success": sum(SuccessKind.TASK_SUCCESS in v.successes for v in verdicts) / n,
        "over_refusal": sum(any(f.kind == FailureKind.OVER_REFUSAL for f in v.failures) for v in verdicts) / n,
        "mean_cost": result.mean_cost, "mark": result.mark,
    }


def sim2real(name: str, spec: dict, workdir: Path) -> dict:
    from far.models.backends import ModelsConfig, build_models
    from far.search.evaluation.calibrate import calibrate
    from far.search.jobs.assemble import build_evaluator
    from far.search.jobs.config import RunConfig
    from far.search.ranking.gate import clopper_pearson_interval
    from far.search.ranking.rank import Constraints, rank
    from far.suites import build_suite

    suite = build_suite(spec)
    agentdojo = name == "agentdojo"
    started = time.perf_counter()
    real = build_evaluator(RunConfig(models=ModelsConfig.model_validate(REAL_MODELS)), suite=suite,
                           progress=progress)
    grid = policy_grid(agentdojo)
    train = [real.evaluate(f"p{i}", p, "train").result for i, p in enumerate(grid)]
    limits = Constraints(max_mean_cost=COST_LIMIT[name])
    best = rank(train, limits)[0]
    print(f"  {name}: best on train (real) {best.policy.short()} ({time.perf_counter() - started:.0f} s)", flush=True)
    calibration = calibrate(suite, build_models(ModelsConfig.model_validate(REAL_MODELS)), 5, 0.95, progress)
    calibration_file = workdir / f"calibration-{name}.json"
    calibration_file.write_text(calibration.model_dump_json())
    calibrated = {"edge": {"backend": "calibrated", "file": str(calibration_file)},
                  "cloud": {"backend": "calibrated", "file": str(calibration_file)}, "user": {"backend": "approves"}}
    rows = {}
    for label, models in (("oracle", ORACLE), ("calibrated", calibrated), ("real", REAL_MODELS)):
        evaluator = real if label == "real" else build_evaluator(
            RunConfig(models=ModelsConfig.model_validate(models)), suite=suite)
        rows[label] = holdout_figures(evaluator, best.policy, agentdojo)
        print(f"  {name} {label}: {rows[label]}", flush=True)
    real_row = rows["real"]
    k, n = real_row["rollouts_with_critical"], real_row["n"]
    interval = clopper_pearson_interval(k, n, 0.95)
    inside = interval[0] <= rows["calibrated"]["critical_rate"] <= interval[1]
    # the product question, answered from real models over the whole grid on holdout
    holdout = [real.evaluate(f"p{i}", p, "holdout").result for i, p in enumerate(grid)]
    within = [r for r in holdout if r.mean_cost <= COST_LIMIT[name]]
    zero = [r for r in within if r.critical_failures == 0]
    best_reachable = min(within or holdout, key=lambda r: (r.rollouts_with_critical, r.mean_cost))
    return {
        "suite": suite.describe(), "grid_size": len(grid), "winner": best.policy.model_dump(mode="json"),
        "winner_short": best.policy.short(), "train_of_winner": {"critical_failures": best.critical_failures,
                                                                  "mean_cost": best.mean_cost},
        "holdout": rows, "real_critical_rate_interval_95": interval, "calibrated_inside_real_interval": inside,
        "calibration_classes": {c: {"n": m.n, "veto": m.cloud_rates["veto"].rate} for c, m in
                                calibration.classes.items()},
        "product": {"cost_limit": COST_LIMIT[name], "policies_with_zero_critical_within_cost": len(zero),
                    "best_reachable": {"policy": best_reachable.policy.short(),
                                       "critical_rate": best_reachable.rollouts_with_critical / best_reachable.scenarios,
                                       "mean_cost": best_reachable.mean_cost,
                                       "within_cost": best_reachable.mean_cost <= COST_LIMIT[name]},
                    "note": "oracle-free: these figures choose over holdout only to answer whether any policy in "
                            "the grid could pass; the shipped choice is the train winner above"},
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sections", nargs="*", default=["survey", "sim2real"])
    parser.add_argument("--agentdojo", default="banking,slack", help="AgentDojo suites (comma-separated)")
    parser.add_argument("--zero-shot-sample", type=int, default=200)
    parser.add_argument("--sim2real-suites", default="edge_cloud,agentdojo")
    parser.add_argument("--output", default=str(ROOT / "bench" / "out" / "real_models.json"))
    args = parser.parse_args()
    specs = survey_suites(args.agentdojo.split(","))
    out = Path(args.output)
    results = read_result(out)
    if "survey" in args.sections:
        data = survey_data(specs, progress)
        results["survey"] = {"agentdojo_suites": specs["agentdojo"]["suites"],
                             "rows": probe_rows(data) + zero_shot_rows(data, args.zero_shot_sample),
                             "dropped_as_holdout_content": {k: d["dropped"] for k, d in data.items()}}
        write_result(out, results)
    if "sim2real" in args.sections:
        with tempfile.TemporaryDirectory() as workdir:
            for name in args.sim2real_suites.split(","):
                results.setdefault("sim2real", {})[name] = sim2real(name, specs[name], Path(workdir))
                write_result(out, results)  # after each suite: a long run keeps it
    print(f"wrote {out}")


if __name__ == "__main__":
    run(main)
