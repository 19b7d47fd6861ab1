"""FATE: the PFPO objective on fixed tensors, the decision task, each stage's core (collect, repair, select,
train, calibrate, gate), the eval-only guard, and complete rounds on a tiny randomly initialised model with
SmolLM2's tokenizer (the real model: -m slow)."""
from __future__ import annotations

import json
import math
import random

import pytest
from conftest import oracle_models
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.acceptance import NO_HARM, unsafe_rise  # noqa: E402
from far.evolve.calibrate import fit_caution  # noqa: E402
from far.evolve.collect import Failure, failures, rehearsal_order, require_trainable  # noqa: E402
from far.evolve.config import EvolveConfig, KappaConfig, SelectionSettings, TrainingSettings  # noqa: E402
from far.evolve.decision_head import DecisionHead, DecisionRule, cross_fitted, fit_head  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.metrics import own_right_decision  # noqa: E402
from far.evolve.objectives import group_advantages, pfpo_loss  # noqa: E402
from far.evolve.repair import propose, temperatures  # noqa: E402
from far.evolve.select import Candidate, input_thresholds, r_pf_of, select, training_reward  # noqa: E402
from far.evolve.task import DECISIONS, MALFORMED, DecisionTask, parse_decision  # noqa: E402
from far.evolve.train import rehearsal_count  # noqa: E402
from far.models.backends import ModelsConfig, build_models  # noqa: E402
from far.rollout.errors import FarInputError  # noqa: E402
from far.rollout.eval_only import EvalOnlyRegistry  # noqa: E402
from far.rollout.policy import Policy  # noqa: E402
from far.rollout.scenario import Scenario, ToolAction  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402
from far.verifiers.rules import RuleVerifier  # noqa: E402

# the settings each group of EvolveConfig holds: tests name them flat (``tiny_config(dev_size=24)``)
GROUP_OF = {**dict.fromkeys(("dev_size", "check_size", "calibration_size", "holdout_size"), "data"),
            **dict.fromkeys(("candidates", "temperature_min", "temperature_max", "exploration"), "repair"),
            **dict.fromkeys(("kappa", "weights", "lam", "beta", "reward_weight", "diversity_bonus"), "selection"),
            **dict.fromkeys(("sft", "pfpo", "rehearsal", "rehearsal_min"), "training"),
            "harm_bar": "calibration", "safety_tolerance": "gate", "min_improvement": "gate"}


def grouped(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        if key in GROUP_OF:
            out.setdefault(GROUP_OF[key], {})[key] = value
        else:
            out[key] = value
    return out


def test_group_advantages_are_centred_not_scaled():
    rewards = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 2.0, 2.0, 2.0]])
    advantages = group_advantages(rewards)
    assert torch.equal(advantages, torch.tensor([[-3.0, -1.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0]]))


def test_pfpo_loss_on_fixed_tensors():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    # at the sampling policy (ratio 1) and the reference: loss = -mean over tokens of A
    assert float(pfpo_loss(old, old, old, advantages, mask, 0.2, 0.1)) == pytest.approx(-(1 + 1 - 2) / 3)
    # ratio 2 on every token: clipped to 1.2 for A > 0, unclipped (min) for A < 0
    new = old + torch.log(torch.tensor(2.0))
    loss = pfpo_loss(new, old, new, advantages, mask, 0.2, 0.0)
    assert float(loss) == pytest.approx(-(1.2 + 1.2 + 2.0 * -2.0) / 3)
    # KL penalty: k3 with log π_ref − log π = −log 2 on every token: exp(d) − d − 1 = 0.5 + log 2 − 1
    k3 = 0.5 + torch.log(torch.tensor(2.0)).item() - 1.0
    with_kl = pfpo_loss(new, new, old, torch.zeros(2), mask, 0.2, 0.5)
    assert float(with_kl) == pytest.approx(0.5 * k3)
    # gradients flow only through the new log-probs
    new = old.clone().requires_grad_(True)
    pfpo_loss(new, old, old, advantages, mask, 0.2, 0.1).backward()
    assert new.grad is not None and new.grad[1, 1] == 0  # masked token: no gradient


def test_the_kl_reported_is_k3_over_the_completion_tokens():
    from far.evolve.objectives import kl_k3, masked_mean

    new = torch.log(torch.tensor([[0.5, 0.2], [0.9, 0.1]]))
    ref = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.1]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    per_token = kl_k3(new, ref)
    assert per_token[0, 0] == 0.0 and per_token[1, 1] == 0.0  # where π_θ = π_ref
    assert per_token[0, 1] == pytest.approx(2.0 - math.log(2.0) - 1.0)  # r = 0.4/0.2: r - log r - 1
    assert float(masked_mean(per_token, mask)) == pytest.approx(float(per_token[0, 1] + per_token[1, 0]) / 3)
    assert bool((per_token >= 0).all())


def test_clip_fraction_counts_only_the_tokens_where_the_clip_binds():
    from far.evolve.objectives import clip_fraction

    old = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert clip_fraction(old, old, torch.tensor([1.0, -1.0]), mask, 0.2) == 0.0  # first pass: ratio 1
    new = torch.log(torch.tensor([[1.5, 1.1, 0.5], [0.5, 1.5, 9.0]]))
    # A > 0 binds above 1.2 (token 0); A < 0 binds below 0.8 (token 3); the masked token does not count
    assert clip_fraction(new, old, torch.tensor([1.0, -1.0]), mask, 0.2) == pytest.approx(2 / 5)
    assert clip_fraction(new, old, torch.tensor([0.0, 0.0]), mask, 0.2) == 0.0  # no advantage, nothing binds


def test_decisions_are_parsed_strictly():
    assert parse_decision(" Escalate.") == "escalate"
    assert parse_decision("handle") == "handle"
    for bad in ("", "handle it", "yes", "refuse!", "escalate\nhandle"):
        assert parse_decision(bad) == MALFORMED


@pytest.fixture(scope="module")
def task():
    models = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    policy = Policy(cloud_threshold=0.5, max_retries=1, require_confirmation=True)
    return DecisionTask(models, RuleVerifier(), policy)


def test_decisions_change_what_happens(task):
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenarios = [s for s in suite.scenarios("train")]
    unsafe = [s for s in scenarios if s.ground_truth.unsafe and s.ground_truth.intended_action is None][:5]
    benign = [s for s in scenarios if s.kind == "benign" and not s.ground_truth.tool_faults][:5]
    assert unsafe and benign
    for scenario in unsafe:
        handled, refused = task.score([scenario, scenario], ["handle", "refuse"])
        assert refused.z[0] == 1.0  # refusing a harmful request is safe
        assert "OVER_REFUSAL" not in refused.failures
    for scenario in benign:
        handled, escalated, refused, malformed = task.score([scenario] * 4, ["handle", "escalate", "refuse",
                                                                              MALFORMED])
        assert "OVER_REFUSAL" in refused.failures and refused.z[2] == 0.0
        assert "UNNECESSARY_CLOUD_CALL" in escalated.failures
        assert handled.z[1] == 1.0
        assert malformed.z == (0.0, 0.0, 0.0, 0.0) and malformed.verdict is None


def test_own_rates_read_the_models_decision_not_the_outcome(task):
    from far.evolve.metrics import holdout_metrics

    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=400, seed=4))
    train = list(suite.scenarios("train"))
    injected = next(s for s in train if s.ground_truth.injected)
    harmful = next(s for s in train if s.ground_truth.unsafe and not s.ground_truth.injected)
    benign = next(s for s in train if not s.ground_truth.unsafe and not s.ground_truth.needs_cloud
                  and not s.ground_truth.injected)
    scenarios = [injected, injected, harmful, benign, benign]
    decisions = ["handle", "refuse", "handle", "refuse", "handle"]
    metrics = holdout_metrics(scenarios, task.score(scenarios, decisions), SelectionSettings())["overall"]
    assert metrics["own_asr"] == 0.5 and metrics["own_hcr"] == 1.0 and metrics["own_over_refusal"] == 0.5
    assert metrics["own_tsr"] == pytest.approx(2 / 5)  # refusing the injection, handling the benign call
    assert [own_right_decision(s) for s in (injected, harmful, benign)] == ["refuse", "refuse", "handle"]


def test_the_safety_gate_names_the_own_rates_that_rose_beyond_tolerance():
    from far.evolve.acceptance import unsafe_rise

    nan = float("nan")
    before = {"own_asr": 0.10, "own_hcr": 0.0}
    assert unsafe_rise(before, {"own_asr": 0.10, "own_hcr": 0.0}, 0.0) == ""
    assert unsafe_rise(before, {"own_asr": 0.05, "own_hcr": 0.0}, 0.0) == ""  # safer is kept
    assert unsafe_rise(before, {"own_asr": 0.20, "own_hcr": 0.0}, 0.0).startswith("own_asr 0.100 -> 0.200")
    assert unsafe_rise(before, {"own_asr": 0.20, "own_hcr": 0.0}, 0.15) == ""  # within the tolerance
    assert "own_hcr" in unsafe_rise(before, {"own_asr": 0.1, "own_hcr": 0.5}, 0.0)
    assert unsafe_rise({"own_asr": nan, "own_hcr": 0.0}, {"own_asr": 1.0, "own_hcr": 0.0}, 0.0) == ""


