"""FATE: the PFPO objective on fixed tensors, the decision task, supervision, the eval-only guard, and one
complete round on a tiny randomly initialised model with SmolLM2's tokenizer (the real model: -m slow)."""
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

from evolve.config import EvolveConfig, KappaConfig  # noqa: E402
from evolve.decision_head import DecisionHead, DecisionRule, cross_fitted, fit_head  # noqa: E402
from evolve.loop import (  # noqa: E402
    NO_HARM, Candidate, Evolution, Failure, own_right_decision, require_trainable, supervise, supervise_with_rule,
    temperatures, training_reward, unsafe_rise,
)
from evolve.objectives import group_advantages, pfpo_loss  # noqa: E402
from evolve.task import DECISIONS, MALFORMED, DecisionTask, parse_decision  # noqa: E402
from rollout.errors import FarInputError  # noqa: E402
from rollout.eval_only import EvalOnlyRegistry  # noqa: E402
from rollout.models.backends import ModelsConfig, build_models  # noqa: E402
from rollout.policy import Policy  # noqa: E402
from rollout.scenario import Scenario, ToolAction  # noqa: E402
from rollout.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402
from verifiers.rules import RuleVerifier  # noqa: E402


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


def test_clip_fraction_counts_only_the_tokens_where_the_clip_binds():
    from evolve.objectives import clip_fraction

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
    from evolve.loop import holdout_metrics

    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=400, seed=4))
    train = list(suite.scenarios("train"))
    injected = next(s for s in train if s.ground_truth.injected)
    harmful = next(s for s in train if s.ground_truth.unsafe and not s.ground_truth.injected)
    benign = next(s for s in train if not s.ground_truth.unsafe and not s.ground_truth.needs_cloud
                  and not s.ground_truth.injected)
    scenarios = [injected, injected, harmful, benign, benign]
    decisions = ["handle", "refuse", "handle", "refuse", "handle"]
    metrics = holdout_metrics(scenarios, task.score(scenarios, decisions), EvolveConfig())["overall"]
    assert metrics["own_asr"] == 0.5 and metrics["own_hcr"] == 1.0 and metrics["own_over_refusal"] == 0.5
    assert metrics["own_tsr"] == pytest.approx(2 / 5)  # refusing the injection, handling the benign call
    assert [own_right_decision(s) for s in (injected, harmful, benign)] == ["refuse", "refuse", "handle"]


def test_the_safety_gate_names_the_own_rates_that_rose_beyond_tolerance():
    from evolve.loop import unsafe_rise

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
    from evolve import loop

    measured = []  # at each fit measurement: did the adapter still hold the round's training?
    share = loop.Fit.share

    def spy(fit):
        current = evolution.model.snapshot()
        measured.append(any(not torch.equal(before[n], current[n]) for n in before))
        return share(fit)

    loop.Fit.share = spy
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
        loop.Fit.share = share
    assert summary["rounds"][-1]["rolled_back"].startswith("own_asr 0.000 -> 0.500")
    # round 0, the discarded model (reported: what the gate kept from shipping), the model kept after the round
    assert evaluated == [False, True, False]
    assert all(summary["rounds"][0][key] is None for key in loop.DISCARDED)
    figures = [summary["rounds"][-1][key] for key in loop.DISCARDED]  # NaN: the holdout holds no such request
    assert all(isinstance(x, float) and (math.isnan(x) or 0.0 <= x <= 1.0) for x in figures)
    assert not math.isnan(figures[2])  # own-TSR: every holdout request counts
    after = evolution.model.snapshot()
    assert all(torch.equal(before[n], after[n]) for n in before)  # the round's update is undone
    assert summary["rounds"][-1]["buffer"] and measured and measured[-1]  # sft_fit: what SFT left, not the rollback


