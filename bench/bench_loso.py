"""Guards that travel (issue 37): leave-one-suite-out figures for the shipped edge and reviewer.

    python bench/bench_loso.py [--suites edge_cloud,agentdojo,broad_requests] [--out bench/out/loso.json]

For each suite L: the edge (MiniLM probe, label "must not run unreviewed") and the reviewer (SmolLM2 probe,
label "harmful"), built as the product builds them, are fitted on the other suites' train splits, joined as the
product joins them (``far.search.evaluation.fitting.balanced``), with L's content dropped; then scored on L's train split (the
figure to choose by: nothing was fitted on it) and on L's holdout (reported). Also, for reference, on L's
holdout: the fit on every suite's train split (what ``far evaluate`` does with the default ``fit_on``) and the
fit on L's train split alone (what it did before), and on L's and broad_requests' train splits.
Figures: AUROC and TPR at 5% FPR (read off the ROC curve), on the role's own label, and where the scored set
holds benign look-alikes (kind ``benign_sensitive``: XSTest's safe prompts, FAR's benign requests that look
unsafe), TPR at 5% FPR *on the look-alikes alone* (``lookalike_tpr_at_5pct_fpr``): the threshold that refuses
5% of them, and the harmful share above it.

What the default adds to a suite's own train split is chosen on train only (``choose_on_train``): out-of-fold
over the evaluated suite's train split, for nothing added, broad_requests added, broad_requests without its
twins (XSTest) added, every other suite added.
And per public source of broad_requests with harmful requests (``leave_one_source_out``): the guard fitted on
the built-in suite and broad_requests without that source, scored on its harmful requests against the benign
holdout requests of the other sources, or, for XSTest, on its own look-alikes and twins (the stand-in for an
outside set with twins: nothing from it was fitted on). And what the twins teach about look-alikes of another
source (``twins_on_unseen_lookalikes``): fitted without FAR's own benign requests, with and without XSTest.
And whether combinations of the probes carry further than the shipped reviewer (``ensembles``).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from far.harness import run, write_result
from far.search.evaluation.guards import (
    BROAD,
    NO_TWINS,
    SUITES,
    fitted,
    guard_model,
    guard_scores,
    lookalikes,
    roc_figures,
    split_data,
)

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
DIGITS = 4  # the figures' rounding in the result file


def progress(message: str) -> None:
    print(message, flush=True)


def choose_on_train(role: str, data: dict, names: list[str], evaluated: str, folds: int = 5) -> dict:
    """What to add to the evaluated suite's own train split, chosen on train: out-of-fold AUROC over its train
    split (5 folds by group), each fold fitted on the other folds plus the added suites (the fold's content
    dropped from them), for: nothing, broad_requests, every other suite."""
    from far.rollout.scenario import model_input
    from far.search.evaluation.fitting import group_folds

    train = data[evaluated]["train"]
    label = type(guard_model(role)).label
    labels = np.array([label(s) for s in train])
    variants = {"own": [], "own_broad": [BROAD] if evaluated != BROAD else None,
                "own_broad_without_twins": [NO_TWINS] if evaluated != BROAD else None,
                "own_all": [n for n in names if n != evaluated]}
    row = {"role": role, "evaluated": evaluated}
    for variant, extra in variants.items():
        if extra is None:
            continue
        oof = np.zeros(len(train))
        for fit, measure in group_folds(train, folds):
            part = [train[i] for i in measure]
            guard = fitted(role, [[train[i] for i in fit]] + [data[n]["train"] for n in extra],
                           {model_input(s) for s in part}, progress=progress)
            oof[measure] = guard_scores(guard, part)
        row[variant] = roc_figures(labels, oof, lookalikes(train), DIGITS)
    print(json.dumps(row), flush=True)
    return row


def leave_one_source_out(role: str, data: dict) -> list[dict]:
    """How the shipped guard judges harmful requests from a public set it never saw: fitted on the built-in
    suite's train split and broad_requests' without one source (as the default fits a suite of its own), scored
    on that source's harmful requests against broad_requests' benign holdout requests."""
    from far.suites.broad_requests import source_of

    rows = []
    broad = data[BROAD]
    label = type(guard_model(role)).label
    sources = sorted({source_of(s) for s in broad["train"] if s.ground_truth.unsafe})
    for source in sources:
        held = [s for split in ("train", "holdout") for s in broad[split] if source_of(s) == source]
        rest = [s for s in broad["train"] if source_of(s) != source]
        guard = fitted(role, [data["edge_cloud"]["train"], rest], set(), progress=progress)
        benign = [] if source == "xstest" else [s for s in broad["holdout"] if not s.ground_truth.unsafe]
        scored = (held if source == "xstest" else [s for s in held if s.ground_truth.unsafe]) + benign
        labels = np.array([label(s) for s in scored])
        rows.append({"role": role, "left_out_source": source, "harmful": int(labels.sum()),
                     "benign": int(len(labels) - labels.sum()),
                     **roc_figures(labels, guard_scores(guard, scored), lookalikes(scored), DIGITS)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def twins_on_unseen_lookalikes(role: str, data: dict, folds: int = 2) -> list[dict]:
    """What the twins teach about look-alikes from another source, on train only: the guard fitted on the built-in
    suite's train split and broad_requests' without FAR's own benign requests, with and without XSTest's twins,
    scored on FAR's benign train requests (38 of them look-alikes) against the public sets' harmful train
    requests, those out of fold (two folds by a hash of the id: each fold's are left out of its fit)."""
    import hashlib

    from far.suites.broad_requests import source_of

    train = data[BROAD]["train"]
    label = type(guard_model(role)).label
    negatives = [s for s in train if source_of(s) == "benign"]
    positives = [s for s in train if s.ground_truth.unsafe and source_of(s) not in ("xstest", "benign")]
    fold_of = {s.id: hashlib.sha256(s.id.encode()).digest()[0] % folds for s in positives}
    labels = np.array([label(s) for s in positives + negatives])
    rows = []
    for twins in (False, True):
        positive_scores = np.zeros(len(positives))
        negative_scores = np.zeros(len(negatives))
        for fold in range(folds):
            held = [i for i, s in enumerate(positives) if fold_of[s.id] == fold]
            held_ids = {positives[i].id for i in held}
            rest = [s for s in train if source_of(s) != "benign" and s.id not in held_ids
                    and (twins or source_of(s) != "xstest")]
            guard = fitted(role, [data["edge_cloud"]["train"], rest], set(), progress=progress)
            positive_scores[held] = guard_scores(guard, [positives[i] for i in held])
            negative_scores += guard_scores(guard, negatives) / folds
        scored = positives + negatives
        rows.append({"role": role, "twins_in_fit": twins, "harmful": len(positives), "benign": len(negatives),
                     **roc_figures(labels, np.concatenate([positive_scores, negative_scores]), lookalikes(scored),
                                   DIGITS)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def ensembles(data: dict, names: list[str]) -> list[dict]:
    """Do combinations of the probes carry further than the shipped reviewer? On the reviewer's label
    (harmful), fitted on the other suites' train splits (L's content dropped) and scored on L's train and
    holdout splits, and fitted on the built-in suite and broad without XSTest and scored on all of XSTest: the
    reviewer, the edge, a MiniLM probe on the reviewer's label, and the means of their probabilities."""
    from far.models.reviewer import unsafe_label
    from far.rollout.scenario import model_input
    from far.suites.broad_requests import source_of

    cases = [(left_out, [data[n]["train"] for n in names if n != left_out],
              {model_input(s) for split in ("train", "holdout") for s in data[left_out][split]},
              {split: data[left_out][split] for split in ("train", "holdout")}) for left_out in names]
    if {"edge_cloud", BROAD} <= set(names):
        broad = data[BROAD]
        cases.append(("xstest", [data["edge_cloud"]["train"], [s for s in broad["train"] if source_of(s) != "xstest"]],
                      set(), {"all": [s for split in ("train", "holdout") for s in broad[split]
                                      if source_of(s) == "xstest"]}))
    rows = []
    for left_out, parts, excluded, evaluated in cases:
        guards = {role: fitted(role, parts, excluded, progress=progress)
                  for role in ("cloud", "edge", "reviewer_minilm")}
        for split, scenarios in evaluated.items():
            found = {role: guard_scores(guard, scenarios) for role, guard in guards.items()}
            found["mean_reviewer_edge"] = (found["cloud"] + found["edge"]) / 2
            found["mean_reviewers"] = (found["cloud"] + found["reviewer_minilm"]) / 2
            found["mean_all"] = (found["cloud"] + found["edge"] + found["reviewer_minilm"]) / 3
            labels = np.array([unsafe_label(s) for s in scenarios])
            rows.append({"left_out": left_out, "split": split, "n": len(labels), "positives": int(labels.sum()),
                         **{name: roc_figures(labels, values, lookalikes(scenarios), DIGITS)
                            for name, values in found.items()}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    from far.rollout.scenario import model_input

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", default="edge_cloud,agentdojo,broad_requests")
    parser.add_argument("--roles", default="edge,cloud")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "loso.json"))
    args = parser.parse_args()
    names = args.suites.split(",")
    started = time.time()
    data = split_data(names, progress)
    rows = []
    for role in args.roles.split(","):
        label = type(guard_model(role)).label
        every = [data[name]["train"] for name in names]
        for left_out in names:
            own = data[left_out]
            excluded = {model_input(s) for split in ("train", "holdout") for s in own[split]}
            others = fitted(role, [data[n]["train"] for n in names if n != left_out], excluded, progress=progress)
            holdout_content = {model_input(s) for s in own["holdout"]}
            with_all = fitted(role, every, holdout_content, progress=progress)
            alone = fitted(role, [own["train"]], holdout_content, progress=progress)
            fits = [("others_on_train", others, "train"), ("others_on_holdout", others, "holdout"),
                    ("all_on_holdout", with_all, "holdout"), ("own_on_holdout", alone, "holdout")]
            if BROAD in names and left_out != BROAD:
                fits.append(("own_broad_on_holdout",
                             fitted(role, [own["train"], data[BROAD]["train"]], holdout_content, progress=progress),
                             "holdout"))
            row = {"role": role, "left_out": left_out, "fitted_on": [n for n in names if n != left_out]}
            for key, guard, split in fits:
                labels = np.array([label(s) for s in own[split]])
                row[key] = {"n": len(labels), "positives": int(labels.sum()),
                            **roc_figures(labels, guard_scores(guard, own[split]), lookalikes(own[split]), DIGITS)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    choice = [choose_on_train(role, data, names, left_out) for role in args.roles.split(",") for left_out in names]
    both = {"edge_cloud", BROAD} <= set(names)
    by_source = [row for role in args.roles.split(",") for row in leave_one_source_out(role, data)] if both else []
    twins = [row for role in args.roles.split(",") for row in twins_on_unseen_lookalikes(role, data)] if both else []
    combined = ensembles(data, names)
    out = Path(args.out)
    result = {"date": time.strftime("%Y-%m-%d"), "suites": {n: SUITES[n] for n in names}, "rows": rows,
              "choice_on_train": choice, "leave_one_source_out": by_source,
              "twins_on_unseen_lookalikes": twins, "ensembles": combined, "seconds": round(time.time() - started)}
    write_result(out, result)
    print(f"wrote {out} in {result['seconds']} s")


if __name__ == "__main__":
    run(main)
