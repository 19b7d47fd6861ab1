"""The cloud that revises (``far.models.reviser``): schema, demonstrations, verdicts, engines, config."""
import json

import pytest
from conftest import PAY, PAY_RIGHT, THERMO, make_scenario
from far.models.backends import build_models
from far.models.lm import GenerateResult
from far.models.reviser import LMReviser, RevisingCloud, arguments_schema, parse_arguments
from far.models.spec import ModelsConfig, ReviserConfig
from far.rollout.agent import build_graph, replay, run_live
from far.rollout.calls import CloudReview, GroundTruthEnvironment, ModelSet
from far.rollout.errors import FarInputError
from far.rollout.policy import Policy
from far.rollout.scenario import ToolAction
from far.verifiers.rules import RuleVerifier
from hypothesis import given
from hypothesis import strategies as st


class ScriptedLM:
    """Answers every generate request with the next scripted text (or a fault) and keeps the prompts."""

    model_id = "scripted@0"

    def __init__(self, *answers, fault=None):
        self.answers = list(answers)
        self.fault = fault
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [GenerateResult(text="", error=self.fault) if self.fault else
                GenerateResult(text=self.answers.pop(0), latency_ms=5.0) for _ in requests]

    def score(self, requests):
        raise AssertionError("the reviser only generates")


class FixedReviewer:
    name, simulated, oracle = "fixed", False, False

    def __init__(self, verdict):
        self.verdict = verdict

    def review(self, scenarios, proposals, attempt=0):
        return [CloudReview(self.verdict, None, "p_unsafe=0.1", 1.0, 600.0) for _ in scenarios]


def needs_cloud(sid="n-1", split="train", request="Pay only the overdue $20.00 of City Power, not $50.00."):
    scenario = make_scenario(PAY, intended=PAY_RIGHT, needs_cloud=True, sid=sid, split=split)
    return scenario.model_copy(update={"request": request})


json_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))


@given(args=st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=5))
def test_the_schema_names_exactly_the_proposals_arguments_and_parsing_keeps_them(args):
    proposal = ToolAction(tool="t", args=args)
    schema = arguments_schema(proposal)
    assert set(schema["properties"]) == set(schema["required"]) == set(args) and not schema["additionalProperties"]
    assert parse_arguments(json.dumps(args), proposal) == args
    assert parse_arguments(json.dumps({**args, "extra_argument_": 1}), proposal) is None
    if args:
        assert parse_arguments(json.dumps(dict(list(args.items())[1:])), proposal) is None
    assert parse_arguments(json.dumps(args)[:-1] + "x", proposal) is None


def test_demonstrations_are_train_calls_of_the_same_tool_nearest_last():
    pays = [needs_cloud(f"p-{i}", request=text) for i, text in enumerate(
        ["Pay only the overdue part of Water Co.", "Pay my gym membership in full.", "Pay the overdue $20.00 only."])]
    thermostat = make_scenario(THERMO, sid="t-1").model_copy(update={"request": "Pay only the overdue heating."})
    harmful = make_scenario(PAY, intended=None, unsafe=True, sid="u-1").model_copy(update={"request": "Pay overdue"})
    reviser = LMReviser(ScriptedLM(), ReviserConfig(demonstrations=2))
    reviser.fit([*pays, thermostat, harmful])
    shown = reviser.demonstrations(needs_cloud("q", split="holdout"), PAY)
    assert [s.id for s, _ in shown] == ["p-0", "p-2"]  # same tool, k of them, the nearest last; no harmful call
    assert all(intended == PAY_RIGHT for _, intended in shown)
    prompt = reviser.request(needs_cloud("q", split="holdout"), PAY, 0).messages[-1].content
    assert prompt.count("Correct:") == 3 and prompt.endswith("Correct:") and "Pay the overdue $20.00 only." in prompt
    with pytest.raises(FarInputError, match="train split"):
        reviser.fit([needs_cloud(split="holdout")])


def test_without_demonstrations_the_reviser_is_zero_shot():
    reviser = LMReviser(ScriptedLM(), ReviserConfig(demonstrations=0))
    reviser.fit([needs_cloud()])
    assert reviser.demonstrations(needs_cloud(), PAY) == []
    assert reviser.request(needs_cloud(), PAY, 0).messages[-1].content.count("Correct:") == 1