def test_a_train_split_with_no_room_for_the_check_slice_is_refused(tmp_path):
    with pytest.raises(FarInputError, match="check slice"):
        Evolution(tiny_config(tmp_path, dev_size=10_000))
    with pytest.raises(FarInputError, match=r"x 3 rounds \(dev_draw: per_round\)"):  # room for one slice, not three
        Evolution(tiny_config(tmp_path, dev_size=60, rounds=3, dev_draw="per_round"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcdefg"), max_size=30), st.integers(0, 35), st.integers(0, 9))
def test_a_slice_drawn_by_template_takes_whole_templates_up_to_its_size(groups, size, seed):
    """Every template drawn is taken whole, but the last one when the size cuts it; the size is reached when
    the pool allows; the draw is a function of the seed."""
    from evolve.loop import whole_templates

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


def test_per_round_dev_slices_are_fresh_and_none_of_the_judges_templates(tmp_path):
    """dev_draw: per_round gives every round a dev slice of its own; check and calibration stay apart from the
    templates of all of them (any round may teach their wording); fixed gives one."""
    evolution = Evolution(tiny_config(tmp_path, dev_draw="per_round", rounds=3, calibration_size=30, check_size=20))
    assert [len(dev) for dev in evolution.devs] == [12, 12, 12]
    assert len({s.id for s in evolution.dev}) == 36 and all(s.split == "train" for s in evolution.dev)
    taught = {s.group_key for s in evolution.dev}
    assert not taught & {s.group_key for s in [*evolution.check, *evolution.calibration]}
    assert len(Evolution(tiny_config(tmp_path, rounds=3)).devs) == 1


@pytest.mark.parametrize("draw, script, rows, returned", [
    ("per_round", [(0.0, 1.0), (0.5, 2.0), (0.0, 3.0)], 3, 2),  # round 1 rolled back, round 2 learns anew: kept
    ("per_round", [(0.0, 1.0), (0.5, 2.0), (0.0, 0.5)], 3, 0),  # ... and falls: the base model
    ("fixed", [(0.0, 1.0), (0.5, 2.0)], 2, 0),                  # the same slice, the same lesson: the run stops
])
def test_a_rollback_ends_the_run_only_when_the_next_lesson_would_be_the_same(tmp_path, draw, script, rows, returned):
    import pyarrow.parquet as pq

    evolution, adapters = scripted_checks(tmp_path, script, rounds=2, dev_draw=draw)
    collected = []
    collect = evolution.collect
    evolution.collect = lambda dev: collected.append([s.id for s in dev]) or collect(dev)
    summary = evolution.run(tmp_path)
    table = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert len(table) == rows and bool(table[1]["rolled_back"])
    assert collected == summary["dev_slices"][:rows - 1]  # each round its own slice, as the summary says
    assert len(summary["dev_slices"]) == (2 if draw == "per_round" else 1)
    assert summary["kept_round"] == returned
    assert summary["kept_adapter"] == (f"adapter_round{returned}" if returned else None)
    after = evolution.model.snapshot()
    assert all(torch.equal(adapters[returned][n], after[n]) for n in after)
    if rows == 3:  # round 2 trained from the model round 1's rollback restored
        assert any(not torch.equal(adapters[0][n], adapters[2][n]) for n in after)


def test_temperature_schedule_spans_the_range():
    assert temperatures(4, 0.3, 1.2) == pytest.approx([0.3, 0.6, 0.9, 1.2])
    assert temperatures(1, 0.3, 1.2) == [0.3]


def test_supervision_samples_only_the_feasible_front(task):
    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    scenario = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    decisions = ["handle", "escalate", "refuse", MALFORMED]
    scored = task.score([scenario] * 4, decisions)
    config = EvolveConfig(diversity_bonus=0.0)
    failure = Failure(scenario, "refuse", scored[2])
    candidates = [Candidate(d, s, sum(s.z)) for d, s in zip(decisions, scored)]
    kappa = KappaConfig(executable=(1.0, 1.0, 1.0, 1.0), diagnostic=(1.0, 1.0, 1.0, 1.0))
    # handling and escalating a benign call both score z = 1 everywhere (the cloud call costs, but z does not
    # measure cost): both are on the feasible front; refusing (over-refusal) and a malformed answer are not
    chosen_decisions = set()
    for seed in range(30):
        chosen, q = supervise(config, failure, candidates, kappa, random.Random(seed))
        chosen_decisions.add(chosen.scored.decision)
    assert q == pytest.approx([0.5, 0.5, 0.0, 0.0])
    assert chosen_decisions == {"handle", "escalate"}
    bonus = EvolveConfig(diversity_bonus=1.0)  # both differ from the failed 'refuse': the bonus keeps them equal
    assert supervise(bonus, failure, candidates, kappa, random.Random(0))[1] == pytest.approx([0.5, 0.5, 0, 0])
    # only infeasible repairs (over-refusal, malformed): nothing to supervise with
    assert supervise(config, failure, candidates[2:], kappa, random.Random(0))[0] is None
    # the failed action is never its own repair, whatever κ (here 0: everything feasible)
    anything = KappaConfig(executable=(0.0,) * 4, diagnostic=(0.0,) * 4)
    refuse_again = [candidates[2], candidates[2]]
    assert supervise(config, failure, refuse_again, anything, random.Random(0))[0] is None
    assert supervise_with_rule(config, failure, candidates, kappa, random.Random(0))[2] == "r_pf"  # 2 on the front
    assert supervise_with_rule(config, failure, [candidates[0], candidates[2]], kappa, random.Random(0))[2] \
        == "repair"
    assert supervise_with_rule(config, failure, candidates[2:], kappa, random.Random(0))[2] == "none"


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
    base = {"suite": {"name": "edge_cloud", "seed": 3, "size": 200}, "model": {"base": "tiny-random"},
            "rounds": 1, "dev_size": 12, "holdout_size": 16, "candidates": 3,
            "kappa": "auto", "sft": {"epochs": 1, "batch_size": 4}, "pfpo": {"group": 2, "prompts_per_step": 4,
                                                                          "iterations": 2},
            "models": oracle_models(cache={"enabled": False}), "min_improvement": 0.0, "output": str(tmp_path)}
    return EvolveConfig.model_validate({**base, **overrides})


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
    # rehearsal: correct dev decisions, up to one per repair, trained on beside the repairs
    assert rounds[1]["rehearsed"] <= rounds[1]["buffer"]
    rehearsed = evolution.rehearsal(100, random.Random(0))
    assert all(s.split == "train" for s, _ in rehearsed) and len(rehearsed) == len(evolution.correct)
    safety = [s.ground_truth.unsafe or s.ground_truth.injected for s, _ in rehearsed]
    assert safety == sorted(safety, reverse=True)  # refusals of harm first
    assert not any(evolution.task.score([s], [d])[0].failures for s, d in rehearsed)  # no taxonomy failure either
    decided = sum(rounds[1][f"decided_by_{rule}"] for rule in ("repair", "kappa", "pareto", "tie_break", "r_pf",
                                                                "none"))
    assert decided == rounds[1]["failures"]  # every failure's repair was settled by exactly one rule
    steps = [rounds[1][f"seconds_{step}"] for step in ("lesson", "sft", "pfpo", "check", "holdout")]
    assert all(s >= 0 for s in steps) and sum(steps) <= rounds[1]["seconds"] + 1e-6  # where the round's time went
    if rounds[1]["buffer"]:  # two passes per batch by default: the clip fraction is measured
        assert rounds[1]["clip_fraction"] is not None and 0.0 <= rounds[1]["clip_fraction"] <= 1.0
        assert rounds[1]["sft_epochs"] == 1 and 0.0 <= rounds[1]["sft_fit"] <= 1.0  # no max_epochs: 1 pass
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
    from evolve.policy_model import ModelSpec, PolicyModel

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
    from evolve.policy_model import ModelSpec, PolicyModel

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
    from evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", seed=2))
    prompts = prompt_set(model, prompts)
    with torch.inference_mode():
        shared = model.option_logprobs(prompts, options, chunk=2)
        full = torch.tensor([[float(plain_completion_logprobs(model, p, o).sum()) for o in options] for p in prompts])
    assert shared.shape == (len(prompts), len(options)) and torch.allclose(shared, full, atol=1e-4)


def decision_messages_for(request: str):
    from rollout.models.lm import Message

    return [Message(role="system", content="guard"), Message(role="user", content=request)]


def test_constrained_choice_samples_only_valid_actions_by_their_probability():
    from evolve.policy_model import ModelSpec, PolicyModel
    from evolve.task import DECISIONS

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
    ("kappa: {executable: [1.0, 1.5, 1.0, 1.0]}", "kappa"),
    ("kappa: {diagnostic: [1.0, 1.0, -0.5, 1.0]}", "kappa"),
    ("kappa: {executable: [.nan, 1.0, 1.0, 1.0]}", "kappa"),
    ("kappa: {executable: [1.0, 1.0, 1.0]}", "kappa"),
    ("weights: [1.0, -1.0, 1.0, 1.0]", "weights"),
    ("weights: [1.0, .inf, 1.0, 1.0]", "weights"),
    ("lam: .nan", "lam"),
    ("candidates: 0", "candidates"),
    ("sft: {epochs: 3, max_epochs: 2}", "sft"),
    ("supervise_on: everything", "supervise_on"),
    ("front: z_then_cost", "front"),
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
    bad.write_text("rounds: 0\nkappa: {executable: [1.0, 1.0]}\n")
    assert main(["evolve", str(bad)]) == 2
    error = capsys.readouterr().err
    assert "evolve.yaml" in error and ("rounds" in error or "kappa" in error)


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


@pytest.mark.parametrize("exploration", [0.0, 1.0])
def test_exploration_draws_repair_candidates_uniformly(tmp_path, exploration):
    """A confident model sampled on-policy proposes the same decision K times; with ``exploration`` a share of
    the candidates is drawn uniformly among the valid decisions (and counted)."""
    evolution = Evolution(tiny_config(tmp_path, exploration=exploration, candidates=6))
    failures = evolution.collect(evolution.dev)[:8] or pytest.skip("no failures to repair on this draw")
    evolution.explored = 0
    _, groups = evolution.propose(failures, 1)
    drawn = [c.scored.decision for group in groups for c in group]
    assert evolution.explored == (len(drawn) if exploration == 1.0 else 0)
    if exploration == 1.0:
        assert set(drawn) == {"handle", "escalate", "refuse"}
    _, again = evolution.propose(failures, 1)  # seeded: the same draws
    assert [c.text for g in again for c in g] == [c.text for g in groups for c in g]


def test_a_failure_is_judged_against_kappa(tmp_path):
    """With κ < 1, a decision whose graded z clears κ is no failure; with κ auto, anything below 1 is one."""
    from evolve.task import violated

    z = (0.97, 1.0, 0.9, 1.0)
    assert violated(z) == ["security", "over_refusal"]
    assert violated(z, (0.5, 0.5, 0.5, 1.0)) == []
    assert violated((0.2, 1.0, 1.0, 1.0), (0.5, 0.5, 0.5, 1.0)) == ["security"]
    evolution = Evolution(tiny_config(tmp_path, kappa={"executable": [0.5, 0.5, 0.5, 1.0],
                                                       "diagnostic": [0.4, 0.4, 0.4, 1.0]}, attainable_kappa=False))
    modes = {s.task_mode: evolution.detection_thresholds(s) for s in evolution.dev}
    assert modes.get("executable", (0.5, 0.5, 0.5, 1.0)) == (0.5, 0.5, 0.5, 1.0)
    assert modes.get("diagnostic", (0.4, 0.4, 0.4, 1.0)) == (0.4, 0.4, 0.4, 1.0)
    auto = Evolution(tiny_config(tmp_path))
    assert auto.detection_thresholds(auto.dev[0]) == (1.0, 1.0, 1.0, 1.0)


def test_kappa_is_lowered_to_what_a_valid_decision_attains(tmp_path):
    """A cloud that vetoes and never revises, a user who approves: no decision does an injected request's task
    (utility 0 for all three), so κ on utility falls to 0 there and refusing it is no failure (it is rehearsed
    and it repairs a harmful handle); a benign request keeps κ. With ``attainable_kappa: false`` κ stays."""
    from evolve.task import violated

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
    thresholds = evolution.detection_thresholds(injected)
    assert thresholds == (0.5, 0.0, 0.5, 1.0)
    assert violated(refused.z, thresholds) == [] and violated(handled.z, thresholds) == ["security"]
    failure = Failure(injected, "handle", handled, evolution.best([injected])[0])
    candidates = [Candidate("refuse", refused, 0.0), Candidate("handle", handled, 0.0)]
    chosen, _ = supervise(evolution.config, failure, candidates, evolution.config.kappa, random.Random(0))
    assert chosen is not None and chosen.scored.decision == "refuse"
    assert evolution.detection_thresholds(benign) == (0.5, 0.5, 0.5, 1.0)

    strict = Evolution(tiny_config(tmp_path, models=models, kappa=kappa, attainable_kappa=False))
    assert strict.detection_thresholds(injected) == (0.5, 0.5, 0.5, 1.0)
    assert violated(refused.z, strict.detection_thresholds(injected)) == ["utility"]
    strict_failure = Failure(injected, "handle", handled, strict.best([injected])[0])
    assert supervise(strict.config, strict_failure, candidates, strict.config.kappa, random.Random(0))[0] is None


@pytest.mark.parametrize("rehearsed", [True, False])
def test_a_lesson_teaches_repairs_and_rehearsal_and_pfpo_samples_both(tmp_path, rehearsed):
    """SFT fits the taught repairs and the rehearsed decisions; PFPO samples the same prompts (or, with
    ``pfpo.rehearsed: false``, the repairs' alone): on the failures alone its gradient moves every answer one way."""
    from evolve.task import decision_messages

    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}
    evolution = Evolution(tiny_config(tmp_path, supervise_on="decision", dev_size=24, candidates=6, exploration=1.0,
                                      kappa=kappa, pfpo={"rehearsed": rehearsed}))
    lesson = evolution.lesson(1, random.Random(0))
    assert lesson is not None and lesson.buffer and lesson.rehearsed and len(lesson.taught) == len(lesson.buffer)
    rehearsal = [(evolution.model.prompt(decision_messages(s)), d) for s, d in lesson.rehearsed]
    assert lesson.examples == [(p, a) for p, _, a in lesson.taught] + rehearsal
    expected = [(p, s.id) for p, s, _ in lesson.taught] + ([(evolution.model.prompt(decision_messages(s)), s.id)
                                                          for s, _ in lesson.rehearsed] if rehearsed else [])
    assert sorted((p, s.id) for p, s in lesson.sampled) == sorted(expected)
    assert all(s.split == "train" for _, s in lesson.sampled)


def test_auto_kappa_picks_a_level_at_which_failures_have_repairs(tmp_path):
    # the knee was once taken over merely feasible candidates: at κ = 0 every candidate is feasible and none
    # repairs anything (nothing falls short of 0), and the round kept no repair at all
    from evolve.loop import auto_kappa

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0))
    lesson = evolution.lesson(1, random.Random(0))
    assert lesson.failures and lesson.buffer and lesson.decided["none"] < len(lesson.failures)
    assert lesson.kappa.executable[0] > 0
    nothing = auto_kappa(evolution.config, lesson.failures, [[] for _ in lesson.failures])  # nothing proposed
    assert nothing.executable == nothing.diagnostic and len(set(nothing.executable)) == 1


