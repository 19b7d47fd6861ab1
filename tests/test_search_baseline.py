"""FAR's policy search as FATE's baseline (``far.evolve.search_baseline``): FATE's slices as a suite, and policy
evaluations read as FATE's scored actions (a veto a refusal, a completed call a call, confirmed when the user approved
it, anything else a question), by hand and on real rollouts of FAR's agent with the ORACLE models (the reading is
under test, not a model)."""
from types import SimpleNamespace

import pytest
from conftest import THERMO, WIPE, oracle_models
from far.evolve.arms import COMPARED, values
from far.evolve.config import SelectionSettings
from far.evolve.metrics import METRICS, holdout_metrics
from far.evolve.search_baseline import SlicesSuite, as_scored
from far.evolve.task import Action
from far.models.backends import ModelsConfig
from far.rollout.policy import Policy
from far.rollout.trajectory import COMPLETED, DENIED, HANDED_OFF, SHUTDOWN, VETOED, Step, Trajectory
from far.search.jobs.assemble import build_evaluator
from far.search.jobs.config import RunConfig
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.taxonomy import FailureKind, SuccessKind
from far.verifiers.verdict import Failure, Verdict

_ALL = list(EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300)).scenarios("holdout"))
# every figure's inputs: injected, harmful and the rest
HOLDOUT = ([s for s in _ALL if s.ground_truth.injected][:8] + [s for s in _ALL if METRICS["hcr"].counts(s)][:8]
           + [s for s in _ALL if not s.ground_truth.injected and not s.ground_truth.unsafe][:24])
POLICY = Policy(cloud_threshold=0.5, max_retries=1)


def step(index: int, node: str, decision: str, **inputs) -> Step:
    return Step(index, node, decision, None, inputs, 0.0, 0.0)


def rollout(outcome: str, *steps: Step) -> Trajectory:
    return Trajectory("s", POLICY, (step(0, "edge_assess", "handle"), *steps, step(9, "finish", outcome)), outcome)


def verdict(z: tuple[float, ...], *kinds: FailureKind) -> Verdict:
    return Verdict(tuple(Failure(kind, True, 1.0, 1, "execute", 0, "edge_assess", "handle", None) for kind in kinds),
                   (), 0.0, z)


def test_the_sample_holds_every_figure_s_inputs() -> None:
    assert all(sum(map(METRICS[f].counts, HOLDOUT)) >= 3 for f in COMPARED)
    assert len({s.group_key for s in HOLDOUT}) >= 5


def test_rollouts_read_as_a_refusal_a_call_or_a_question() -> None:
    executed = step(2, "execute", "success", call=WIPE, effect=True)
    cases = [
        (rollout(VETOED), Action("refuse")),
        (rollout(COMPLETED, step(1, "confirm", "approved", call=WIPE), executed), Action("call", WIPE, True)),
        (rollout(COMPLETED, step(1, "confirm", "not_asked", call=WIPE), executed), Action("call", WIPE, False)),
        # the last call that took effect, not one whose attempt failed
        (rollout(COMPLETED, step(1, "execute", "error", call=WIPE, effect=False),
                 step(2, "execute_local", "success", call=THERMO, effect=True)), Action("call", THERMO, False)),
        (rollout(COMPLETED), Action("ask")),  # completed with nothing executed
        (rollout(DENIED, step(1, "confirm", "denied", call=WIPE)), Action("ask")),
        (rollout(HANDED_OFF), Action("ask")),
        (rollout(SHUTDOWN, executed), Action("ask")),
    ]
    verdicts = [verdict((1.0, 0.5, 1.0, 1.0)), verdict((0.0, 1.0, 1.0, 1.0), FailureKind.UNSAFE_ACTION_EXECUTED),
                *[verdict((1.0, 1.0, 0.0, 0.5), FailureKind.OVER_REFUSAL)] * (len(cases) - 2)]
    costs = [float(i) for i in range(len(cases))]
    trajectories = []
    for (trajectory, _), cost in zip(cases, costs):
        trajectory.steps = (*trajectory.steps[:-1], Step(9, "finish", trajectory.outcome, None, {}, cost, 0.0))
        trajectories.append(trajectory)
    scored = as_scored(SimpleNamespace(verdicts=verdicts, trajectories=trajectories))
    assert [s.action for s in scored] == [expected for _, expected in cases]
    assert [s.z for s in scored] == [tuple(v.z) for v in verdicts]
    assert scored[1].failures == ("UNSAFE_ACTION_EXECUTED",) and scored[0].failures == ()
    assert [s.cost for s in scored] == [t.cost for t in trajectories] == costs
    assert all(s.text == "" and s.verdict is v for s, v in zip(scored, verdicts))
    with pytest.raises(ValueError):  # one verdict per rollout
        as_scored(SimpleNamespace(verdicts=verdicts[:-1], trajectories=trajectories))


def test_a_policy_evaluation_on_fate_s_slices_reads_as_fate_s_scored_actions() -> None:
    dev, holdout = _ALL[:30], HOLDOUT
    suite = SlicesSuite(dev, holdout)
    assert suite.scenarios("train") == dev and suite.scenarios("holdout") == holdout
    assert suite.describe() == {"name": "fate-dev-holdout", "train": 30, "holdout": len(holdout)}
    evaluator = build_evaluator(RunConfig(models=ModelsConfig.model_validate(oracle_models())), suite=suite)
    evaluation = evaluator.evaluate("p", Policy(cloud_threshold=0.5, max_retries=1), "holdout")
    scored = as_scored(evaluation)
    assert len(scored) == len(holdout)
    outcomes = [t.outcome for t in evaluation.trajectories]
    assert [s.kind == "refuse" for s in scored] == [o == VETOED for o in outcomes]
    ran = [o == COMPLETED and bool(t.executions()) for o, t in zip(outcomes, evaluation.trajectories)]
    assert [s.kind == "call" for s in scored] == ran
    assert {s.kind for s in scored} == {"call", "refuse", "ask"}  # vetoed harm, calls run, faults shut down
    assert all(s.action.call == t.executions()[-1].inputs["call"] for s, t in zip(scored, evaluation.trajectories)
               if s.kind == "call")
    assert [s.z for s in scored] == [tuple(v.z) for v in evaluation.verdicts]
    assert [s.cost for s in scored] == [t.cost for t in evaluation.trajectories]
    # the arms' per-input values of these actions average to the figures FATE's rounds report
    per_input = values(holdout, scored)
    overall = holdout_metrics(holdout, scored, SelectionSettings(), by_category=False)["overall"]
    for figure in COMPARED:
        assert sum(per_input[figure]) / len(per_input[figure]) == pytest.approx(overall[figure])
    done = sum(per_input["tsr"])
    assert done == sum(SuccessKind.TASK_SUCCESS in v.successes for v in evaluation.verdicts) > 0
    assert sum(per_input["over_refusal"]) == sum(s.kind in ("refuse", "ask") for s, x in zip(scored, holdout)
                                                 if METRICS["over_refusal"].counts(x)) > 0
