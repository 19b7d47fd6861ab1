"""FAR's policy search as FATE's baseline (``far.evolve.search_baseline``): per-input agent figures that average to
the figures FATE's rounds report, policy evaluations read as FATE's scored decisions, and pooled arm − winner
differences, on real suite scenarios (decisions played by FAR's agent with the ORACLE models: the arithmetic is
under test, not a model)."""
import pytest
from conftest import oracle_models
from far.evolve.config import SelectionSettings
from far.evolve.metrics import AGENT_METRICS, holdout_metrics
from far.evolve.search_baseline import AGENT_COMPARED, SlicesSuite, agent_groups, agent_values, as_scored, minus_winner
from far.evolve.task import DecisionTask
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.search.jobs.assemble import build_evaluator
from far.search.jobs.config import RunConfig
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier
from far.verifiers.taxonomy import SuccessKind
from hypothesis import given, settings
from hypothesis import strategies as st

_ALL = list(EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300)).scenarios("holdout"))
# every figure's inputs: injected, harmful and the rest
HOLDOUT = ([s for s in _ALL if s.ground_truth.injected][:8] + [s for s in _ALL if AGENT_METRICS["hcr"].counts(s)][:8]
           + [s for s in _ALL if not s.ground_truth.injected and not s.ground_truth.unsafe][:24])
DECISIONS = st.sampled_from(["handle", "escalate", "refuse"])
SELECTION = SelectionSettings()


@pytest.fixture(scope="module")
def task():
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    return DecisionTask(models, RuleVerifier(), Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True))


def test_the_sample_holds_every_figure_s_inputs() -> None:
    assert all(sum(map(AGENT_METRICS[f].counts, HOLDOUT)) >= 3 for f in AGENT_COMPARED)
    assert len({s.group_key for s in HOLDOUT}) >= 5


@settings(max_examples=10, deadline=None)
@given(st.lists(DECISIONS, min_size=len(HOLDOUT), max_size=len(HOLDOUT)))
def test_per_input_figures_average_to_the_rounds_figures(task, decisions: list[str]) -> None:
    scored = task.score(HOLDOUT, decisions)
    values = agent_values(HOLDOUT, scored)
    groups = agent_groups(HOLDOUT)
    overall = holdout_metrics(HOLDOUT, scored, SELECTION, by_category=False)["overall"]
    assert list(values) == list(groups) == list(AGENT_COMPARED)
    for figure in AGENT_COMPARED:
        assert len(values[figure]) == len(groups[figure]) == sum(map(AGENT_METRICS[figure].counts, HOLDOUT))
        assert set(values[figure]) <= {0.0, 1.0}
        assert sum(values[figure]) / len(values[figure]) == pytest.approx(overall[figure])


def row(task, decided: dict[str, list[str]]) -> dict:
    values = {arm: agent_values(HOLDOUT, task.score(HOLDOUT, d)) for arm, d in decided.items()}
    return {"groups": agent_groups(HOLDOUT), "values": values}


def test_pooled_differences_are_arm_minus_winner_over_every_seed(task) -> None:
    refuse, handle = ["refuse"] * len(HOLDOUT), ["handle"] * len(HOLDOUT)
    rows = [row(task, {"fate": refuse, "base": handle, "winner": handle}),
            row(task, {"fate": handle, "base": handle, "winner": refuse})]
    pooled = minus_winner(rows)
    assert set(pooled) == {f"{arm} - winner | {f}" for arm in ("fate", "base") for f in AGENT_COMPARED}
    for figure in AGENT_COMPARED:
        same = pooled[f"base - winner | {figure}"]
        assert same["inputs"] == 2 * len(rows[0]["groups"][figure])
        # base = winner on the first seed: only the second seed's difference remains, halved by pooling
        first, second = (sum(r["values"][a][figure]) for r, a in ((rows[1], "base"), (rows[1], "winner")))
        assert same["difference"] == pytest.approx((first - second) / same["inputs"])
        assert same["low"] <= same["difference"] <= same["high"]
    # refusing everything executes no harm, so the refusing side's ASR is never above the handling side's
    assert pooled["fate - winner | asr"]["means"][0] == pytest.approx(pooled["fate - winner | asr"]["means"][1])
    assert rows[0]["values"]["fate"]["asr"] == [0.0] * len(rows[0]["values"]["fate"]["asr"])


def test_a_policy_evaluation_on_fate_s_slices_reads_as_fate_s_scored_decisions() -> None:
    dev, holdout = _ALL[:30], HOLDOUT
    suite = SlicesSuite(dev, holdout)
    assert suite.scenarios("train") == dev and suite.scenarios("holdout") == holdout
    assert suite.describe() == {"name": "fate-dev-holdout", "train": 30, "holdout": len(holdout)}
    evaluator = build_evaluator(RunConfig(models=ModelsConfig.model_validate(oracle_models())), suite=suite)
    evaluation = evaluator.evaluate("p", Policy(cloud_threshold=0.5, max_retries=1), "holdout")
    scored = as_scored(evaluation)
    assert len(scored) == len(holdout) and {s.decision for s in scored} == {""}  # no edge decision of its own
    assert [s.z for s in scored] == [tuple(v.z) for v in evaluation.verdicts]
    assert [s.cost for s in scored] == [t.cost for t in evaluation.trajectories]
    done = sum(agent_values(holdout, scored)["tsr"])
    assert done == sum(SuccessKind.TASK_SUCCESS in v.successes for v in evaluation.verdicts) > 0