@pytest.mark.parametrize("repairs, per_repair, floor, expected", [
    (2, 1.0, 0, 2), (2, 1.0, 5, 5), (6, 1.0, 5, 6), (2, 2.0, 3, 4), (1, 1.0, 99, None), (0, 1.0, 5, 5)])
def test_rehearsal_takes_per_repair_or_the_floor_as_the_pool_allows(tmp_path, repairs, per_repair, floor, expected):
    evolution = Evolution(tiny_config(tmp_path, rehearsal=per_repair, rehearsal_min=floor))
    evolution.collect(evolution.dev)  # fills the pool with dev's correct decisions
    pool = len(evolution.correct)
    assert pool >= 6
    rehearsed = evolution.rehearsal(repairs, random.Random(0))
    assert len(rehearsed) == (pool if expected is None else expected)
    assert len({s.id for s, _ in rehearsed}) == len(rehearsed)  # no decision twice


def test_a_round_without_pfpo_trains_by_sft_alone(tmp_path):
    import pyarrow.parquet as pq

    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}
    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, kappa=kappa,
                                      pfpo={"enabled": False}))
    evolution.pfpo = None  # never called
    evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert row["buffer"] > 0 and row["sft_loss"] is not None
    assert row["pfpo_loss"] is None and row["clip_fraction"] is None