def test_a_rolled_back_round_restores_the_adapter(tmp_path):
    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}  # repairs are kept
    config = tiny_config(tmp_path, safety_tolerance=0.0, dev_size=24, candidates=6, exploration=1.0, kappa=kappa)
    evolution = Evolution(config)
    before = evolution.model.snapshot()
    others = {"own_tsr": 0.5, "own_over_refusal": 0.0}
    answers = iter([{"own_asr": 0.0, "own_hcr": 0.0, "mean_r_pf": 0.0, "mean_reward": 0.0, **others},
                    {"own_asr": 0.5, "own_hcr": 0.0, "mean_r_pf": 1.0, "mean_reward": 1.0, **others}])

    def check_after_a_harmful_update():
        answer = next(answers)
        if answer["own_asr"]:  # as if the round's training had moved the adapter (and made it less safe)
            with torch.no_grad():
                for p in evolution.model.model.parameters():
                    if p.requires_grad:
                        p.add_(0.5)
        return answer

    evolution.check_metrics = check_after_a_harmful_update
    from far.evolve import record, train

    measured = []  # at each fit measurement: did the adapter still hold the round's training?
    share = train.Fit.share

    def spy(fit):
        current = evolution.model.snapshot()
        measured.append(any(not torch.equal(before[n], current[n]) for n in before))
        return share(fit)

    train.Fit.share = spy
    evaluated = []  # at each holdout evaluation: did the adapter hold the round's (harmful) update?
    evaluate = evolution.evaluate

    def evaluate_spy():
        current = evolution.model.snapshot()
        evaluated.append(any(not torch.equal(before[n], current[n]) for n in before))
        return evaluate()

    evolution.evaluate = evaluate_spy
    try:
        summary = evolution.run(tmp_path)
    finally:
        train.Fit.share = share
    assert summary["rounds"][-1]["rolled_back"].startswith("own_asr 0.000 -> 0.500")
    # round 0, the discarded model (reported: what the gate kept from shipping), the model kept after the round
    assert evaluated == [False, True, False]
    discarded = [f"discarded_{key}" for key in record.OWN]
    assert all(summary["rounds"][0][key] is None for key in discarded)
    figures = [summary["rounds"][-1][key] for key in discarded]  # NaN: the holdout holds no such request
    assert all(isinstance(x, float) and (math.isnan(x) or 0.0 <= x <= 1.0) for x in figures)
    assert not math.isnan(figures[2])  # own-TSR: every holdout request counts
    after = evolution.model.snapshot()
    assert all(torch.equal(before[n], after[n]) for n in before)  # the round's update is undone
    assert summary["rounds"][-1]["buffer"] and measured and measured[-1]  # sft_fit: what SFT left, not the rollback


def test_a_train_split_with_no_room_for_the_check_slice_is_refused(tmp_path):
    with pytest.raises(FarInputError, match="check slice"):
        Evolution(tiny_config(tmp_path, dev_size=10_000))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcdefg"), max_size=30), st.integers(0, 35), st.integers(0, 9))
def test_a_slice_drawn_by_template_takes_whole_templates_up_to_its_size(groups, size, seed):
    """Every template drawn is taken whole, but the last one when the size cuts it; the size is reached when
    the pool allows; the draw is a function of the seed."""
    from far.evolve.collect import whole_templates

    pool = [Scenario(id=f"s{i}", suite="t", category="c", kind="benign", task_mode="executable", split="train",
                     request="r", proposed_action=ToolAction(tool="t"), group=g) for i, g in enumerate(groups)]
    drawn = whole_templates(pool, size, random.Random(seed))
    assert len(drawn) == min(size, len(pool)) and len({s.id for s in drawn}) == len(drawn)
    taken = list(dict.fromkeys(s.group for s in drawn))
    for g in taken[:-1]:  # whole, but the last
        assert sum(s.group == g for s in drawn) == groups.count(g)
    assert drawn == whole_templates(pool, size, random.Random(seed))


def test_dev_check_and_calibration_share_no_template(tmp_path):
    """The check slice (the gate's, early stopping's and the returned round's judge) and the calibration slice are
    written from templates of their own, as the holdout is: a lesson learns dev's wording, and a caution fitted on
    the check slice's templates would look safer there than on unseen ones."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, check_size=30))
    dev, check, calibration = ({s.group_key for s in part} for part in
                               (evolution.dev, evolution.check, evolution.calibration))
    assert len(evolution.check) == 30 and len(evolution.calibration) == 40
    assert not dev & check and not dev & calibration and not check & calibration
    assert all(s.split == "train" for s in [*evolution.check, *evolution.calibration])


def test_a_rollback_ends_the_run(tmp_path):
    """Every round collects its failures on the same dev slice: after a rollback the next round would teach the
    same lesson again, so the run stops and returns the model the rollback restored."""
    import pyarrow.parquet as pq

    evolution, adapters = scripted_checks(tmp_path, [(0.0, 0.5), (0.5, 0.9)], rounds=2)
    summary = evolution.run(tmp_path)
    table = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert len(table) == 2 and table[1]["rolled_back"].startswith("own_asr 0.000 -> 0.500")
    assert summary["stopped"].startswith("round 1 rolled back") and summary["kept_round"] == 0
    assert summary["kept_adapter"] is None and table[1]["check_own_tsr"] == 0.5  # the kept model's figures
    after = evolution.model.snapshot()
    assert all(torch.equal(adapters[0][n], after[n]) for n in after)


def test_temperature_schedule_spans_the_range():
    assert temperatures(4, 0.3, 1.2) == pytest.approx([0.3, 0.6, 0.9, 1.2])
    assert temperatures(1, 0.3, 1.2) == [0.3]


def test_supervision_samples_only_the_feasible_front(task):
    """A benign call refused: handling and escalating it both score z = 1 everywhere, but escalating spends an
    unnecessary cloud call, so the tie break keeps handling alone on the front; refusing (over-refusal) and a
    malformed answer are infeasible."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenario = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    decisions = ["handle", "escalate", "refuse", MALFORMED]
    scored = task.score([scenario] * 4, decisions)
    assert scored[0].z == scored[1].z == (1.0, 1.0, 1.0, 1.0)
    strict = KappaConfig(executable=(1.0, 1.0, 1.0, 1.0), diagnostic=(1.0, 1.0, 1.0, 1.0))
    settings_ = SelectionSettings(diversity_bonus=0.0, kappa=strict)
    failure = Failure(scenario, "refuse", scored[2], (1.0, 1.0, 1.0, 1.0))
    candidates = [Candidate(d, s, sum(s.z)) for d, s in zip(decisions, scored)]
    chosen = {select(settings_, failure, candidates, random.Random(seed)).chosen.scored.decision for seed in range(20)}
    picked = select(settings_, failure, candidates, random.Random(0))
    assert chosen == {"handle"} and picked.q == pytest.approx([1.0, 0.0, 0.0, 0.0]) and picked.rule == "tie_break"
    # only infeasible repairs (over-refusal, malformed): nothing to supervise with
    assert select(settings_, failure, candidates[2:], random.Random(0)).chosen is None
    # the failed action is never its own repair, whatever κ (here 0: everything feasible)
    anything = SelectionSettings(kappa=KappaConfig(executable=(0.0,) * 4, diagnostic=(0.0,) * 4))
    assert select(anything, failure, [candidates[2], candidates[2]], random.Random(0)).chosen is None
    assert select(settings_, failure, [candidates[0], candidates[2]], random.Random(0)).rule == "repair"
    assert select(settings_, failure, candidates[2:], random.Random(0)).rule == "none"


def synthetic(decision: str, z, reward: float = 0.0, cost: float = 1.0):
    from types import SimpleNamespace

    from far.evolve.task import ScoredDecision

    return ScoredDecision(decision=decision, verdict=SimpleNamespace(reward=reward), z=tuple(z), failures=(), cost=cost)


@pytest.mark.parametrize("candidates, rule, taught", [
    # one repairs the security failure; the failed decision again repairs nothing
    ([("escalate", (1, 1, 1, 1)), ("handle", (0, 1, 1, 1))], "repair", {"escalate"}),
    # two repair it, one still below κ on security
    ([("escalate", (1, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1))], "kappa", {"escalate"}),
    # both feasible, one dominated
    ([("escalate", (1, 1, 1, 1)), ("refuse", (0.9, 0.8, 1, 1))], "pareto", {"escalate"}),
    # equal on z: the reward table, then the cost, break the tie
    ([("escalate", (1, 1, 1, 1), 5.0), ("refuse", (1, 1, 1, 1), 8.0)], "tie_break", {"refuse"}),
    ([("escalate", (1, 1, 1, 1), 5.0, 2.0), ("refuse", (1, 1, 1, 1), 5.0, 1.0)], "tie_break", {"refuse"}),
    # incomparable on z: q* weighs both
    ([("escalate", (1, 0.6, 1, 1)), ("refuse", (0.8, 1, 1, 1))], "r_pf", {"escalate", "refuse"}),
    ([("handle", (0, 1, 1, 1))], "none", set()),
])
def test_each_selection_names_the_rule_that_settled_it(candidates, rule, taught):
    """Synthetic z for a failed 'handle' of a harmful request (security 0, the rest 1), κ 0.5 (control 1)."""
    from conftest import make_scenario

    failure = Failure(make_scenario(unsafe=True), "handle", synthetic("handle", (0, 1, 1, 1)), (1.0, 1.0, 1.0, 1.0))
    settings_ = SelectionSettings(diversity_bonus=0.0)
    scored = [Candidate(c[0], synthetic(*c), r_pf_of(settings_, c[1])) for c in candidates]
    picks = [select(settings_, failure, scored, random.Random(seed)) for seed in range(40)]
    assert {p.rule for p in picks} == {rule}
    assert {p.chosen.text for p in picks if p.chosen is not None} == taught
    assert all(sum(p.q) == pytest.approx(1.0 if taught else 0.0) for p in picks)


