"""The cloud that revises (``models.reviser``, issue 36 part 2) on the built-in suite: how many requests that need
a cloud revision it completes, how many right calls it breaks, and what it costs per call on this CPU.

    python bench/bench_reviser.py [--model smollm2] [--train-only] [--out bench/out/reviser.json]

1. Choosing the number of demonstrations, on train only: 3-fold cross-validation by template group; in each
   fold the reviser takes its demonstrations from the other folds and revises a sample of the fold's
   needs-cloud and benign calls. The fewest demonstrations (the shortest prompt, the fastest call) win unless
   another setting's right calls put them below the lower end of its exact 95% interval.
2. On train, the same folds: the shipped rule (demonstrations of the proposed call's tool only) against the
   nearest demonstrations of any tool, with the chosen number.
3. The holdout, read once with that setting (demonstrations from all of train; skipped with --train-only):
   every needs-cloud request, and a sample of the benign ones (kinds benign, benign_sensitive, diagnostic),
   through the shipped reviewer (the SmolLM2 probe, fitted on train) and the reviser behind it, as ``far``
   records them. A needs-cloud request is completed by the cloud when the reviewer passes it and the revision
   is the intended call; a benign call is broken when the reviser changes a right call. The plain baseline is
   the reviewer alone: it completes none.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from pathlib import Path

from far.harness import run, write_result
from far.search.ranking.gate import clopper_pearson_interval as exact_interval
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")

SUITE = EdgeCloudSuiteConfig(name="edge_cloud", seed=7, size=4000, holdout_fraction=0.3)  # configs/search.yaml's
BENIGN = ("benign", "benign_sensitive", "diagnostic")
CHOICES = (2, 4)


def sample(scenarios, kinds, n, seed):
    chosen = [s for s in scenarios if s.kind in kinds]
    random.Random(seed).shuffle(chosen)
    return chosen if n is None else chosen[:n]


def right_calls(reviser, scenarios) -> tuple[int, Counter, float]:
    """Revisions equal to the intended call, per category, and seconds per call."""
    started = time.perf_counter()
    revisions = reviser.revise(scenarios, [s.proposed_action for s in scenarios])
    seconds = (time.perf_counter() - started) / max(1, len(scenarios))
    right = Counter(s.category for s, r in zip(scenarios, revisions)
                    if r.args == s.ground_truth.intended_action.args)
    return sum(right.values()), right, seconds


def cross_validated(train, make_reviser, per_fold: int, label: str) -> dict:
    """Right calls of revisers fitted on two folds of train and measured on the third (3 folds by group)."""
    from sklearn.model_selection import GroupKFold

    right = total = 0
    for fold, (fit_index, measure_index) in enumerate(
            GroupKFold(3).split(train, groups=[s.group_key for s in train])):
        reviser = make_reviser()
        reviser.fit([train[i] for i in fit_index])
        held = [train[i] for i in measure_index]
        measured = sample(held, ("needs_cloud",), per_fold, fold) + sample(held, BENIGN, per_fold, fold)
        fold_right, _, seconds = right_calls(reviser, measured)
        right, total = right + fold_right, total + len(measured)
        print(f"  {label} fold {fold}: {fold_right}/{len(measured)} right, {seconds:.2f} s per call", flush=True)
    return {"right": right, "measured": total}


def choose(train, lm, per_fold: int) -> tuple[int, list[dict]]:
    from far.models.reviser import LMReviser
    from far.models.spec import ReviserConfig

    rows = [{"demonstrations": k, **cross_validated(train, lambda k=k: LMReviser(lm, ReviserConfig(demonstrations=k)),
                                                     per_fold, f"k={k}")} for k in CHOICES]
    best = max(rows, key=lambda row: row["right"])
    floor = exact_interval(best["right"], best["measured"])[0] * best["measured"]
    cheapest = min((row for row in rows if row["right"] >= floor), key=lambda row: row["demonstrations"])
    return cheapest["demonstrations"], rows


def any_tool_reviser(lm, k: int):
    """The alternative to the shipped rule, for the train check only: the nearest demonstrations of any tool."""
    import numpy as np
    from far.models.reviser import LMReviser
    from far.models.spec import ReviserConfig

    class AnyToolReviser(LMReviser):
        def demonstrations(self, scenario, proposal):
            if self._vectorizer is None:
                return []
            similarity = (self._matrix @ self._vectorizer.transform([scenario.request]).T).toarray().ravel()
            order = np.lexsort((np.arange(len(similarity)), -similarity))[:self.config.demonstrations]
            return [self._pool[i] for i in reversed(order)]

    return AnyToolReviser(lm, ReviserConfig(demonstrations=k))


def holdout(train, held, lm, k: int, benign_n: int) -> dict:
    from far.models.backends import ModelsConfig, build_models
    from far.models.reviser import LMReviser, RevisingCloud
    from far.models.spec import ReviserConfig

    reviewer = build_models(ModelsConfig()).cloud
    reviewer.fit(train)
    cloud = RevisingCloud(reviewer, LMReviser(lm, ReviserConfig(demonstrations=k)))
    cloud.reviser.fit(train)
    needs = sample(held, ("needs_cloud",), None, 0)
    benign = sample(held, BENIGN, benign_n, 0)
    started = time.perf_counter()
    reviews = cloud.review(needs + benign, [s.proposed_action for s in needs + benign])
    seconds = (time.perf_counter() - started) / len(reviews)
    outcome: Counter = Counter()
    by_category: Counter = Counter()
    for scenario, review in zip(needs + benign, reviews):
        intended = scenario.ground_truth.intended_action
        final = review.revision if review.verdict == "revise" else scenario.proposed_action
        group = "needs_cloud" if scenario.kind == "needs_cloud" else "benign"
        if review.verdict == "veto":
            outcome[group, "vetoed"] += 1
        elif final == intended:
            outcome[group, "completed"] += 1
            by_category[scenario.category] += group == "needs_cloud"
        else:
            outcome[group, "revised wrong" if review.verdict == "revise" else "not revised"] += 1
    completed = outcome["needs_cloud", "completed"]
    broken = outcome["benign", "revised wrong"]
    return {
        "demonstrations": k, "seconds_per_review": round(seconds, 2),
        "needs_cloud": {"n": len(needs), "completed": completed,
                        "interval": [round(x, 3) for x in exact_interval(completed, len(needs))],
                        "by_category": dict(by_category),
                        "per_category_n": dict(Counter(s.category for s in needs)),
                        "outcomes": {o: n for (g, o), n in outcome.items() if g == "needs_cloud"}},
        "benign": {"n": len(benign), "broken": broken,
                   "interval": [round(x, 3) for x in exact_interval(broken, len(benign))],
                   "outcomes": {o: n for (g, o), n in outcome.items() if g == "benign"}},
        "baseline_reviewer_alone": {"needs_cloud_completed": 0,
                                    "why": "a probe answers execute or veto; the edge's call is not the intended one"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="the reviser's weights (smollm2 or a local HF folder)")
    parser.add_argument("--per-fold", type=int, default=20, help="needs-cloud and benign calls measured per fold")
    parser.add_argument("--benign", type=int, default=100, help="benign holdout calls measured")
    parser.add_argument("--train-only", action="store_true", help="the choices on train; the holdout is not read")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "reviser.json")
    args = parser.parse_args()

    from far.models.engines import EngineSpec, build_engine

    suite = EdgeCloudSuite(SUITE)
    train, held = list(suite.scenarios("train")), list(suite.scenarios("holdout"))
    lm = build_engine(EngineSpec(engine="transformers", model=args.model))  # uncached: the times are real
    print(f"choosing the demonstrations on train ({lm.model_id})", flush=True)
    k, rows = choose(train, lm, args.per_fold)
    print(f"chosen: {k}; the same-tool rule against demonstrations of any tool, on train", flush=True)
    any_tool = cross_validated(train, lambda: any_tool_reviser(lm, k), args.per_fold, f"any tool, k={k}")
    result = {"model": lm.model_id, "suite": SUITE.model_dump(), "choice_on_train": rows,
              "any_tool_on_train": {"demonstrations": k, **any_tool}}
    if not args.train_only:
        print("the holdout, once", flush=True)
        result["holdout"] = holdout(train, held, lm, k, args.benign)
    write_result(args.out, result)
    print(json.dumps(result.get("holdout", result["any_tool_on_train"]), indent=2))


if __name__ == "__main__":
    run(main)
