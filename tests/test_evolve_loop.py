"""FATE's rounds (``far.evolve.loop``): the slices a run draws, a lesson, complete rounds on a tiny randomly initialised
model with SmolLM2's tokenizer (the real model: -m slow), rollback, the round returned, the harm bar and the caution
a round saves, and ``far evolve``'s last line."""
from __future__ import annotations

import json
import math
import random

import pytest
from evolve_helpers import tiny_config

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.acceptance import NO_HARM, unsafe_rise  # noqa: E402
from far.evolve.collect import Failure, rehearsal_order  # noqa: E402
from far.evolve.decision_head import DecisionRule  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.select import Candidate, select  # noqa: E402
from far.evolve.train import rehearsal_count  # noqa: E402
from far.rollout.errors import FarInputError  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402


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


def test_a_round_without_pfpo_trains_by_sft_alone(tmp_path, monkeypatch):
    import pyarrow.parquet as pq
    from far.evolve import loop

    evolution = Evolution(tiny_config(tmp_path, dev_size=24, candidates=6, exploration=1.0, pfpo={"enabled": False}))
    monkeypatch.setattr(loop, "pfpo", None)  # never called
    evolution.run(tmp_path)
    row = pq.read_table(tmp_path / "rounds.parquet").to_pylist()[1]
    assert row["buffer"] > 0 and row["sft_loss"] is not None
    assert row["pfpo_loss"] is None and row["clip_fraction"] is None and row["kl"] is None


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