@pytest.mark.parametrize("settings_, candidates, rule, taught", [
    # no verifier rescoring: the first candidate that changes the failed decision, whatever its z
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1)), ("escalate", (1, 1, 1, 1))],
     "first_valid", "refuse"),
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1)), ("escalate", (1, 1, 1, 1))], "repair", "escalate"),
    ({"rule": "first_valid"}, [("handle", (0, 1, 1, 1))], "none", None),
    # no Pareto front: the feasible repair with the highest sum, whatever the front would weigh
    ({"rule": "weighted_sum"}, [("escalate", (1, 0.6, 1, 1)), ("refuse", (0.8, 1, 1, 1))], "weighted_sum", "refuse"),
    ({"rule": "weighted_sum"}, [("escalate", (1, 1, 1, 1)), ("refuse", (0.3, 1, 1, 1))], "kappa", "escalate"),
    # no over-refusal objective: a refusal that over-refuses repairs, and here beats the escalation; with the
    # objective, it is no repair at all
    ({"objectives": ["security", "utility", "controllability"]},
     [("refuse", (1, 1, 0, 1)), ("escalate", (1, 0.6, 1, 1))], "pareto", "refuse"),
    ({}, [("refuse", (1, 1, 0, 1)), ("escalate", (1, 0.6, 1, 1))], "repair", "escalate"),
])
def test_the_papers_ablations_choose_as_they_say(settings_, candidates, rule, taught):
    from conftest import make_scenario

    failure = Failure(make_scenario(unsafe=True), "handle", synthetic("handle", (0, 1, 1, 1)), (1.0, 1.0, 1.0, 1.0))
    selection = SelectionSettings(diversity_bonus=0.0, **settings_)
    scored = [Candidate(c[0], synthetic(*c), r_pf_of(selection, c[1])) for c in candidates]
    picks = [select(selection, failure, scored, random.Random(seed)) for seed in range(40)]
    assert {p.rule for p in picks} == {rule}
    chosen = {p.chosen.text for p in picks if p.chosen is not None}
    assert chosen == (taught if isinstance(taught, set) else {taught} if taught else set())



def test_evaluation_only_data_is_refused():
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=200, seed=4))
    require_trainable(list(suite.scenarios("train")))
    with pytest.raises(FarInputError, match="holdout"):
        require_trainable([suite.scenarios("holdout")[0]])
    flagged = suite.scenarios("train")[0].model_copy(update={"eval_only": True})
    with pytest.raises(FarInputError, match="1 evaluation-only"):
        require_trainable([flagged])
    # known by content: a copy under another id and suite name, with the mark stripped, is refused too
    known = suite.scenarios("train")[1]
    EvalOnlyRegistry().add([known], source="test")
    renamed = known.model_copy(update={"id": "renamed-1", "suite": "innocent-name", "category": "other"})
    with pytest.raises(FarInputError, match="evaluation-only"):
        require_trainable([renamed])


def tiny_config(tmp_path, **overrides) -> EvolveConfig:
    """A fast run on the tiny model and the oracle world, settings named flat (``GROUP_OF``): one SFT pass and no
    calibration, rehearsal floor or tie of the reward table unless a test asks for them."""
    base = {"suite": {"name": "edge_cloud", "seed": 3, "size": 200}, "model": {"base": "tiny-random"},
            "rounds": 1, "dev_size": 12, "holdout_size": 16, "candidates": 3, "calibration_size": 0,
            "rehearsal_min": 0, "sft": {"epochs": 1, "max_epochs": 1, "batch_size": 4},
            "pfpo": {"group": 2, "prompts_per_step": 4, "iterations": 2},
            "models": oracle_models(cache={"enabled": False}), "verifier": {"members": ["rules", "environment"]},
            "min_improvement": 0.0, "output": str(tmp_path)}
    return EvolveConfig.model_validate(grouped({**base, **overrides}))


def test_a_complete_round_on_a_tiny_model(tmp_path):
    import pyarrow.parquet as pq

    config = tiny_config(tmp_path)
    evolution = Evolution(config)
    before = {n: p.detach().clone() for n, p in evolution.model.model.named_parameters() if p.requires_grad}
    summary = evolution.run(tmp_path)
    rounds = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert [r["round"] for r in rounds] == [0, 1]
    assert rounds[1]["failures"] > 0  # an untrained random model fails plenty
    for name in ("asr", "hcr", "tsr", "over_refusal", "mean_r_pf", "malformed", "own_asr", "own_hcr", "own_tsr",
                 "own_over_refusal", "own_separation"):
        assert name in rounds[1]
    assert all(0.0 <= r["own_separation"] <= 1.0 for r in rounds)  # the holdout holds both kinds
    # no calibration slice, no decision rule: the model's argmax is what it decides
    assert all(r[f"argmax_{k}"] == r[k] or math.isnan(r[k]) for r in rounds for k in ("own_tsr", "own_asr", "own_hcr"))
    # rehearsal: correct dev decisions, up to one per repair, trained on beside the repairs
    assert rounds[1]["rehearsed"] <= rounds[1]["buffer"]
    rehearsed = rehearsal_order(list(evolution.correct.values()), 100, random.Random(0))
    assert all(s.split == "train" for s, _ in rehearsed) and len(rehearsed) == len(evolution.correct)
    safety = [s.ground_truth.unsafe or s.ground_truth.injected for s, _ in rehearsed]
    assert safety == sorted(safety, reverse=True)  # refusals of harm first
    assert not any(evolution.task.score([s], [d])[0].failures for s, d in rehearsed)  # no taxonomy failure either
    decided = sum(rounds[1][f"decided_by_{rule}"] for rule in ("repair", "kappa", "pareto", "tie_break", "r_pf",
                                                                "none"))
    assert decided == rounds[1]["failures"]  # every failure's repair was settled by exactly one rule
    steps = [rounds[1][f"seconds_{step}"] for step in ("lesson", "sft", "pfpo", "calibrate", "check", "holdout")]
    assert all(s >= 0 for s in steps) and sum(steps) <= rounds[1]["seconds"] + 1e-6  # where the round's time went
    if rounds[1]["buffer"]:  # two passes per batch by default: the clip fraction is measured, and the KL
        assert rounds[1]["clip_fraction"] is not None and 0.0 <= rounds[1]["clip_fraction"] <= 1.0
        assert rounds[1]["kl"] is not None and rounds[1]["kl"] >= 0.0
        assert rounds[1]["sft_epochs"] == 1 and 0.0 <= rounds[1]["sft_fit"] <= 1.0  # max_epochs 1: 1 pass
    by_category = pq.read_table(tmp_path / "rounds_by_category.parquet").to_pylist()
    assert {r["round"] for r in by_category} == {0, 1}
    buffer = pq.read_table(tmp_path / "replay_buffer_round1.parquet").to_pylist()
    assert all(row["split"] == "train" for row in buffer)  # never holdout
    assert set(row["scenario_id"] for row in buffer) <= set(summary["dev"])
    # early stopping is judged on a train slice apart from dev, never on the holdout
    assert summary["check"] and not set(summary["check"]) & (set(summary["dev"]) | set(summary["holdout"]))
    assert all(s.split == "train" for s in evolution.check) and rounds[1]["check_mean_r_pf"] is not None
    assert "check slice" in summary["stopped"] or summary["stopped"].startswith(("rounds done", "no failures"))
    after = dict(evolution.model.model.named_parameters())
    if buffer:  # SFT and PFPO moved the adapter
        assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    assert (tmp_path / "adapter_round1" / "adapter_model.safetensors").is_file()
    report = (tmp_path / "report.html").read_text()
    assert all(f'id="chart-{i}"' in report for i in range(5)) and "<script src=" not in report  # 5 metrics, inline
    assert json.loads((tmp_path / "summary.json").read_text())["stopped"]


@pytest.mark.slow
def test_a_round_with_the_real_smollm2(tmp_path):
    config = tiny_config(tmp_path, model={"base": "smollm2"}, dev_size=16, holdout_size=24,
                         candidates=4, pfpo={"group": 4, "prompts_per_step": 4})
    summary = Evolution(config).run(tmp_path)
    assert len(summary["rounds"]) == 2


def plain_completion_logprobs(model, prompt: str, completion: str):
    """The reference: one unpadded, uncached forward pass over prompt + completion + EOS; the log-probs of the
    completion's tokens."""
    prompt_ids = model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = model.tokenizer(completion, add_special_tokens=False)["input_ids"] + [model.tokenizer.eos_token_id]
    single = torch.tensor([prompt_ids + completion_ids])
    full = torch.log_softmax(model.model(input_ids=single).logits[0, :-1].float(), dim=-1)
    return full.gather(-1, single[0, 1:].unsqueeze(-1)).squeeze(-1)[-len(completion_ids):]


PROMPT_SETS = ("chat", "no common prefix", "identical")


def prompt_set(model, name: str) -> list[str]:
    return {"chat": [model.prompt(decision_messages_for("x" * i)) for i in (1, 7, 30)],
            "no common prefix": ["alpha beta", "Zebra", "9 lives and more words"],
            "identical": ["same prompt"] * 3}[name]


@pytest.mark.parametrize("prompts", PROMPT_SETS)
def test_completion_logprobs_match_a_plain_forward_pass(prompts):
    # only the completion positions' logits are computed, the common prefix once, the rest left-padded after
    # it: each row must equal a plain forward pass over its unpadded sequence
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random"))
    prompts = prompt_set(model, prompts)
    completions = ["handle", "escalate now", "refuse"]
    with torch.no_grad():
        logp, mask = model.completion_logprobs(prompts, completions)
        for row, (prompt, completion) in enumerate(zip(prompts, completions)):
            expected = plain_completion_logprobs(model, prompt, completion)
            assert int(mask[row].sum()) == len(expected) and mask[row, -len(expected):].all()
            assert torch.allclose(logp[row][mask[row].bool()], expected, atol=1e-4)


def test_completion_logprobs_give_the_plain_passs_gradients():
    # the shared prefix runs once with its gradient summed over the rows: the adapter's gradients must be those of
    # the plain per-sequence passes
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=3))
    with torch.no_grad():  # LoRA's B starts at zero (A's gradient would be zero): move it
        for name, p in model.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    prompts, completions = prompt_set(model, "chat"), ["handle", "refuse", "escalate"]
    trained = [p for p in model.model.parameters() if p.requires_grad]

    def gradients(loss):
        model.model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in trained]

    logp, mask = model.completion_logprobs(prompts, completions)
    shared = gradients((logp * mask).sum())
    plain = gradients(sum(plain_completion_logprobs(model, p, c).sum() for p, c in zip(prompts, completions)))
    assert any(g.abs().sum() > 0 for g in plain)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(shared, plain))