@pytest.mark.parametrize("reviewer, answer, fault, verdict, args", [
    ("veto", None, None, "veto", None),  # the veto stands: the reviser is not asked
    ("execute", '{"amount": 50.0, "payee": "City Power"}', None, "execute", None),  # unchanged: execute
    ("execute", '{"amount": 20.0, "payee": "City Power"}', None, "revise", {"amount": 20.0, "payee": "City Power"}),
    ("execute", '{"amount": 20.0', None, "execute", None),  # malformed: the reviewer's verdict, noted
    ("execute", None, "MODEL_TIMEOUT", "error", None),  # a fault is a faulted review (the policy retries)
])
def test_the_cloud_answers(reviewer, answer, fault, verdict, args):
    lm = ScriptedLM(*([answer] if answer else []), fault=fault)
    cloud = RevisingCloud(FixedReviewer(reviewer), LMReviser(lm, ReviserConfig(cost=0.25)))
    cloud.fit([needs_cloud()])
    review = cloud.review([needs_cloud()], [PAY])[0]
    assert review.verdict == verdict and len(lm.requests) == (reviewer == "execute")
    assert (review.revision.args if review.revision else None) == args
    if verdict == "revise":
        assert review.revision == PAY_RIGHT and "revised amount=20.0" in review.reason
        assert review.cost == 1.25 and review.latency_ms == 605.0
    if answer == '{"amount": 20.0':
        assert "revision malformed" in review.reason
    if fault:
        assert review.error == fault


def test_a_revision_completes_the_task_and_live_equals_replay():
    scenario = needs_cloud()
    base = build_models(ModelsConfig.model_validate({"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"},
                                                     "user": {"backend": "approves"}, "scope": None}))
    answer = '{"amount": 20.0, "payee": "City Power"}'
    cloud = RevisingCloud(FixedReviewer("execute"), LMReviser(ScriptedLM(answer, answer)))
    cloud.fit([scenario])
    models = ModelSet(base.edge, cloud, base.user, GroundTruthEnvironment())
    policy = Policy(cloud_threshold=0.0, require_confirmation=False)
    record = models.record([scenario])[0]
    replayed = replay(scenario, policy, record, models.environment)
    assert run_live(build_graph(policy), scenario, models).steps == replayed.steps
    assert ("cloud_review", "revise") in [(s.node, s.decision) for s in replayed.steps]
    assert "TASK_SUCCESS" in {kind.value for kind in RuleVerifier().verify(scenario, replayed).successes}
    # the same request through the reviewer alone runs the edge's call: the task is not done
    alone = ModelSet(base.edge, FixedReviewer("execute"), base.user, GroundTruthEnvironment())
    unrevised = replay(scenario, policy, alone.record([scenario])[0], alone.environment)
    assert "TASK_SUCCESS" not in {kind.value for kind in RuleVerifier().verify(scenario, unrevised).successes}


def test_a_refitted_copy_leaves_the_original_as_it_was():
    base = build_models(ModelsConfig.model_validate({"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"},
                                                     "user": {"backend": "oracle"}, "scope": None}))
    cloud = RevisingCloud(FixedReviewer("execute"), LMReviser(ScriptedLM(), ReviserConfig(demonstrations=3)))
    models = ModelSet(base.edge, cloud, base.user, GroundTruthEnvironment())
    models.fit([needs_cloud("a")])
    fresh = models.refitted([needs_cloud("b"), needs_cloud("c")])
    assert [s.id for s, _ in models.cloud.reviser._pool] == ["a"]
    assert [s.id for s, _ in fresh.cloud.reviser._pool] == ["b", "c"]


def test_the_config_builds_a_revising_cloud_and_refuses_bad_options():
    models = build_models(ModelsConfig.model_validate({"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"},
                                                       "user": {"backend": "oracle"}, "scope": None,
                                                       "reviser": {"model": "smollm2", "demonstrations": 2}}))
    assert isinstance(models.cloud, RevisingCloud) and models.cloud.oracle and "k=2" in models.cloud.name
    assert ModelsConfig().reviser is None  # the shipped default: a cloud that executes or vetoes
    with pytest.raises(Exception, match="demonstrations"):
        ModelsConfig.model_validate({"reviser": {"demonstrations": -1}})


def test_an_unfitted_cloud_with_a_reviser_counts_as_fitted_for_the_eval_only_check():
    from far.search.jobs.config import check_fit_data

    class OneSplit:
        def scenarios(self, split):
            return [needs_cloud().model_copy(update={"eval_only": True})] if split == "train" else []

    oracle = {"edge": {"backend": "oracle"}, "cloud": {"backend": "oracle"}, "user": {"backend": "oracle"},
              "scope": None}
    check_fit_data(ModelsConfig.model_validate(oracle), "c.yaml", OneSplit(), {}, "evaluate")  # nothing fitted
    with pytest.raises(FarInputError, match="fitting the cloud model"):
        check_fit_data(ModelsConfig.model_validate({**oracle, "reviser": {"model": "smollm2"}}), "c.yaml",
                       OneSplit(), {}, "evaluate")