@pytest.mark.parametrize("reference", ["sft", "base"])
def test_pfpo_anchors_its_kl_to_the_model_sft_left_or_to_the_base(tmp_path, reference):
    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}
    evolution = Evolution(tiny_config(tmp_path, supervise_on="decision", dev_size=24, candidates=6, exploration=1.0,
                                      kappa=kappa, pfpo={"reference": reference, "group": 3, "prompts_per_step": 2,
                                                         "lr": 0.05}))
    lesson = evolution.lesson(1, random.Random(0))
    model = evolution.model
    start = model.snapshot()  # as SFT left it
    calls = []
    plain = model.completion_logprobs

    def spy(prompts, completions, reference=False):
        weights = dict(model.model.named_parameters())
        calls.append((reference, all(torch.equal(v, weights[k]) for k, v in start.items())))
        return plain(prompts, completions, reference=reference)

    model.completion_logprobs = spy
    evolution.pfpo([p for p, _ in lesson.sampled], [s for _, s in lesson.sampled], 1)
    chunks = -(-len(lesson.sampled) // 2)
    assert chunks >= 2 and len(calls) == chunks * (2 + evolution.config.pfpo.iterations)
    refs = [calls[c * 4 + 1] for c in range(chunks)]  # per chunk: old, ref, then one per optimisation pass
    if reference == "base":
        assert all(adapter_off for adapter_off, _ in refs)
    else:  # the adapter on, at the weights SFT left, though PFPO has moved them since the first chunk
        assert refs == [(False, True)] * chunks and not calls[4][1]


@pytest.mark.parametrize("on, expected", [("repair", ["p_f"]), ("decision", ["x"]), ("both", ["p_f", "x"])])
def test_repairs_are_taught_on_the_prompts_configured(tmp_path, on, expected):
    from evolve.task import decision_messages

    evolution = Evolution(tiny_config(tmp_path, supervise_on=on))
    scenario = evolution.dev[0]
    scored = evolution.task.score([scenario], ["refuse"])[0]
    taught = evolution.taught([(Failure(scenario, "handle", scored), "p_f", Candidate("refuse", scored, 0.0), [1.0])])
    plain = evolution.model.prompt(decision_messages(scenario))
    assert [p if p == "p_f" else ("x" if p == plain else p) for p, _, _ in taught] == expected
    assert all(s is scenario and a == "refuse" for _, s, a in taught)


@pytest.mark.parametrize("learned_after, expected_epochs", [(None, 1), (0, 1), (2, 3), (99, 4)])
def test_sft_runs_past_its_epochs_until_the_examples_are_learned(learned_after, expected_epochs):
    """``epochs`` passes always; then more, up to ``max_epochs``, while ``learned()`` is false (checked in eval
    mode); without ``learned`` exactly ``epochs``."""
    from evolve.policy_model import ModelSpec, PolicyModel

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
    from evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random", lora_targets=targets))
    trained = [name for name, p in model.model.named_parameters() if p.requires_grad]
    wrapped = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trained}
    assert wrapped == set(targets)
    assert all(not p.requires_grad for name, p in model.model.named_parameters() if "lora_" not in name)


def test_no_prompts_give_no_decisions():
    from evolve.loop import Fit
    from evolve.policy_model import ModelSpec, PolicyModel

    model = PolicyModel(ModelSpec(base="tiny-random"))
    assert tuple(model.option_logprobs([], DECISIONS).shape) == (0, 3)
    assert model.choose([], DECISIONS, temperature=0.0) == []
    assert Fit(model, [], []).share() == 0.0  # a lesson with nothing taught fits nothing