@pytest.mark.parametrize("options", [("handle", "escalate", "refuse"), ("handle",), ("yes", "no")])
@pytest.mark.parametrize("prompts", PROMPT_SETS)
def test_option_logprobs_equal_the_sum_over_each_completions_tokens(options, prompts):
    # the prompts' common prefix runs once and each prompt's cache is shared by the options: the same figures
    # as a plain pass over prompt + option + EOS
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=2))
    prompts = prompt_set(model, prompts)
    with torch.inference_mode():
        shared = model.option_logprobs(prompts, options, chunk=2)
        full = torch.tensor([[float(plain_completion_logprobs(model, p, o).sum()) for o in options] for p in prompts])
    assert shared.shape == (len(prompts), len(options)) and torch.allclose(shared, full, atol=1e-4)


def decision_messages_for(request: str):
    from far.models.lm import Message

    return [Message(role="system", content="guard"), Message(role="user", content=request)]


def test_constrained_choice_samples_only_valid_actions_by_their_probability():
    from far.evolve.policy_model import ModelSpec, PolicyModel
    from far.evolve.task import DECISIONS

    model = PolicyModel(ModelSpec(base="tiny-random", seed=1))
    prompts = [model.prompt(decision_messages_for(f"request {i}")) for i in range(3)]
    logp = model.option_logprobs(prompts, DECISIONS)
    greedy = model.choose(prompts, DECISIONS, temperature=0.0)
    for row, picked in zip(logp, greedy):
        assert picked == [DECISIONS[int(row.argmax())]]
    samples = model.choose(prompts[:1], DECISIONS, temperature=1.0, n=3000, seed=5)[0]
    assert set(samples) <= set(DECISIONS)
    expected = torch.softmax(logp[0], dim=-1)
    observed = torch.tensor([samples.count(d) / len(samples) for d in DECISIONS])
    assert torch.allclose(observed, expected, atol=0.04)


@pytest.mark.parametrize("line, field", [
    ("selection: {kappa: {executable: [1.0, 1.5, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {diagnostic: [1.0, 1.0, -0.5, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {executable: [.nan, 1.0, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: {executable: [1.0, 1.0, 1.0]}}", "selection.kappa"),
    ("selection: {kappa: auto}", "selection.kappa"),
    ("selection: {weights: [1.0, -1.0, 1.0, 1.0]}", "selection.weights"),
    ("selection: {weights: [1.0, .inf, 1.0, 1.0]}", "selection.weights"),
    ("selection: {lam: .nan}", "selection.lam"),
    ("repair: {candidates: 0}", "repair.candidates"),
    ("repair: {temperature_min: 1.0, temperature_max: 0.5}", "repair"),
    ("training: {sft: {epochs: 3, max_epochs: 2}}", "training.sft"),
    ("training: {pfpo: {reference: base}}", "training.pfpo.reference"),
    ("calibration: {harm_bar: some}", "calibration.harm_bar"),
    ("data: {calibration_size: -1}", "data.calibration_size"),
    ("dev_size: 32", "dev_size"),  # a setting outside its group
    ("supervise_on: decision", "supervise_on"),  # a setting that no longer exists
    ("model: {base: HuggingFaceTB/SmolLM2-360M}", "model.base"),
    ("model: {lora_targets: [q_proj, attn]}", "model.lora_targets"),
    ("model: {lora_targets: []}", "model.lora_targets"),
])
def test_bad_evolve_settings_are_one_line_before_anything_loads(tmp_path, capsys, line, field):
    import time

    from far.cli import main

    bad = tmp_path / "evolve.yaml"
    bad.write_text(line + "\n")
    started = time.time()
    assert main(["evolve", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "evolve.yaml" in lines[0] and f"'{field}" in lines[0], lines
    assert time.time() - started < 10  # no model loaded, no hub tried


def test_far_evolve_refuses_a_bad_config_naming_the_field(tmp_path, capsys):
    from far.cli import main  # `far`: every command, evolve included

    bad = tmp_path / "evolve.yaml"
    bad.write_text("rounds: 0\nselection: {kappa: {executable: [1.0, 1.0]}}\n")
    assert main(["evolve", str(bad)]) == 2
    error = capsys.readouterr().err
    assert "evolve.yaml" in error and ("rounds" in error or "kappa" in error)


def test_the_shipped_config_is_the_code_default():
    """configs/evolve.yaml writes the defaults out; it never differs from them (docs/evolve.md's table is the
    code's)."""
    from pathlib import Path

    from far.evolve.config import load_evolve_config

    shipped, _ = load_evolve_config(Path(__file__).resolve().parents[1] / "configs" / "evolve.yaml")
    assert shipped == EvolveConfig()
    assert shipped.training.pfpo.enabled  # the paper's pipeline: SFT, then PFPO, every round


def test_far_evolve_names_the_model_to_ship(tmp_path, capsys):
    import yaml

    from far.cli import main

    config = tmp_path / "evolve.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "out").model_dump(mode="json")))
    assert main(["evolve", str(config)]) == 0
    said = capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    kept = summary["kept_round"]
    assert "The model to ship: " + (f"round {kept}'s, {tmp_path / 'out'}/adapter_round{kept}/" if kept
                                    else "the base model") in said


def test_docs_evolve_has_a_row_for_every_setting():
    """docs/evolve.md's table names every leaf setting of EvolveConfig (the world's sections as a whole) with its
    default."""
    from pathlib import Path

    from pydantic import BaseModel

    table = (Path(__file__).resolve().parents[1] / "docs" / "evolve.md").read_text()
    world = {"suite", "models", "rewards", "costs", "verifier", "policy", "model"}

    def leaves(model: type[BaseModel], prefix: str = ""):
        for name, field in model.model_fields.items():
            path = prefix + name
            if isinstance(field.default, BaseModel) and path not in world and name != "kappa":
                yield from leaves(type(field.default), path + ".")
            else:
                yield path, field.default

    for path, default in leaves(EvolveConfig):
        row = next((line for line in table.splitlines() if line.startswith(f"| `{path}` |")), None)
        assert row is not None, path
        if path not in world and not isinstance(default, BaseModel):
            shown = list(default) if isinstance(default, tuple) else default
            assert f"`{shown}`" in row, (path, row)


def dev_failures(evolution: Evolution) -> list[Failure]:
    failed, _, _ = failures(evolution.dev, evolution.decide(evolution.dev), evolution.thresholds(evolution.dev),
                            evolution.best(evolution.dev))
    return failed


@pytest.mark.parametrize("exploration", [0.0, 1.0])
def test_exploration_draws_repair_candidates_uniformly(tmp_path, exploration):
    """A confident model sampled on-policy proposes the same decision K times; with ``exploration`` a share of
    the candidates is drawn uniformly among the valid decisions (and counted)."""
    evolution = Evolution(tiny_config(tmp_path, exploration=exploration, candidates=6))
    failed = dev_failures(evolution)[:8] or pytest.skip("no failures to repair on this draw")
    config = evolution.config

    def proposed():
        return propose(evolution.model, evolution.task, config.repair, config.selection, failed,
                       evolution.thresholds([f.scenario for f in failed]), config.seed, 1)

    repairs = proposed()
    drawn = [c.scored.decision for group in repairs.groups for c in group]
    assert len(drawn) == 6 * len(failed) and repairs.explored == (len(drawn) if exploration == 1.0 else 0)
    if exploration == 1.0:
        assert set(drawn) == {"handle", "escalate", "refuse"}
    assert 1 / 6 <= repairs.distinct_rate() <= 3 / 6
    again = proposed()  # seeded: the same draws
    assert [c.text for g in again.groups for c in g] == [c.text for g in repairs.groups for c in g]


def test_a_failure_is_judged_against_kappa():
    """A decision whose graded z clears κ is no failure; κ is per task mode."""
    from conftest import make_scenario
    from far.evolve.task import violated

    z = (0.97, 1.0, 0.9, 1.0)
    assert violated(z) == ["security", "over_refusal"]
    assert violated(z, (0.5, 0.5, 0.5, 1.0)) == []
    assert violated((0.2, 1.0, 1.0, 1.0), (0.5, 0.5, 0.5, 1.0)) == ["security"]
    kappa = KappaConfig(executable=(0.5, 0.5, 0.5, 1.0), diagnostic=(0.4, 0.4, 0.4, 1.0))
    executable = make_scenario()
    diagnostic = executable.model_copy(update={"task_mode": "diagnostic"})
    selection = SelectionSettings(kappa=kappa)
    assert input_thresholds(selection, executable, (1.0,) * 4) == (0.5, 0.5, 0.5, 1.0)
    assert input_thresholds(selection, diagnostic, (1.0,) * 4) == (0.4, 0.4, 0.4, 1.0)
    assert input_thresholds(selection, executable, (1.0, 0.0, 0.3, math.nan)) == (0.5, 0.0, 0.3, 1.0)
    # an objective left out (the 'no over-refusal objective' ablation) has no floor: it never fails a decision
    no_over_refusal = SelectionSettings(kappa=kappa, objectives=("security", "utility", "controllability"))
    assert input_thresholds(no_over_refusal, executable, (1.0,) * 4) == (0.5, 0.5, 0.0, 1.0)


def test_kappa_is_lowered_to_what_a_valid_decision_attains(tmp_path):
    """A cloud that vetoes and never revises, a user who approves: no decision does an injected request's task
    (utility 0 for all three), so κ on utility falls to 0 there and refusing it is no failure (it is rehearsed
    and it repairs a harmful handle); a benign request keeps κ."""
    from far.evolve.task import violated

    models = {"edge": {"backend": "oracle"}, "user": {"backend": "approves"},
              "cloud": {"backend": "oracle", "revise_rate": 0.0, "unsafe_catch_rate": 1.0}, "cache": {"enabled": False}}
    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}
    evolution = Evolution(tiny_config(tmp_path, models=models, kappa=kappa))
    train = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=200, seed=3)).scenarios("train"))
    injected = next(s for s in train if s.ground_truth.injected)
    benign = next(s for s in train if s.kind == "benign"
                  and not s.ground_truth.tool_faults)
    handled, refused = evolution.task.score([injected, injected], ["handle", "refuse"])
    assert handled.z[0] == 0.0 and refused.z[0] == 1.0 and refused.z[1] == 0.0
    thresholds = evolution.thresholds([injected])[0]
    assert thresholds == (0.5, 0.0, 0.5, 1.0)
    assert violated(refused.z, thresholds) == [] and violated(handled.z, thresholds) == ["security"]
    failure = Failure(injected, "handle", handled, evolution.best([injected])[0])
    candidates = [Candidate("refuse", refused, 0.0), Candidate("handle", handled, 0.0)]
    chosen = select(evolution.config.selection, failure, candidates, random.Random(0)).chosen
    assert chosen is not None and chosen.scored.decision == "refuse"
    assert evolution.thresholds([benign])[0] == (0.5, 0.5, 0.5, 1.0)


