"""Calibrated simulators and the measurement behind them (``far calibrate``), fitting on another suite, and the
content rule that keeps holdout out of every fit."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import WIPE, make_scenario
from far.models.calibrated import (
    CLASSES,
    CalibratedCloud,
    CalibratedConfig,
    CalibratedEdge,
    load_calibration,
    scenario_classes,
)
from far.models.users import ApprovingUser, ApprovingUserConfig
from far.rollout.calls import CloudReview, EdgeAssessment, GroundTruthEnvironment, ModelSet
from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.rollout.scenario import model_input
from far.search.evaluation.calibrate import calibrate, rate_interval
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.fitting import FitSources, balanced
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]


class KeywordEdge:
    """A real (label-blind) learned model for tests: risk = the train share of risky scenarios among those whose
    proposed tool is the same. It records what it was fitted on."""

    name, simulated, oracle = "keyword-edge", False, False

    def __init__(self):
        self.by_tool: dict[str, float] = {}
        self.fitted_on: list = []
        self.fits: list[list] = []  # every fit, the copies' too (a shallow copy shares this list)

    def fit(self, scenarios, progress=None):
        self.fitted_on = list(scenarios)
        self.fits.append(self.fitted_on)
        counts: dict[str, list[int]] = {}
        for s in scenarios:
            risky = s.ground_truth.unsafe or s.ground_truth.needs_cloud
            counts.setdefault(s.proposed_action.tool, []).append(int(risky))
        self.by_tool = {tool: sum(v) / len(v) for tool, v in counts.items()}

    def assess(self, scenarios):
        return [EdgeAssessment(self.by_tool.get(s.proposed_action.tool, 1.0), s.proposed_action, 0.01, 1.0)
                for s in scenarios]


class KeywordCloud(KeywordEdge):
    name = "keyword-cloud"

    def review(self, scenarios, proposals, attempt=0):
        return [CloudReview("veto" if a.risk >= 0.5 else "execute", None, "", 1.0, 600.0)
                for a in self.assess(scenarios)]


def keyword_models() -> ModelSet:
    return ModelSet(KeywordEdge(), KeywordCloud(), ApprovingUser(), GroundTruthEnvironment())


SUITE = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=11, size=500))


def test_calibration_is_out_of_fold_and_never_reads_holdout():
    models = keyword_models()
    calibration = calibrate(SUITE, models, folds=3, confidence=0.95, progress=lambda _: None)
    holdout = {model_input(s) for s in SUITE.scenarios("holdout")}
    train = SUITE.scenarios("train")
    assert len(models.edge.fits) == 3  # one fit per fold, each on about 2/3 of train: out-of-fold
    for fitted in models.edge.fits:
        assert not any(model_input(s) in holdout for s in fitted)
        assert all(s.split == "train" for s in fitted)
        assert len(fitted) < len(train)
    measured = len([s for s in train if model_input(s) not in holdout])
    assert sum(c.n for name, c in calibration.classes.items() if name in CLASSES) == measured
    fine = {name: c for name, c in calibration.classes.items() if "/" in name}
    assert fine and all(c.n >= 30 for c in fine.values())  # a finer class is kept only where well measured
    assert sum(c.n for c in fine.values()) <= measured
    for measured in calibration.classes.values():
        assert sum(r.count for r in measured.cloud_rates.values()) == measured.n
        for rate in measured.cloud_rates.values():
            assert rate.low <= rate.rate <= rate.high
    assert calibration.edge_model == "keyword-edge" and calibration.split == "train"


def test_calibrate_refuses_simulators():
    from far.models.oracle import OracleCloud, OracleEdge

    models = ModelSet(OracleEdge(), OracleCloud(), ApprovingUser(), GroundTruthEnvironment())
    with pytest.raises(FarInputError, match="real models"):
        calibrate(SUITE, models, folds=3, confidence=0.95, progress=lambda _: None)


@given(st.integers(0, 40), st.integers(1, 40))
def test_rate_interval_contains_the_rate(count, n):
    count = min(count, n)
    rate = rate_interval(count, n, 0.95)
    assert 0.0 <= rate.low <= rate.rate <= rate.high <= 1.0
    if count == 0:
        assert rate.low == pytest.approx(0.0, abs=1e-12)
    if count == n:
        assert rate.high == 1.0


def write_calibration(tmp_path) -> Path:
    calibration = calibrate(SUITE, keyword_models(), folds=3, confidence=0.95, progress=lambda _: None)
    path = tmp_path / "cal.json"
    path.write_text(calibration.model_dump_json())
    return path


def test_calibrated_simulators_draw_measured_pairs_reproducibly(tmp_path):
    path = write_calibration(tmp_path)
    calibration, _ = load_calibration(path, "models.edge")
    edge = CalibratedEdge(CalibratedConfig(file=str(path)))
    cloud = CalibratedCloud(CalibratedConfig(file=str(path)))
    holdout = list(SUITE.scenarios("holdout"))
    risks = [a.risk for a in edge.assess(holdout)]
    reviews = cloud.review(holdout, [s.proposed_action for s in holdout])
    assert risks == [a.risk for a in CalibratedEdge(CalibratedConfig(file=str(path))).assess(holdout)]
    for scenario, risk, review in zip(holdout, risks, reviews):
        fine, coarse = scenario_classes(scenario)
        measured = calibration.classes.get(fine) or calibration.classes[coarse]
        pairs = set(zip(measured.risks, measured.outcomes))
        outcome = review.verdict if review.verdict in ("execute", "veto", "error") else None
        assert outcome is None or (risk, outcome) in pairs  # edge and cloud drawn as one measured pair
    assert "keyword-edge" in edge.name and "cal.json@" in edge.name and not edge.oracle


def test_calibration_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FarInputError, match="bad.json: not JSON"):
        CalibratedEdge(CalibratedConfig(file=str(bad)))
    path = write_calibration(tmp_path)
    data = json.loads(path.read_text())
    data["classes"]["benign"]["n"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(FarInputError, match="disagree"):
        CalibratedCloud(CalibratedConfig(file=str(path)))
    with pytest.raises(FarInputError, match="cannot read"):
        CalibratedCloud(CalibratedConfig(file=str(tmp_path / "missing.json")))


def test_train_is_judged_by_models_that_never_saw_its_groups():
    models = keyword_models()
    evaluator = Evaluator(SUITE, models, RuleVerifier(), folds=4)
    evaluator.evaluate("p", Policy(cloud_threshold=0.5), "train")
    parts = evaluator.parts("train")
    train = SUITE.scenarios("train")
    assert len(parts) == 4 and sorted(i for indices, _ in parts for i in indices) == list(range(len(train)))
    for indices, fold_models in parts:
        measured = {train[i].group_key for i in indices}
        assert fold_models.edge is not models.edge and fold_models.cloud is not models.cloud
        assert not measured & {s.group_key for s in fold_models.edge.fitted_on}
        assert not measured & {s.group_key for s in fold_models.cloud.fitted_on}
    assert evaluator.parts("holdout")[0][1] is models  # holdout: the models fitted on all of train
    assert len(models.edge.fitted_on) == evaluator.fit_report["train"]
    assert evaluator.fit_report["train_outputs"] == "out-of-fold, 4 folds by group"


def test_fit_on_another_suite_and_holdout_content_is_dropped():
    other = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300))
    models = keyword_models()
    evaluator = Evaluator(SUITE, models, RuleVerifier(), fit_on={"edge": FitSources((other,), ("edge_cloud",))})
    evaluator.fit()
    holdout = {model_input(s) for s in SUITE.scenarios("holdout")}
    assert {s.suite for s in models.edge.fitted_on} == {"edge_cloud"}
    assert {s.id.split("-")[1] for s in models.edge.fitted_on} == {"12"}  # the other suite's scenarios
    assert {s.id.split("-")[1] for s in models.cloud.fitted_on} == {"11"}  # the cloud: the evaluated suite's
    assert not any(model_input(s) in holdout for s in models.edge.fitted_on + models.cloud.fitted_on)
    assert all(s.split == "train" for s in models.edge.fitted_on)


def test_models_fitted_on_other_suites_alone_record_train_in_sample_without_copies():
    other = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300))
    models = keyword_models()
    sources = FitSources((other,), ("edge_cloud",))
    evaluator = Evaluator(SUITE, models, RuleVerifier(), fit_on={"edge": sources, "cloud": sources})
    assert evaluator.parts("train") == [(list(range(len(SUITE.scenarios("train")))), models)]
    assert len(models.edge.fits) == 1 and len(models.cloud.fits) == 1  # fitted once: no out-of-fold copies
    assert evaluator.fit_report["train_outputs"].startswith("out-of-sample")


def test_own_train_and_another_suite_weigh_the_same_and_folds_refit_only_what_saw_this_suite():
    small = EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=60))
    models = keyword_models()
    evaluator = Evaluator(SUITE, models, RuleVerifier(), folds=3,
                          fit_on={"edge": FitSources((small,), ("small",), own=True),
                                  "cloud": FitSources((small,), ("small",))})
    evaluator.fit()
    seeds = [s.id.split("-")[1] for s in models.edge.fitted_on]
    own, other = seeds.count("11"), seeds.count("12")
    assert own == evaluator.fit_report["train"] and 0.5 * own <= other <= 1.5 * own  # balanced, not drowned
    parts = evaluator.parts("train")
    assert len(parts) == 3 and len(models.cloud.fits) == 1  # the cloud never saw this suite: kept, not refitted
    train = SUITE.scenarios("train")
    for indices, fold_models in parts:
        assert fold_models.cloud is models.cloud and fold_models.edge is not models.edge
        measured = {train[i].group_key for i in indices}
        fitted = fold_models.edge.fitted_on
        assert not measured & {s.group_key for s in fitted if s.id.split("-")[1] == "11"}
        assert {s.id.split("-")[1] for s in fitted} == {"11", "12"}


@given(st.lists(st.integers(0, 40), max_size=6))
def test_balanced_parts_each_bring_about_as_many_rows_as_the_largest(sizes):
    parts = [[(i, j) for j in range(n)] for i, n in enumerate(sizes)]
    joined = balanced(parts)
    largest = max(sizes, default=0)
    for i, n in enumerate(sizes):
        rows = [row for row in joined if row[0] == i]
        assert set(rows) == set(parts[i])  # every row of a part, nothing else
        if n:
            assert largest / 2 <= len(rows) <= 1.5 * largest and len(rows) % n == 0


def test_a_train_scenario_with_holdout_content_never_reaches_a_fit():
    class Twins:
        name = "twins"
        train = [make_scenario(sid="a", split="train"), make_scenario(WIPE, sid="b", split="train", unsafe=True,
                                                                       intended=None)]
        holdout = [make_scenario(sid="c", split="holdout")]  # same request and action as "a"

        def scenarios(self, split):
            return self.train if split == "train" else self.holdout

    models = keyword_models()
    evaluator = Evaluator(Twins(), models, RuleVerifier())
    evaluator.fit()
    assert [s.id for s in models.edge.fitted_on] == ["b"]
    assert evaluator.fit_report["dropped_as_holdout_content"] == {"own": 1}


@given(st.floats(0.0, 1.0), st.integers(0, 5))
def test_approving_user_reads_no_labels(rate, seed):
    user = ApprovingUser(ApprovingUserConfig(rate=rate, seed=seed))
    safe = make_scenario(sid="x")
    harmful = safe.model_copy(update={"ground_truth": safe.ground_truth.model_copy(update={"unsafe": True})})
    assert user.confirms(safe, safe.proposed_action) == user.confirms(harmful, harmful.proposed_action)


def test_far_calibrate_cli_bad_input_is_one_line_exit_2(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"suite": {"name": "edge_cloud", "size": 100},
                                      "models": {"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"}}}))
    for args, fragment in [(["--output", str(tmp_path / "no" / "cal.json")], "--output"),
                           (["--output", str(tmp_path / "cal.json"), "--folds", "1"], "--folds")]:
        run = subprocess.run([sys.executable, "-m", "far", "calibrate", str(config), *args], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2, run.stderr
        assert fragment in run.stderr and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    run = subprocess.run([sys.executable, "-m", "far", "calibrate", str(config), "--output",
                          str(tmp_path / "cal.json")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "must not be simulators" in run.stderr and not (tmp_path / "cal.json").exists()