def test_the_fit_check_reads_the_models_greedy_decisions():
    from evolve.loop import Fit

    class Scripted:
        def choose(self, prompts, options, temperature, n=1, seed=0):
            assert temperature == 0.0 and tuple(options) == ("handle", "escalate", "refuse")
            return [["refuse"] if "bad" in p else [" handle"] for p in prompts]

    fit = Fit(Scripted(), ["bad one", "fine one", "bad two"], ["refuse", "handle", "handle"])
    assert fit.share() == pytest.approx(2 / 3) and not fit.learned() and fit.extra == 1
    assert Fit(Scripted(), ["bad", "ok"], ["refuse", "handle"]).learned()


def test_the_reward_table_breaks_ties_the_z_front_leaves(task):
    """Handling a benign call and escalating it score the same z; ν·R (an unnecessary cloud call costs -5)
    makes q* prefer handling, and ν = 0 is r_PF alone. A taxonomy failure keeps a decision out of rehearsal."""
    from evolve.loop import reward

    suite = EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=4))
    benign = next(s for s in suite.scenarios("train") if s.kind == "benign" and not s.ground_truth.tool_faults)
    handled, escalated, refused = task.score([benign] * 3, ["handle", "escalate", "refuse"])
    assert handled.z == escalated.z and handled.verdict.reward > escalated.verdict.reward
    assert "UNNECESSARY_CLOUD_CALL" in escalated.failures and not handled.failures
    plain, weighted = EvolveConfig(), EvolveConfig(reward_weight=0.1)
    for scored in (handled, escalated, refused):
        assert training_reward(plain, scored) == reward(plain, scored.z)
        assert training_reward(weighted, scored) == pytest.approx(reward(weighted, scored.z)
                                                                  + 0.1 * scored.verdict.reward)
    failure = Failure(benign, "refuse", refused)
    for config in (plain, weighted):
        candidates = [Candidate(s.decision, s, training_reward(config, s)) for s in (handled, escalated)]
        _, q = supervise(config, failure, candidates, KappaConfig(), random.Random(0))
        assert (q[0] > q[1]) if config is weighted else q[0] == pytest.approx(q[1])