def test_a_lesson_teaches_repairs_and_rehearsal_on_the_decision_prompt(tmp_path):
    """SFT fits each kept repair on the plain decision prompt (what the deployed model answers; the repair prompt
    only proposes) and the rehearsed decisions; PFPO samples the same prompts, failures and rehearsal mixed: on
    the failures alone its gradient moves every answer one way."""
    from far.evolve.task import decision_messages

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, rehearsal_min=4))
    lesson = evolution.lesson(1, random.Random(0))
    assert lesson is not None and lesson.taught and lesson.rehearsed
    assert len(lesson.rehearsed) == min(rehearsal_count(evolution.config.training, len(lesson.taught)),
                                        len(evolution.correct))
    plain = {s.id: evolution.model.prompt(decision_messages(s)) for s in evolution.dev}
    expected = [(plain[t.failure.scenario.id], t.failure.scenario.id, t.chosen.scored.decision) for t in lesson.taught]
    expected += [(plain[s.id], s.id, d) for s, d in lesson.rehearsed]
    assert sorted((p, s.id, a) for p, s, a in lesson.examples) == sorted(expected)
    assert all(t.prompt != plain[t.failure.scenario.id] for t in lesson.taught)  # p_f proposed the repairs
    assert all(s.split == "train" for _, s, _ in lesson.examples)
    assert sum(lesson.decided.values()) == len(lesson.failures)


@pytest.mark.parametrize("repairs, per_repair, floor, expected", [
    (2, 1.0, 0, 2), (2, 1.0, 5, 5), (6, 1.0, 5, 6), (2, 2.0, 3, 4), (1, 1.0, 99, 99), (0, 1.0, 5, 0)])
def test_rehearsal_takes_per_repair_or_the_floor(repairs, per_repair, floor, expected):
    assert rehearsal_count(TrainingSettings(rehearsal=per_repair, rehearsal_min=floor), repairs) == expected


def test_rehearsal_takes_safety_first_as_the_pool_allows(tmp_path):
    evolution = Evolution(tiny_config(tmp_path))
    _, correct, _ = failures(evolution.dev, evolution.decide(evolution.dev), evolution.thresholds(evolution.dev),
                             evolution.best(evolution.dev))
    assert len(correct) >= 6
    for count in (0, 3, len(correct) + 5):
        rehearsed = rehearsal_order(correct, count, random.Random(0))
        assert len(rehearsed) == min(count, len(correct)) and len({s.id for s, _ in rehearsed}) == len(rehearsed)
        safety = [s.ground_truth.unsafe or s.ground_truth.injected for s, _ in rehearsed]
        assert safety == sorted(safety, reverse=True)  # harm's refusals first
    assert rehearsal_order(correct, 3, random.Random(1)) == rehearsal_order(correct, 3, random.Random(1))


def test_a_round_without_pfpo_trains_by_sft_alone(tmp_path, monkeypatch):
    import pyarrow.parquet as pq
    from far.evolve import loop

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, pfpo={"enabled": False}))
    monkeypatch.setattr(loop, "pfpo", None)  # never called
    evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert row["buffer"] > 0 and row["sft_loss"] is not None
    assert row["pfpo_loss"] is None and row["clip_fraction"] is None and row["kl"] is None


def test_pfpo_anchors_its_kl_to_the_model_sft_left(tmp_path):
    from far.evolve.train import pfpo

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0,
                                      pfpo={"group": 3, "prompts_per_step": 2, "lr": 0.05}))
    lesson = evolution.lesson(1, random.Random(0))
    model, config = evolution.model, evolution.config
    start = model.snapshot()  # as SFT left it
    calls = []
    plain = model.completion_logprobs

    def spy(prompts, completions, reference=False):
        weights = dict(model.model.named_parameters())
        calls.append((reference, all(torch.equal(v, weights[k]) for k, v in start.items())))
        return plain(prompts, completions, reference=reference)

    model.completion_logprobs = spy
    stats = pfpo(model, evolution.task, config.selection, config.training.pfpo, lesson, config.seed, 1)
    chunks = -(-len(lesson.examples) // 2)
    assert chunks >= 2 and len(calls) == chunks * (2 + config.training.pfpo.iterations)
    refs = [calls[c * 4 + 1] for c in range(chunks)]  # per chunk: old, ref, then one per optimisation pass
    # the adapter on, at the weights SFT left, though PFPO has moved them since the first chunk
    assert refs == [(False, True)] * chunks and not calls[4][1]
    assert len(stats.losses) == len(stats.clipped) == len(stats.kl) == chunks * 2
    assert stats.kl[0] == pytest.approx(0.0, abs=1e-6) and min(stats.kl) >= 0.0  # at π_ref first


@pytest.mark.parametrize("learned_after, expected_epochs", [(None, 1), (0, 1), (2, 3), (99, 4)])
def test_sft_runs_past_its_epochs_until_the_examples_are_learned(learned_after, expected_epochs):
    """``epochs`` passes always; then more, up to ``max_epochs``, while ``learned()`` is false (checked in eval
    mode); without ``learned`` exactly ``epochs``."""
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random"))
    prompts = [model.prompt(decision_messages_for(f"turn on light {i}")) for i in range(5)]
    checks = []

    def learned() -> bool:
        checks.append(model.model.training)
        return len(checks) > learned_after

    losses = model.sft(prompts, ["refuse"] * 5, epochs=1, lr=1e-3, batch_size=2, max_epochs=4,
                       learned=None if learned_after is None else learned)
    assert len(losses) == expected_epochs * 3  # 3 batches of 2 per pass over 5 examples
    assert not any(checks) and model.model.training is False  # checked in eval mode, left in eval mode
    assert len(checks) == (0 if learned_after is None else min(learned_after + 1, 3))


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj")])
def test_the_adapter_wraps_the_layers_named(targets):
    from far.evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", lora_targets=targets))
    trained = [name for name, p in model.model.named_parameters() if p.requires_grad]
    wrapped = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trained}
    assert wrapped == set(targets)
    assert all(not p.requires_grad for name, p in model.model.named_parameters() if "lora_" not in name)


def test_no_prompts_give_no_decisions():
    from far.evolve.policy_model import ModelSpec, PolicyModel
    from far.evolve.train import Fit

    model = PolicyModel(ModelSpec(base="tiny-random"))
    assert tuple(model.option_logprobs([], DECISIONS).shape) == (0, 3)
    assert model.choose([], DECISIONS, temperature=0.0) == []
    assert Fit(model, [], []).share() == 0.0  # a lesson with nothing taught fits nothing


def test_the_fit_check_reads_the_models_greedy_decisions():
    from far.evolve.train import Fit

    class Scripted:
        def choose(self, prompts, options, temperature, n=1, seed=0):
            assert temperature == 0.0 and tuple(options) == ("handle", "escalate", "refuse")
            return [["refuse"] if "bad" in p else [" handle"] for p in prompts]

    fit = Fit(Scripted(), ["bad one", "fine one", "bad two"], ["refuse", "handle", "handle"])
    assert fit.share() == pytest.approx(2 / 3) and not fit.learned() and fit.extra == 1
    assert Fit(Scripted(), ["bad", "ok"], ["refuse", "handle"]).learned()


def test_the_reward_table_weighs_what_z_cannot_see(task):
    """Handling a benign call and escalating it score the same z; ν·R (an unnecessary cloud call costs -5) makes
    the training reward prefer handling, and ν = 0 is r_PF alone. A taxonomy failure keeps a decision out of
    rehearsal."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    benign = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    handled, escalated, refused = task.score([benign] * 3, ["handle", "escalate", "refuse"])
    assert handled.z == escalated.z and handled.verdict.reward > escalated.verdict.reward
    assert "UNNECESSARY_CLOUD_CALL" in escalated.failures and not handled.failures
    plain, weighted = SelectionSettings(reward_weight=0.0), SelectionSettings(reward_weight=0.1)
    for scored in (handled, escalated, refused):
        assert training_reward(plain, scored) == r_pf_of(plain, scored.z)
        assert training_reward(weighted, scored) == pytest.approx(r_pf_of(weighted, scored.z)
                                                                  + 0.1 * scored.verdict.reward)
    assert training_reward(weighted, handled) > training_reward(weighted, escalated)
    _, correct, other = failures([benign, benign], [handled, escalated], [(0.5, 0.5, 0.5, 1.0)] * 2, [(1.0,) * 4] * 2)
    assert [s.id for s, _ in correct] == [benign.id] and other == [benign.id]  # the escalation: not rehearsed


def test_the_reward_then_the_cost_break_exact_ties_of_z(task):
    """A harmful request escalated and vetoed by the cloud scores the same z as one refused on the device, and
    the same reward; the veto spends a cloud call: only the refusal stays on the front (on the front of z alone
    q* would weigh them alike, and the repair taught would be whichever the model proposed more often).
    Handling it, better on no dimension, is not on it. The reward comes before the cost: a request
    that needs the cloud, handled on the device, can score the same z as escalated and cost less, and the
    table's MISSED_CLOUD_ESCALATION keeps it off the front."""
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenarios = [s for s in suite.scenarios("train") if not s.ground_truth.tool_faults]
    tied, missed = [], []
    for scenario in scenarios:
        handled, escalated, refused = task.score([scenario] * 3, ["handle", "escalate", "refuse"])
        if scenario.ground_truth.unsafe and escalated.z == refused.z \
                and escalated.verdict.reward == refused.verdict.reward:
            tied.append((scenario, handled, escalated, refused))
        if handled.z == escalated.z and handled.cost < escalated.cost \
                and "MISSED_CLOUD_ESCALATION" in handled.failures:
            missed.append((scenario, handled, escalated, refused))
    assert tied and missed  # both ties are real in this world, not made up for the test
    settings_ = SelectionSettings(reward_weight=0.0)

    scenario, handled, escalated, refused = tied[0]
    assert escalated.cost > refused.cost
    failure = Failure(scenario, "handle", handled, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(settings_, s))
                  for s in (escalated, escalated, refused, handled)]  # the veto proposed twice as often
    picked = select(settings_, failure, candidates, random.Random(0))
    assert picked.q == pytest.approx([0.0, 0.0, 1.0, 0.0]) and picked.chosen.scored.decision == "refuse"
    assert picked.rule == "tie_break"
    # the veto the only repair proposed: the tie break has nothing to choose between
    assert select(settings_, failure, [candidates[0], candidates[3]], random.Random(0)).rule == "repair"

    scenario, handled, escalated, refused = missed[0]
    assert handled.verdict.reward < escalated.verdict.reward
    failure = Failure(scenario, "refuse", refused, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(settings_, s)) for s in (handled, escalated)]
    assert select(settings_, failure, candidates, random.Random(0)).q == pytest.approx(
        [0.0, 1.0])  # the reward first: the cheaper handling is left out
    assert task.score([scenario], [MALFORMED])[0].cost == math.inf


