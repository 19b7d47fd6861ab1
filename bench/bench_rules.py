"""Benchmarks for the policy's rules (issue 36), on the built-in suite's train split only (nothing here reads the
holdout: the settings below were chosen from these figures).

    python bench/bench_rules.py [--out bench/out/rules.json]

1. The tool-scope model (``far.models.scope``): 5-fold cross-validation by template group on train, for
   each candidate setting (features, C): of the calls with effects whose tool the task needs, how many stay in
   the predicted scope; of those whose tool it does not need (injected, misread), how many fall outside it.
   Also the fit time of the shipped setting on all of train.
2. Provenance (``far.rollout.provenance``): per kind of scenario, the share of proposed calls that are
   content-driven (a sensitive call with an argument seen only in the read content), and the time per call.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
from far.harness import run, write_result
from far.models.scope import needed_tools
from far.rollout.provenance import content_driven, user_words
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

ROOT = Path(__file__).resolve().parents[1]
SUITE = EdgeCloudSuiteConfig(name="edge_cloud", seed=7, size=4000, holdout_fraction=0.3)  # configs/search.yaml's
CANDIDATES = [(analyzer, ngrams, c) for analyzer, ngrams in (("char_wb", (2, 5)), ("word", (1, 2)))
              for c in (1.0, 3.0, 10.0, 30.0)]


def scope_cv(train, min_probability: float = 0.2, folds: int = 5) -> list[dict]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline

    groups = [s.group_key for s in train]
    rows = []
    for analyzer, ngrams, c in CANDIDATES:
        counts: Counter = Counter()
        for fit_index, measure_index in GroupKFold(folds).split(train, groups=groups):
            texts = [user_words(train[i]) for i in fit_index for _ in needed_tools(train[i])]
            labels = [tool for i in fit_index for tool in sorted(needed_tools(train[i]))]
            model = make_pipeline(TfidfVectorizer(analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True),
                                  LogisticRegression(C=c, max_iter=3000)).fit(texts, labels)
            tools = list(model.classes_)
            probabilities = model.predict_proba([user_words(train[i]) for i in measure_index])
            for i, row in zip(measure_index, probabilities):
                action = train[i].proposed_action
                if action.read_only:  # the scope rule leaves reading alone
                    continue
                j = tools.index(action.tool) if action.tool in tools else None
                in_scope = j is not None and (row[j] >= min_probability or j == int(np.argmax(row)))
                counts[action.tool in needed_tools(train[i]), in_scope] += 1
        row = {"features": f"{analyzer} {ngrams[0]}-{ngrams[1]}", "C": c,
               "needed_kept": counts[True, True], "needed": counts[True, True] + counts[True, False],
               "unneeded_filtered": counts[False, False], "unneeded": counts[False, False] + counts[False, True]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def provenance_rates(train) -> dict:
    started = time.perf_counter()
    driven = [content_driven(s, s.proposed_action) for s in train]
    per_call_us = (time.perf_counter() - started) / len(train) * 1e6
    by_kind: dict[str, list[int]] = {}
    for scenario, flag in zip(train, driven):
        entry = by_kind.setdefault(scenario.kind, [0, 0])
        entry[0] += flag
        entry[1] += 1
    return {"per_call_us": round(per_call_us, 1),
            "content_driven_by_kind": {kind: f"{a}/{n}" for kind, (a, n) in sorted(by_kind.items())}}


def main() -> None:
    from far.models.scope import TfidfToolScope

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "rules.json"))
    args = parser.parse_args()
    train = list(EdgeCloudSuite(SUITE).scenarios("train"))
    results = {"suite": SUITE.model_dump(), "train": len(train), "scope_cv": scope_cv(train)}
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as data:  # a fresh fit, not the stored one
        os.environ["FAR_DATA_DIR"] = data
        started = time.perf_counter()
        TfidfToolScope().fit(train)
        results["scope_fit_s"] = round(time.perf_counter() - started, 2)
    results["provenance"] = provenance_rates(train)
    print(json.dumps({k: v for k, v in results.items() if k != "scope_cv"}), flush=True)
    write_result(args.out, results)


if __name__ == "__main__":
    run(main)
