"""The policy-search comparison's arithmetic (``bench/bench_fate_search.py``): per-input agent figures that
average to the figures FATE's rounds report, and pooled paired differences, on real suite scenarios (decisions
played by FAR's agent with the ORACLE models: the arithmetic is under test, not a model)."""
import importlib.util
from pathlib import Path

import pytest
from conftest import oracle_models
from far.evolve.config import SelectionSettings
from far.evolve.metrics import holdout_metrics
from far.evolve.task import DecisionTask
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_fate_search", REPO / "bench" / "bench_fate_search.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

_ALL = list(EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300)).scenarios("holdout"))
# every figure's inputs: injected, harmful and the rest
HOLDOUT = ([s for s in _ALL if s.ground_truth.injected][:8] + [s for s in _ALL if bench.AGENT_FIGURES["hcr"](s)][:8]
           + [s for s in _ALL if not s.ground_truth.injected and not s.ground_truth.unsafe][:24])
DECISIONS = st.sampled_from(["handle", "escalate", "refuse"])
SELECTION = SelectionSettings()


@pytest.fixture(scope="module")
def task():
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    return DecisionTask(models, RuleVerifier(), Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True))


def test_the_sample_holds_every_figure_s_inputs() -> None:
    assert all(sum(map(counts, HOLDOUT)) >= 3 for counts in bench.AGENT_FIGURES.values())
    assert len({s.group_key for s in HOLDOUT}) >= 5


@settings(max_examples=10, deadline=None)
@given(st.lists(DECISIONS, min_size=len(HOLDOUT), max_size=len(HOLDOUT)))
def test_per_input_figures_average_to_the_rounds_figures(task, decisions: list[str]) -> None:
    scored = task.score(HOLDOUT, decisions)
    values = bench.per_input(HOLDOUT, scored, SELECTION)
    overall = holdout_metrics(HOLDOUT, scored, SELECTION, by_category=False)["overall"]
    for figure, counts in bench.AGENT_FIGURES.items():
        assert len(values[figure]) == sum(map(counts, HOLDOUT))
        assert set(values[figure]) <= {0.0, 1.0}
        assert sum(values[figure]) / len(values[figure]) == pytest.approx(overall[figure])


def row(task, decided: dict[str, list[str]]) -> dict:
    values = {arm: bench.per_input(HOLDOUT, task.score(HOLDOUT, d), SELECTION) for arm, d in decided.items()}
    groups = {f: [s.group_key for s in HOLDOUT if counts(s)] for f, counts in bench.AGENT_FIGURES.items()}
    return {"groups": groups, "values": values}


def test_pooled_differences_are_arm_minus_winner_over_every_seed(task) -> None:
    refuse, handle = ["refuse"] * len(HOLDOUT), ["handle"] * len(HOLDOUT)
    rows = [row(task, {"fate": refuse, "base": handle, "winner": handle}),
            row(task, {"fate": handle, "base": handle, "winner": refuse})]
    pooled = bench.differences(rows)
    for figure in bench.AGENT_FIGURES:
        same = pooled[f"base - winner | {figure}"]
        assert same["inputs"] == 2 * len(rows[0]["groups"][figure])
        # base = winner on the first seed: only the second seed's difference remains, halved by pooling
        first, second = (sum(r["values"][a][figure]) for r, a in ((rows[1], "base"), (rows[1], "winner")))
        assert same["difference"] == pytest.approx((first - second) / same["inputs"])
        assert same["low"] <= same["difference"] <= same["high"]
    # refusing everything executes no harm, so the refusing side's ASR is never above the handling side's
    assert pooled["fate - winner | asr"]["means"][0] == pytest.approx(pooled["fate - winner | asr"]["means"][1])
    assert rows[0]["values"]["fate"]["asr"] == [0.0] * len(rows[0]["values"]["fate"]["asr"])