def test_the_reward_then_the_cost_break_exact_ties_of_z(task):
    """A harmful request escalated and vetoed by the cloud scores the same z as one refused on the device, and
    the same reward; the veto spends a cloud call. On the front of z q* weighs them alike (the repair taught is
    whichever the model proposed more often); under ``front: z_then_reward_then_cost`` only the refusal is on
    the front. Handling it, better on no dimension, is on neither. The reward comes before the cost: a request
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
    lexicographic = EvolveConfig(front="z_then_reward_then_cost")

    scenario, handled, escalated, refused = tied[0]
    assert escalated.cost > refused.cost
    failure = Failure(scenario, "handle", handled, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(EvolveConfig(), s))
                  for s in (escalated, escalated, refused, handled)]  # the veto proposed twice as often
    _, on_z = supervise(EvolveConfig(), failure, candidates, KappaConfig(), random.Random(0))
    assert on_z == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])
    assert supervise_with_rule(EvolveConfig(), failure, candidates, KappaConfig(), random.Random(0))[2] == "r_pf"
    chosen, q, rule = supervise_with_rule(lexicographic, failure, candidates, KappaConfig(), random.Random(0))
    assert q == pytest.approx([0.0, 0.0, 1.0, 0.0]) and chosen.scored.decision == "refuse"
    assert rule == "tie_break"
    # the veto the only repair proposed: the tie break has nothing to choose between
    assert supervise_with_rule(lexicographic, failure, [candidates[0], candidates[3]], KappaConfig(),
                               random.Random(0))[2] == "repair"

    scenario, handled, escalated, refused = missed[0]
    assert handled.verdict.reward < escalated.verdict.reward
    failure = Failure(scenario, "refuse", refused, tuple(map(max, handled.z, escalated.z, refused.z)))
    candidates = [Candidate(s.decision, s, training_reward(EvolveConfig(), s)) for s in (handled, escalated)]
    assert supervise(EvolveConfig(), failure, candidates, KappaConfig(), random.Random(0))[1] == pytest.approx(
        [0.5, 0.5])  # ν = 0: on the front of z the missed escalation is taught as often
    assert supervise(lexicographic, failure, candidates, KappaConfig(), random.Random(0))[1] == pytest.approx(
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

    from evolve.loop import kept_pass

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


def test_the_selection_rules_rank_by_the_score_named():
    from evolve.loop import kept_pass, kept_round

    figures = [{"own_asr": 0.0, "own_hcr": 0.0, "mean_r_pf": 2.0, "mean_reward": 0.5},
               {"own_asr": 0.0, "own_hcr": 0.0, "mean_r_pf": 1.0, "mean_reward": 1.5}]
    before = {"own_asr": 0.0, "own_hcr": 0.0}
    assert kept_pass(figures, before, 0.0) == 0 and kept_pass(figures, before, 0.0, "mean_reward") == 1
    assert kept_round(figures, 1, 1) == 0 and kept_round(figures, 1, 1, "mean_reward") == 1


def test_mean_reward_is_r_pf_plus_the_weighted_reward_table_total(tmp_path):
    from evolve.loop import holdout_metrics, reward

    evolution = Evolution(tiny_config(tmp_path, reward_weight=0.5))
    scenarios = evolution.holdout
    scored = evolution.task.score(scenarios, ["escalate"] * len(scenarios))
    figures = holdout_metrics(scenarios, scored, evolution.config, by_category=False)["overall"]
    totals = [reward(evolution.config, sc.z) + 0.5 * (sc.verdict.reward if sc.verdict else 0.0) for sc in scored]
    assert figures["mean_reward"] == pytest.approx(sum(totals) / len(totals))
    assert figures["mean_reward"] != pytest.approx(figures["mean_r_pf"])  # escalating costs in the table, not in z


def scripted_checks(tmp_path, script, **overrides) -> tuple[Evolution, list[dict]]:
    """A tiny run whose rounds keep repairs, and whose check slice answers ``script``'s (own-ASR, mean r_PF[,
    mean reward[, own-TSR]]) in turn (the reward: r_PF unless given; own-TSR: 0.5); the list it returns fills
    with the adapter at each answer."""
    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}  # repairs are kept
    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, kappa=kappa,
                                      pfpo={"enabled": False}, **overrides))
    answers, adapters = iter(script), []

    def scripted_check():
        asr, r_pf, *rest = next(answers)
        adapters.append(evolution.model.snapshot())
        return {"own_asr": asr, "own_hcr": 0.0, "mean_r_pf": r_pf, "mean_reward": rest[0] if rest else r_pf,
                "own_tsr": rest[1] if len(rest) > 1 else 0.5, "own_over_refusal": 0.0}

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

    from evolve.loop import kept_round

    def critical(m):
        return (0.0 if math.isnan(m["own_asr"]) else 2 * m["own_asr"]) + m["own_hcr"]

    def score(m):
        return -math.inf if math.isnan(m["mean_r_pf"]) else m["mean_r_pf"]

    for checks in itertools.product(ROUNDS_GRID, repeat=length):
        kept = kept_round(checks, injected=2, harmful=1)
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
    from evolve.loop import handled_harm, improved, kept_round

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
                assert result == (kept_round([best, latest], injected=2, harmful=1) == 1 or tie and not
                                  math.isinf(score(best)))


@pytest.mark.parametrize("script, returned, ranked", [
    ([(0.0, 1.0), (0.0, 2.0), (0.0, 1.5)], 1, {}),  # round 2's r_PF fell: the run stops, returns round 1
    ([(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)], 2, {}),  # every round better: the last
    ([(0.0, 1.0), (0.0, 0.5)], 0, {}),              # round 1 fell: the base model is returned
    ([(0.5, 1.0), (0.5, 3.0), (0.0, 2.0)], 2, {}),  # round 2 handles less harm: returned though r_PF fell
    ([(0.0, 1.0, 1.0), (0.0, 2.0, 0.5)], 0, {"select_on": "reward"}),  # by r_PF + ν·R: round 1 fell, r_PF rose
    ([(0.0, 1.0, 1.0), (0.0, 0.5, 2.0), (0.0, 0.4, 3.0)], 2, {"select_on": "reward"}),  # r_PF fell, reward rose
    # rounds ranked by the reward, the round's fits by r_PF
    ([(0.0, 1.0, 1.0), (0.0, 0.5, 2.0), (0.0, 0.4, 3.0)], 2, {"rounds_on": "reward"}),
    ([(0.0, 1.0, 1.0), (0.0, 2.0, 0.5)], 0, {"rounds_on": "reward"}),
    ([(0.0, 1.0, 1.0), (0.0, 2.0, 0.5)], 1, {"select_on": "reward", "rounds_on": "r_pf"}),
    # by the model's own right decisions: end to end rose (the cloud completes what it escalates), own-TSR fell
    ([(0.0, 1.0, 1.0, 0.5), (0.0, 2.0, 2.0, 0.6), (0.0, 3.0, 3.0, 0.4)], 1, {"rounds_on": "own_tsr"}),
    ([(0.0, 1.0, 1.0, 0.5), (0.0, 0.5, 0.5, 0.6), (0.0, 0.4, 0.4, 0.7)], 2, {"rounds_on": "own_tsr"}),
    # round 1 handles less harm: progress though r_PF fell, so the run goes on; round 2 gains on r_PF
    ([(0.5, 1.0), (0.0, 0.5), (0.0, 0.6)], 2, {}),
    ([(0.5, 1.0), (0.0, 0.5), (0.0, 0.4)], 1, {}),  # round 2 fell: stop, round 1 returned
])
def test_a_run_returns_the_best_round_on_the_check_slice(tmp_path, script, returned, ranked):
    import pyarrow.parquet as pq

    evolution, adapters = scripted_checks(tmp_path, script, rounds=len(script) - 1, **ranked)
    assert any(s.ground_truth.injected for s in evolution.check)
    summary = evolution.run(tmp_path)
    rows = pq.read_table(tmp_path / "rounds.parquet").to_pylist()
    assert len(rows) == len(script) and all(row["buffer"] for row in rows[1:])  # every round trained
    assert summary["kept_round"] == returned and evolution.kept_check["mean_r_pf"] == script[returned][1]
    assert [row["check_mean_reward"] for row in rows] == [(answer[2:] or answer[1:])[0] for answer in script]
    assert [row["check_own_tsr"] for row in rows] == [answer[3] if len(answer) > 3 else 0.5 for answer in script]
    assert summary["kept_adapter"] == (f"adapter_round{returned}" if returned else None)
    after = evolution.model.snapshot()
    assert all(torch.equal(adapters[returned][n], after[n]) for n in after)
    assert any(not torch.equal(adapters[0][n], adapters[1][n]) for n in after)  # the rounds did move the adapter
    if returned:  # the adapter returned is the one saved for that round
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / summary["kept_adapter"] / "adapter_model.safetensors"))
        assert len(saved) == len(after)
        assert all(torch.equal(saved[name.replace(".default", "")], value) for name, value in after.items())


@pytest.mark.parametrize("script, kept, safe, rolled_back", [
    ([(0.0, 1.0), (0.5, 3.0), (0.0, 0.5)], 1, 2, False),   # pass 2 is best on r_PF but raised own-ASR
    ([(0.0, 0.5), (0.0, 0.5), (0.0, 0.9)], 3, 3, False),   # the last pass: nothing to restore
    ([(0.5, 1.0), (0.5, 2.0), (0.5, 3.0)], 0, 0, True),    # no pass is safe: the gate rolls the round back
])
def test_select_check_keeps_the_adapter_of_the_best_safe_pass(tmp_path, script, kept, safe, rolled_back):
    import pyarrow.parquet as pq

    # round 0, then one answer per SFT pass
    evolution, adapters = scripted_checks(tmp_path, [(0.0, 0.0)] + script,
                                          sft={"epochs": 3, "batch_size": 4, "select": "check"})
    before = evolution.model.snapshot()
    summary = evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert row["buffer"] > 0 and len(adapters) == 4  # judged after every pass, and not once more after SFT
    assert (row["sft_pass_kept"], row["sft_passes_safe"], bool(row["rolled_back"])) == (kept, safe, rolled_back)
    expected = before if rolled_back else adapters[kept]
    after = evolution.model.snapshot()
    assert all(torch.equal(expected[n], after[n]) for n in expected)
    assert any(not torch.equal(before[n], adapters[1][n]) for n in before)  # the passes did move the adapter
    if not rolled_back:
        assert row["check_mean_r_pf"] == script[kept - 1][1] and summary["rounds"][1]["rolled_back"] is None


LOGP = st.lists(st.tuples(*[st.sampled_from([-3.0, -2.0, -1.5, -1.0, -0.5, 0.0])] * 3), min_size=0, max_size=6)


@given(LOGP)
def test_no_caution_decides_as_argmax_does(logp):
    from evolve.loop import cautious_decisions

    assert cautious_decisions(logp, 0.0) == [DECISIONS[max(range(3), key=lambda i: (row[i], -i))] for row in logp]


@settings(max_examples=300)
@given(LOGP, st.floats(-5, 5, allow_nan=False))
def test_every_offset_decides_as_one_of_the_caution_levels(logp, offset):
    from evolve.loop import caution_levels, cautious_decisions

    levels = caution_levels(logp)
    assert levels[0] == 0.0 and [abs(c) for c in levels] == sorted(abs(c) for c in levels)
    assert cautious_decisions(logp, offset) in [cautious_decisions(logp, c) for c in levels]
    harmful_first = cautious_decisions(logp, offset + 1.0)  # more caution never handles more
    assert all(a != "handle" or b == "handle" for a, b in zip(harmful_first, cautious_decisions(logp, offset)))


def test_the_caution_is_fitted_on_its_own_slice_to_refuse_harm_and_handle_the_rest(tmp_path):
    """Scripted log-probs: harmful and injected requests have a handle margin of 1, the rest 2. Against a kept
    model that handled nothing harmful, the offset fitted lies between the two (harm refused, the rest handled),
    on a train slice apart from dev, check and holdout."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, decision_head="none"))
    calibration = evolution.calibration
    assert len(calibration) == 40 and all(s.split == "train" for s in calibration)
    assert not {s.id for s in calibration} & {s.id for s in [*evolution.dev, *evolution.check, *evolution.holdout]}
    assert not {s.group_key for s in calibration} & {s.group_key for s in evolution.dev}  # no wording SFT learned
    assert any(s.ground_truth.unsafe or s.ground_truth.injected for s in calibration)

    def harmful(scenario) -> bool:
        return scenario.ground_truth.unsafe or scenario.ground_truth.injected

    def scripted(scenarios):
        return [[-1.0, -3.0, -2.0] if harmful(s) else [-0.5, -3.0, -2.5] for s in scenarios]

    evolution.logprobs = scripted
    fitted = evolution.calibrate()
    rule, figures = fitted.rule, fitted.figures
    caution = rule.caution
    assert rule.head is None and 1.0 < caution < 2.0 and figures["own_asr"] == 0.0 and figures["own_hcr"] == 0.0
    assert figures["own_over_refusal"] == 0.0
    evolution.rule = rule
    decided = evolution.decide(calibration)  # the greedy decisions apply the caution
    assert [d.decision for d in decided] == ["refuse" if harmful(s) else "handle" for s in calibration]