GRID = [{"own_asr": a, "own_hcr": h, "mean_r_pf": r} for a in (0.0, 0.5) for h in (0.0, 0.5)
        for r in (0.0, 1.0, float("nan"), float("inf"), float("-inf"))]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_pass_kept_is_the_best_safe_one_and_the_earliest_on_a_tie(length):
    """Exhaustive over short runs of passes (own rates 0 or 0.5, r_PF in {0, 1, NaN, ±inf}), before = 0.25:
    None iff every pass raised a rate; else a safe pass that no safe pass beats, and no earlier safe pass
    ties (NaN ranks below -inf's peers: lowest)."""
    import itertools

    from far.evolve.acceptance import kept_pass

    before = {"own_asr": 0.25, "own_hcr": 0.25}

    def safe(m):
        return m["own_asr"] <= 0.25 and m["own_hcr"] <= 0.25

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for passes in itertools.product(GRID, repeat=length):
        kept = kept_pass(passes, before, 0.0)
        if not any(safe(m) for m in passes):
            assert kept is None
            continue
        assert kept is not None and safe(passes[kept])
        assert all(score(m) <= score(passes[kept]) for m in passes if safe(m))
        assert all(score(passes[i]) < score(passes[kept]) for i in range(kept) if safe(passes[i]))
    assert kept_pass([{"own_asr": 0.4, "own_hcr": 0.0, "mean_r_pf": 1.0}], before, 0.2) == 0  # within tolerance


def test_mean_reward_is_r_pf_plus_the_weighted_reward_table_total(tmp_path):
    from far.evolve.metrics import holdout_metrics

    evolution = Evolution(tiny_config(tmp_path, reward_weight=0.5))
    scenarios, selection = evolution.holdout, evolution.config.selection
    scored = evolution.task.score(scenarios, ["escalate"] * len(scenarios))
    figures = holdout_metrics(scenarios, scored, selection, by_category=False)["overall"]
    totals = [r_pf_of(selection, sc.z) + 0.5 * (sc.verdict.reward if sc.verdict else 0.0) for sc in scored]
    assert figures["mean_reward"] == pytest.approx(sum(totals) / len(totals))
    assert figures["mean_reward"] != pytest.approx(figures["mean_r_pf"])  # escalating costs in the table, not in z


def scripted_checks(tmp_path, script, **overrides) -> tuple[Evolution, list[dict]]:
    """A tiny run whose rounds keep repairs, and whose check slice answers ``script``'s (own-ASR, own-TSR[, mean
    r_PF]) in turn (r_PF: the own-TSR unless given); the list it returns fills with the adapter at each answer."""
    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0,
                                      pfpo={"enabled": False}, **overrides))
    answers, adapters = iter(script), []

    def scripted_check():
        asr, own_tsr, *rest = next(answers)
        adapters.append(evolution.model.snapshot())
        r_pf = rest[0] if rest else own_tsr
        return {"own_asr": asr, "own_hcr": 0.0, "mean_r_pf": r_pf, "mean_reward": r_pf, "own_tsr": own_tsr,
                "own_over_refusal": 0.0}

    evolution.check_metrics = scripted_check
    return evolution, adapters


ROUNDS_GRID = [{"own_asr": a, "own_hcr": h, "mean_r_pf": r} for a in (0.0, 0.5, float("nan")) for h in (0.0, 1.0)
               for r in (0.0, 1.0, float("nan"), float("inf"), float("-inf"))]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_round_returned_handles_the_least_harm_then_scores_best_then_came_first(length):
    """Exhaustive over short runs (own-ASR 0, 0.5 or NaN on 2 injected requests; own-HCR 0 or 1 on 1 harmful;
    r_PF in {0, 1, NaN, ±inf}): no round handles fewer harmful or injected requests than the one returned; none
    of those ties beats its r_PF (NaN lowest), and no earlier one ties it."""
    import itertools

    from far.evolve.acceptance import kept_round

    def critical(m):
        return (0.0 if math.isnan(m["own_asr"]) else 2 * m["own_asr"]) + m["own_hcr"]

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for checks in itertools.product(ROUNDS_GRID, repeat=length):
        kept = kept_round(checks, injected=2, harmful=1, score="mean_r_pf")
        least = min(critical(m) for m in checks)
        assert critical(checks[kept]) == least
        peers = [i for i, m in enumerate(checks) if critical(m) == least]
        assert all(score(checks[i]) <= score(checks[kept]) for i in peers)
        assert all(score(checks[i]) < score(checks[kept]) for i in peers if i < kept)


@pytest.mark.parametrize("min_improvement", [0.0, 0.5])
def test_a_round_is_progress_when_it_handles_less_harm_or_as_much_and_scores_higher(min_improvement):
    """Exhaustive over pairs (best round before, latest) of the grid above: handling fewer harmful or injected
    requests is progress whatever the score; more never is; as many, progress iff the score rose by at least
    ``min_improvement`` (NaN lowest). At 0 it agrees with ``kept_round`` but for exact ties, which
    ``kept_round`` gives to the earlier round."""
    from far.evolve.acceptance import handled_harm, improved, kept_round

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for best in ROUNDS_GRID:
        for latest in ROUNDS_GRID:
            result = improved(best, latest, injected=2, harmful=1, score="mean_r_pf", min_improvement=min_improvement)
            before, after = handled_harm(best, 2, 1), handled_harm(latest, 2, 1)
            if after != before:
                assert result == (after < before)
                continue
            gain = score(latest) - score(best)
            assert result == (not math.isnan(gain) and gain >= min_improvement)
            if min_improvement == 0.0:
                tie = score(latest) == score(best)
                returned = kept_round([best, latest], injected=2, harmful=1, score="mean_r_pf")
                assert result == (returned == 1 or tie and not math.isinf(score(best)))


@pytest.mark.parametrize("script, returned", [
    ([(0.0, 1.0), (0.0, 2.0), (0.0, 1.5)], 1),  # round 2's own-TSR fell: the run stops, returns round 1
    ([(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)], 2),  # every round better: the last
    ([(0.0, 1.0), (0.0, 0.5)], 0),              # round 1 fell: the base model is returned
    ([(0.5, 1.0), (0.5, 3.0), (0.0, 2.0)], 2),  # round 2 handles less harm: returned though own-TSR fell
    # end to end (r_PF) rose, as the cloud completes what the model escalates; its own right decisions fell
    ([(0.0, 0.5, 1.0), (0.0, 0.6, 2.0), (0.0, 0.4, 3.0)], 1),
    ([(0.0, 0.5, 1.0), (0.0, 0.6, 0.5), (0.0, 0.7, 0.4)], 2),
    # round 1 handles less harm: progress though own-TSR fell, so the run goes on; round 2 gains
    ([(0.5, 1.0), (0.0, 0.5), (0.0, 0.6)], 2),
    ([(0.5, 1.0), (0.0, 0.5), (0.0, 0.4)], 1),  # round 2 fell: stop, round 1 returned
])
def test_a_run_returns_the_best_round_on_the_check_slice(tmp_path, script, returned):
    import pyarrow.parquet as pq

    evolution, adapters = scripted_checks(tmp_path, script, rounds=len(script) - 1)
    assert any(s.ground_truth.injected for s in evolution.check)
    summary = evolution.run(tmp_path)
    rows = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert len(rows) == len(script) and all(row["buffer"] for row in rows[1:])  # every round trained
    assert summary["kept_round"] == returned
    assert [row["check_mean_r_pf"] for row in rows] == [(answer[2:] or answer[1:])[0] for answer in script]
    assert [row["check_own_tsr"] for row in rows] == [answer[1] for answer in script]
    assert summary["kept_adapter"] == (f"adapter_round{returned}" if returned else None)
    after = evolution.model.snapshot()
    assert all(torch.equal(adapters[returned][n], after[n]) for n in after)
    assert any(not torch.equal(adapters[0][n], adapters[1][n]) for n in after)  # the rounds did move the adapter
    if returned:  # the adapter returned is the one saved for that round
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / summary["kept_adapter"] / "adapter_model.safetensors"))
        assert len(saved) == len(after)
        assert all(torch.equal(saved[name.replace(".default", "")], value) for name, value in after.items())


LOGP = st.lists(st.tuples(*[st.sampled_from([-3.0, -2.0, -1.5, -1.0, -0.5, 0.0])] * 3), min_size=0, max_size=6)


@given(LOGP)
def test_no_caution_decides_as_argmax_does(logp):
    from far.evolve.calibrate import cautious_decisions

    assert cautious_decisions(logp, 0.0) == [DECISIONS[max(range(3), key=lambda i: (row[i], -i))] for row in logp]


@settings(max_examples=300)
@given(LOGP, st.floats(-5, 5, allow_nan=False))
def test_every_offset_decides_as_one_of_the_caution_levels(logp, offset):
    from far.evolve.calibrate import caution_levels, cautious_decisions

    levels = caution_levels(logp)
    assert levels[0] == 0.0 and [abs(c) for c in levels] == sorted(abs(c) for c in levels)
    assert cautious_decisions(logp, offset) in [cautious_decisions(logp, c) for c in levels]
    harmful_first = cautious_decisions(logp, offset + 1.0)  # more caution never handles more
    assert all(a != "handle" or b == "handle" for a, b in zip(harmful_first, cautious_decisions(logp, offset)))


def harmful(scenario) -> bool:
    return scenario.ground_truth.unsafe or scenario.ground_truth.injected


def caution_fit(evolution: Evolution, rows, one_template: bool = False):
    """``fit_caution`` on the calibration slice with scripted scores ``rows`` and no head, judged as ``calibrate``
    judges; ``one_template``: every input of one template, so no margin for an unseen one is added."""
    calibration = evolution.calibration
    groups = ["one"] * len(calibration) if one_template else [s.group_key for s in calibration]
    return fit_caution(None, rows, groups, [harmful(s) for s in calibration], *evolution.judges(),
                       evolution.config.gate.safety_tolerance)


def test_the_caution_is_fitted_on_its_own_slice_to_refuse_harm_and_handle_the_rest(tmp_path):
    """Scripted log-probs: harmful and injected requests have a handle margin of 1, the rest 2. Against a kept
    model that handled nothing harmful, the offset fitted lies between the two (harm refused, the rest handled),
    on a train slice apart from dev, check and holdout."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40))
    calibration = evolution.calibration
    assert len(calibration) == 40 and all(s.split == "train" for s in calibration)
    assert not {s.id for s in calibration} & {s.id for s in [*evolution.dev, *evolution.check, *evolution.holdout]}
    assert not {s.group_key for s in calibration} & {s.group_key for s in evolution.dev}  # no wording SFT learned
    assert any(harmful(s) for s in calibration)

    def scripted(scenarios):
        return [[-1.0, -3.0, -2.0] if harmful(s) else [-0.5, -3.0, -2.5] for s in scenarios]

    evolution.logprobs = scripted
    fitted = caution_fit(evolution, scripted(calibration))
    rule, figures = fitted.rule, fitted.figures
    assert rule.head is None and 1.0 < rule.caution < 2.0 and figures["own_asr"] == 0.0 and figures["own_hcr"] == 0.0
    assert figures["own_over_refusal"] == 0.0
    evolution.rule = rule
    decided = evolution.decide(calibration)  # the greedy decisions apply the caution
    assert [d.decision for d in decided] == ["refuse" if harmful(s) else "handle" for s in calibration]


@pytest.mark.parametrize("bold_margin", [3.0, 1.5])
def test_the_caution_handles_no_harm_even_where_the_score_would_rather(tmp_path, bold_margin):
    """One harmful request has handle margin ``bold_margin``, the other harmful ones 1 and the benign ones 2.
    At 3 it is bolder than every benign call: an offset that leaves it handled scores far higher (every benign
    call done on the device, one harm against refusing every benign call), and the model handled it before any
    fit, but fewer critical failures come first: the fit refuses it, and every benign call with it. At 1.5 the
    offset between 1.5 and 2 refuses all harm and handles the rest."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40))
    calibration = evolution.calibration
    bold = next(s.id for s in calibration if harmful(s))
    rows = [[bold_margin - 3.0, -3.0, -3.5] if s.id == bold else [-1.0, -3.0, -2.0] if harmful(s) else
            [-0.5, -3.0, -2.5] for s in calibration]
    fitted = caution_fit(evolution, rows, one_template=True)
    caution, figures = fitted.rule.caution, fitted.figures
    assert figures["own_asr"] == 0.0 and figures["own_hcr"] == 0.0 and caution > bold_margin
    assert figures["own_over_refusal"] == (1.0 if bold_margin > 2.0 else 0.0)
    assert bold_margin > 2.0 or caution < 2.0  # the best-scoring offset of those that handle no harm


@pytest.mark.parametrize("kept_handled", [True, False])
def test_under_harm_bar_kept_the_caution_may_handle_what_the_kept_model_handled(tmp_path, kept_handled):
    """The scripted model of the test above, with the bold harmful request at 3 (bolder than every benign call).
    Under ``harm_bar: kept`` the bar is the kept model's decisions on the calibration slice. When it handled
    everything (the base model as it is: decided on first use), the fit may leave the bold request handled, and
    the best-scoring offset does (benign calls handled, the other harm refused): harm falls, nothing right is
    lost. When the kept model handled no harm, kept is zero's bar: every benign call is refused with it."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, harm_bar="kept"))
    calibration = evolution.calibration
    bold = next(s.id for s in calibration if harmful(s))

    def scripted(scenarios):
        return [[0.0, -3.0, -3.5] if s.id == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                [-0.5, -3.0, -2.5] for s in scenarios]

    evolution.logprobs = scripted
    if not kept_handled:
        evolution.calibration_decisions = ["refuse" if harmful(s) else "handle" for s in calibration]
    fitted = caution_fit(evolution, scripted(calibration), one_template=True)
    rule, figures = fitted.rule, fitted.figures
    if kept_handled:  # the model as it is, no rule: every input handled
        assert evolution.kept_decisions() == ["handle"] * len(calibration)
        assert fitted.bar["own_asr"] == 1.0 and fitted.bar["own_hcr"] == 1.0
        assert 1.0 < rule.caution <= 2.0 and figures["own_over_refusal"] == 0.0
        handled = [s for s, d in zip(calibration, fitted.decisions) if harmful(s) and d == "handle"]
        assert [s.id for s in handled] == [bold]
    else:
        assert fitted.bar == {**fitted.bar, **NO_HARM}
        assert rule.caution > 3.0 and figures["own_asr"] == figures["own_hcr"] == 0.0
        assert figures["own_over_refusal"] == 1.0


@pytest.mark.parametrize("harm_bar", ["zero", "kept"])
def test_under_harm_bar_kept_a_template_is_held_to_the_kept_models_decisions_on_it(tmp_path, harm_bar):
    """The margin test's model below: one harmful template bold (handle margin 1.5), the other harm at 1, the
    rest at 2.5. The kept model handled the bold template's requests and refused the other harm. Left out, the
    bold template is held to what the kept model did on it, not to the slice's pooled rate: under kept no margin
    is added, and the rule decides as the kept model did (harm falls no further, nothing right is lost). Under
    zero the margin takes the caution past 1.5 and the bold template is refused."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, harm_bar=harm_bar))
    calibration = evolution.calibration
    bold = next(s.group_key for s in calibration if harmful(s))
    others = {s.group_key for s in calibration if harmful(s)} - {bold}
    assert others  # a second harmful template: the pooled rate is below the bold template's
    rows = [[-1.5, -3.5, -3.0] if s.group_key == bold else [-1.0, -3.0, -2.0] if harmful(s) else
            [-0.5, -3.5, -3.0] for s in calibration]
    kept = ["handle" if s.group_key == bold or not harmful(s) else "refuse" for s in calibration]
    evolution.calibration_decisions = kept
    fitted = caution_fit(evolution, rows)
    if harm_bar == "kept":
        assert 1.0 < fitted.rule.caution <= 1.5 and fitted.decisions == kept
    else:
        assert fitted.rule.caution == pytest.approx(2.0)
        assert fitted.decisions == ["refuse" if harmful(s) else "handle" for s in calibration]


@pytest.mark.parametrize("harm_bar", ["zero", "kept"])
def test_a_run_fixes_the_harm_bar_before_training_and_moves_it_only_with_a_kept_round(tmp_path, harm_bar):
    """Under kept, round 1's fit is held to the base model's decisions on the calibration slice, made before any
    training; after the round the bar is the kept rule's decisions there (out of fold, as fitted), or round 0's
    again when the gate rolled the round back. Under zero there is none, throughout."""
    import pyarrow.parquet as pq

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0,
                                      calibration_size=30, pfpo={"enabled": False}, harm_bar=harm_bar))
    base = [scored.decision for scored in evolution.decide(evolution.calibration)]
    fits = []
    calibrate = evolution.calibrate
    evolution.calibrate = lambda: fits.append((list(evolution.calibration_decisions or []), calibrate())) or fits[-1][1]
    evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert len(fits) == (1 if row["buffer"] else 0)
    if harm_bar == "zero":
        assert all(fitted.bar == NO_HARM for _, fitted in fits) and evolution.calibration_decisions is None
        return
    assert all(held == base for held, _ in fits)  # round 1 is held to the base model's decisions
    if row["rolled_back"] or not row["buffer"]:
        assert evolution.calibration_decisions == base
    else:  # the kept rule's decisions, within the bar they were fitted to
        assert evolution.calibration_decisions == fits[0][1].decisions
        assert not unsafe_rise(fits[0][1].bar, fits[0][1].figures, 0.0)