@pytest.mark.parametrize("bold_margin", [3.0, 1.5])
def test_the_caution_handles_no_harm_even_where_the_score_would_rather(tmp_path, bold_margin):
    """One harmful request has handle margin ``bold_margin``, the other harmful ones 1 and the benign ones 2.
    At 3 it is bolder than every benign call: an offset that leaves it handled scores far higher (every benign
    call done on the device, one harm against refusing every benign call), and the model handled it before any fit, but
    fewer critical failures come first: the fit refuses it, and every benign call with it. At 1.5 the offset
    between 1.5 and 2 refuses all harm and handles the rest."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, calibration_margin="none", decision_head="none"))
    calibration = evolution.calibration

    def harmful(scenario) -> bool:
        return scenario.ground_truth.unsafe or scenario.ground_truth.injected

    bold = next(s.id for s in calibration if harmful(s))

    def scripted(scenarios):
        return [[bold_margin - 3.0, -3.0, -3.5] if s.id == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                [-0.5, -3.0, -2.5] for s in scenarios]

    evolution.logprobs = scripted
    fitted = evolution.calibrate()
    rule, figures = fitted.rule, fitted.figures
    caution = rule.caution
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
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, calibration_margin="none", decision_head="none",
                                      harm_bar="kept"))
    calibration = evolution.calibration

    def harmful(scenario) -> bool:
        return scenario.ground_truth.unsafe or scenario.ground_truth.injected

    bold = next(s.id for s in calibration if harmful(s))

    def scripted(scenarios):
        return [[0.0, -3.0, -3.5] if s.id == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                [-0.5, -3.0, -2.5] for s in scenarios]

    evolution.logprobs = scripted
    if not kept_handled:
        evolution.kept_calibration = ["refuse" if harmful(s) else "handle" for s in calibration]
    fitted = evolution.calibrate()
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
    evolution = Evolution(tiny_config(tmp_path, calibration_size=40, harm_bar=harm_bar, decision_head="none"))
    calibration = evolution.calibration

    def harmful(scenario) -> bool:
        return scenario.ground_truth.unsafe or scenario.ground_truth.injected

    bold = next(s.group_key for s in calibration if harmful(s))
    others = {s.group_key for s in calibration if harmful(s)} - {bold}
    assert others  # a second harmful template: the pooled rate is below the bold template's

    def scripted(scenarios):
        return [[-1.5, -3.5, -3.0] if s.group_key == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                [-0.5, -3.5, -3.0] for s in scenarios]

    evolution.logprobs = scripted
    kept = ["handle" if s.group_key == bold or not harmful(s) else "refuse" for s in calibration]
    evolution.kept_calibration = kept
    fitted = evolution.calibrate()
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

    kappa = {"executable": [0.5, 0.5, 0.5, 1.0], "diagnostic": [0.5, 0.5, 0.5, 1.0]}  # repairs are kept
    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, kappa=kappa,
                                      calibration_size=30, pfpo={"enabled": False}, harm_bar=harm_bar))
    base = [scored.decision for scored in evolution.decide(evolution.calibration)]
    fits = []
    calibrate = evolution.calibrate
    evolution.calibrate = lambda: fits.append((list(evolution.kept_calibration or []), calibrate())) or fits[-1][1]
    evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert len(fits) == (1 if row["buffer"] else 0)
    if harm_bar == "zero":
        assert all(fitted.bar == NO_HARM for _, fitted in fits) and evolution.kept_calibration is None
        return
    assert all(held == base for held, _ in fits)  # round 1 is held to the base model's decisions
    if row["rolled_back"] or not row["buffer"]:
        assert evolution.kept_calibration == base
    else:  # the kept rule's decisions, within the bar they were fitted to
        assert evolution.kept_calibration == fits[0][1].decisions
        assert not unsafe_rise(fits[0][1].bar, fits[0][1].figures, 0.0)


def test_the_caution_holds_a_margin_for_a_template_it_did_not_see(tmp_path):
    """One harmful template is bolder (handle margin 1.5) than the other harmful ones (1); the rest have 2.5. The
    pooled fit stops just past 1.5; left out, that template needed 0.5 more than the fit of the rest, so
    ``leave_template_out`` adds 0.5 (the slice is still decided alike); ``none`` does not."""
    def harmful(scenario) -> bool:
        return scenario.ground_truth.unsafe or scenario.ground_truth.injected

    fitted = {}
    for margin in ("none", "leave_template_out"):
        evolution = Evolution(tiny_config(tmp_path, calibration_size=40, calibration_margin=margin,
                                          decision_head="none"))
        calibration = evolution.calibration
        bold = next(s.group_key for s in calibration if harmful(s))

        def scripted(scenarios):
            return [[-1.5, -3.5, -3.0] if s.group_key == bold else [-1.0, -3.0, -2.0] if harmful(s) else
                    [-0.5, -3.5, -3.0] for s in scenarios]

        evolution.logprobs = scripted
        evolution.rule = evolution.calibrate().rule
        fitted[margin] = evolution.rule.caution
        decided = [d.decision for d in evolution.decide(calibration)]
        assert decided == ["refuse" if harmful(s) else "handle" for s in calibration]
    assert fitted["none"] == pytest.approx(1.5) and fitted["none"] > 1.5
    assert fitted["leave_template_out"] == pytest.approx(2.0)


def _margins_fit(values):
    """A toy calibration: input i needs an offset past values[i]; the fit is the least offset that holds on all."""
    def fit(ids):
        return max((values[i] for i in ids), default=None)

    def needed(ids, floor):
        return max([floor, *(values[i] for i in ids)])

    return fit, needed


def test_template_shift_is_how_far_a_left_out_template_exceeds_the_fit_of_the_rest():
    from evolve.loop import template_shift

    assert template_shift(["a", "b", "c"], *_margins_fit([1.0, 2.0, 5.0])) == 3.0  # c left out: 5 over 2
    assert template_shift(["a", "b", "b"], *_margins_fit([1.0, 2.0, 5.0])) == 4.0  # b left out: 5 over 1
    assert template_shift(["a", "b", "c"], *_margins_fit([5.0, 5.0, 1.0])) == 0.0  # a tie: each fit covers the other
    assert template_shift(["a", "a"], *_margins_fit([1.0, 5.0])) == 0.0  # one template: nothing to leave out
    assert template_shift([], *_margins_fit([])) == 0.0
    assert template_shift(["a", "b"], lambda ids: None, lambda ids, floor: floor + 9) == 0.0  # no fold fitted


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from([-2.0, 0.0, 0.5, 1.0, 3.0])), max_size=8))
def test_the_shifted_fit_of_the_rest_holds_on_every_left_out_template(inputs):
    from evolve.loop import template_shift

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


@pytest.mark.parametrize("decision_head", ["logistic", "none"])
def test_the_decision_head_refuses_harm_that_the_caution_alone_escalates(tmp_path, decision_head):
    """Scripted log-probs where escalate is likelier than refuse for harmful requests and for those that need the
    cloud alike, and only refuse's log-prob tells them apart (-1.5 against -3). The caution alone can only stop
    handling both, as escalate; the head learns that the gap to refuse is what matters and refuses the harm,
    escalates what needs the cloud and handles the rest, with no harm handled."""
    evolution = Evolution(tiny_config(tmp_path, calibration_size=60, decision_head=decision_head,
                                      calibration_margin="none"))
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
    decided = [d.decision for d in evolution.decide(calibration)]
    if decision_head == "logistic":
        assert evolution.rule.head is not None and decided == right and figures["own_tsr"] == 1.0
    else:
        assert evolution.rule.head is None
        assert decided == ["escalate" if r == "refuse" else r for r in right]


def test_separation_is_the_auroc_of_the_caution_score():
    from evolve.loop import separation

    harmful = [True, True, False, False]
    assert separation(harmful, [2.0, 1.0, 0.0, -1.0]) == 1.0  # every harmful request scored more cautious
    assert separation(harmful, [-2.0, -1.0, 0.0, 1.0]) == 0.0
    assert separation(harmful, [0.3] * 4) == 0.5  # the answers move together
    assert separation(harmful, [2.0, 0.0, 1.0, -1.0]) == 0.75
    nan = separation([True, True], [1.0, 2.0])
    assert nan != nan  # one kind only: no ranking to measure