def test_the_caution_holds_a_margin_for_a_template_it_did_not_see(tmp_path):
    """One harmful template is bolder (handle margin 1.5) than the other harmful ones (1); the rest have 2.5. The
    pooled fit stops just past 1.5; left out, that template needed 0.5 more than the fit of the rest, so the
    caution adds 0.5 (the slice is still decided alike); fitted as one template it adds nothing."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40))
    calibration = evolution.calibration
    bold = next(s.group_key for s in calibration if harmful(s))

    def scripted(scenarios):
        return [[-1.5, -3.5, -3.0] if s.group_key == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                [-0.5, -3.5, -3.0] for s in scenarios]

    evolution.logprobs = scripted
    fitted = {}
    for one_template in (True, False):
        evolution.rule = caution_fit(evolution, scripted(calibration), one_template).rule
        fitted[one_template] = evolution.rule.caution
        decided = [d.decision for d in evolution.decide(calibration)]
        assert decided == ["refuse" if harmful(s) else "handle" for s in calibration]
    assert fitted[True] == pytest.approx(1.5) and fitted[True] > 1.5
    assert fitted[False] == pytest.approx(2.0)


def _margins_fit(values):
    """A toy calibration: input i needs an offset past values[i]; the fit is the least offset that holds on all."""
    def fit(ids):
        return max((values[i] for i in ids), default=None)

    def needed(ids, floor):
        return max([floor, *(values[i] for i in ids)])

    return fit, needed


def test_template_shift_is_how_far_a_left_out_template_exceeds_the_fit_of_the_rest():
    from far.evolve.calibrate import template_shift

    assert template_shift(["a", "b", "c"], *_margins_fit([1.0, 2.0, 5.0])) == 3.0  # c left out: 5 over 2
    assert template_shift(["a", "b", "b"], *_margins_fit([1.0, 2.0, 5.0])) == 4.0  # b left out: 5 over 1
    assert template_shift(["a", "b", "c"], *_margins_fit([5.0, 5.0, 1.0])) == 0.0  # a tie: each fit covers the other
    assert template_shift(["a", "a"], *_margins_fit([1.0, 5.0])) == 0.0  # one template: nothing to leave out
    assert template_shift([], *_margins_fit([])) == 0.0
    assert template_shift(["a", "b"], lambda ids: None, lambda ids, floor: floor + 9) == 0.0  # no fold fitted


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from([-2.0, 0.0, 0.5, 1.0, 3.0])), max_size=8))
def test_the_shifted_fit_of_the_rest_holds_on_every_left_out_template(inputs):
    from far.evolve.calibrate import template_shift

    groups, values = [g for g, _ in inputs], [v for _, v in inputs]
    fit, needed = _margins_fit(values)
    shift = template_shift(groups, fit, needed)
    assert shift >= 0.0
    gaps = []
    for group in set(groups):
        rest = [i for i, g in enumerate(groups) if g != group]
        if rest:
            members = [i for i, g in enumerate(groups) if g == group]
            gaps.append(needed(members, fit(rest)) - fit(rest))
    assert all(gap <= shift for gap in gaps)
    assert shift == (max(gaps) if len(set(groups)) > 1 else 0.0)
    assert template_shift(groups[::-1], *_margins_fit(values[::-1])) == shift  # the order of inputs does not matter
    # inputs whose value is at or below every other's never need more than a fit of the rest: skipping them as
    # not at risk changes nothing
    at_risk = [v > min(values) for v in values]
    if len(set(values)) > 1:
        assert template_shift(groups, fit, needed, at_risk) == shift


def test_a_round_saves_the_caution_it_kept(tmp_path):
    import pyarrow.parquet as pq

    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}  # repairs are kept
    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, kappa=kappa,
                                      calibration_size=30, pfpo={"enabled": False}))
    said = []
    evolution.progress = said.append
    evolution.run(tmp_path)
    rows = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert rows[0]["caution"] == 0.0 and rows[1]["buffer"] > 0
    assert any("rolled back" in line for line in said) == bool(rows[1]["rolled_back"])
    assert any(line.startswith("    caution ") for line in said)
    saved = DecisionRule.from_json(json.loads((tmp_path / "adapter_round1" / "caution.json").read_text()))
    assert saved == evolution.rule and saved.caution == rows[1]["caution"]
    assert rows[0]["decision_head"] is False and rows[1]["decision_head"] == (saved.head is not None)
    # the model's own decisions without the rule, reported beside those under it (calibration apart)
    without = evolution.evaluate(DecisionRule())["overall"]
    assert rows[-1]["argmax_own_tsr"] == without["own_tsr"] and rows[0]["argmax_own_tsr"] == rows[0]["own_tsr"]
    if rows[1]["rolled_back"]:
        assert evolution.rule == DecisionRule()


@pytest.mark.parametrize("kinds", [3, 2])
def test_the_decision_head_scores_as_scikit_learn_does_and_survives_its_json(kinds):
    from sklearn.linear_model import LogisticRegression

    rng = random.Random(kinds)
    logp = [[rng.uniform(-6, 0) for _ in range(3)] for _ in range(60)]
    labels = [DECISIONS[max(range(kinds), key=lambda i: row[i] + rng.gauss(0, 0.5))] for row in logp]
    head = fit_head(logp, labels)
    reference = LogisticRegression(max_iter=5000).fit(logp, labels)
    expected = reference.predict_log_proba(logp)
    for row, want in zip(head.scores(logp), expected):
        got = dict(zip(DECISIONS, row))
        assert [got[c] for c in reference.classes_] == pytest.approx(list(want), abs=1e-9)
        assert all(got[d] == -math.inf for d in DECISIONS if d not in reference.classes_)
    assert DecisionHead.from_json(json.loads(json.dumps(head.to_json()))) == head
    rule = DecisionRule(head, 1.25)
    assert DecisionRule.from_json(json.loads(json.dumps(rule.to_json()))) == rule
    assert fit_head(logp, ["refuse"] * len(logp)) is None  # one decision: nothing to separate


def test_cross_fitted_scores_never_see_their_own_template():
    """Relabelling every input of one template leaves that template's scores as they were (they come from a head
    fitted without it) and moves some other template's."""
    rng = random.Random(0)
    groups = [f"t{i % 8}" for i in range(80)]
    logp = [[rng.uniform(-6, 0) for _ in range(3)] for _ in groups]
    labels = [DECISIONS[max(range(3), key=lambda i: row[i])] for row in logp]
    before = cross_fitted(logp, labels, groups)
    flipped = [("refuse" if label == "handle" else "handle") if g == "t3" else label
               for g, label in zip(groups, labels)]
    after = cross_fitted(logp, flipped, groups)
    assert all(before[i] == after[i] for i, g in enumerate(groups) if g == "t3")
    assert any(before[i] != after[i] for i, g in enumerate(groups) if g != "t3")
    # two templates, one decision each: no fold's rest can be separated, so every input is scored by the head
    # fitted on all of them (one scale for the caution), not by raw log-probabilities
    two = ["a" if label == "handle" else "b" for label in labels]
    sorted_labels = ["handle" if g == "a" else "refuse" for g in two]
    assert cross_fitted(logp, sorted_labels, two) == fit_head(logp, sorted_labels).scores(logp)


def test_the_decision_head_refuses_harm_that_the_caution_alone_escalates(tmp_path):
    """Scripted log-probs where escalate is likelier than refuse for harmful requests and for those that need the
    cloud alike, and only refuse's log-prob tells them apart (-1.5 against -3). The caution alone can only stop
    handling both, as escalate; the head learns that the gap to refuse is what matters and refuses the harm,
    escalates what needs the cloud and handles the rest, with no harm handled."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=60))
    calibration = evolution.calibration
    right = [own_right_decision(s) for s in calibration]
    assert {"handle", "escalate", "refuse"} <= set(right)

    def scripted(scenarios):
        table = {"refuse": [-2.0, -1.0, -1.5], "escalate": [-2.0, -1.0, -3.0], "handle": [-0.5, -3.0, -3.0]}
        return [table[own_right_decision(s)] for s in scenarios]

    evolution.logprobs = scripted
    fitted = evolution.calibrate()
    evolution.rule, figures = fitted.rule, fitted.figures
    assert figures["own_asr"] == 0.0 and figures["own_hcr"] == 0.0
    assert evolution.rule.head is not None and [d.decision for d in evolution.decide(calibration)] == right
    assert figures["own_tsr"] == 1.0
    alone = caution_fit(evolution, scripted(calibration))  # the caution on log π, no head
    assert alone.figures["own_asr"] == 0.0 and alone.figures["own_hcr"] == 0.0
    assert alone.decisions == ["escalate" if r == "refuse" else r for r in right]


def test_separation_is_the_auroc_of_the_caution_score():
    from far.evolve.metrics import separation

    harmful = [True, True, False, False]
    assert separation(harmful, [2.0, 1.0, 0.0, -1.0]) == 1.0  # every harmful request scored more cautious
    assert separation(harmful, [-2.0, -1.0, 0.0, 1.0]) == 0.0
    assert separation(harmful, [0.3] * 4) == 0.5  # the answers move together
    assert separation(harmful, [2.0, 0.0, 1.0, -1.0]) == 0.75
    nan = separation([True, True], [1.0, 2.0])
    assert nan != nan  # one kind only: no ranking to measure


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans(), st.booleans()), min_size=1, max_size=30),
       st.integers(0, 5))
def test_the_paired_template_bootstrap_brackets_the_difference(rows, seed):
    from far.evolve.metrics import paired_cluster_bootstrap

    groups, a, b = [g for g, _, _ in rows], [float(x) for _, x, _ in rows], [float(y) for _, _, y in rows]
    difference, low, high = paired_cluster_bootstrap(groups, a, b, resamples=500, seed=seed)
    assert difference == pytest.approx((sum(a) - sum(b)) / len(rows))
    assert -1.0 <= low <= high <= 1.0
    assert paired_cluster_bootstrap(groups, a, b, resamples=500, seed=seed) == (difference, low, high)
    assert paired_cluster_bootstrap(groups, a, a, resamples=500, seed=seed) == (0.0, 0.0, 0.0)
    if len(set(groups)) == 1:
        assert low == high == pytest.approx(difference)
    with pytest.raises(ValueError):
        paired_cluster_bootstrap(groups, a, b[:-1])


def test_the_template_bootstrap_is_wider_than_an_input_bootstrap_when_templates_move_together():
    """Two templates of 20 inputs each, one where a beats b on every input and one where b beats a: resampling
    templates sees that the difference hangs on which template is drawn; the point estimate is 0."""
    from far.evolve.metrics import paired_cluster_bootstrap

    groups = ["t1"] * 20 + ["t2"] * 20
    a, b = [1.0] * 20 + [0.0] * 20, [0.0] * 20 + [1.0] * 20
    difference, low, high = paired_cluster_bootstrap(groups, a, b, resamples=2000)
    assert difference == 0.0 and low == pytest.approx(-1.0) and high == pytest.approx(1.0)
    per_input = paired_cluster_bootstrap([str(i) for i in range(40)], a, b, resamples=2000)
    assert high - low > 2 * (per_input[2] - per_input[1])
