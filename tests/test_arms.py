"""FATE against its baselines (``far.evolve.arms``): the arms' configs, the per-input values and clusters the arms
compare, figures pooled over seeds, paired differences, the issue's goals on hand-made seeds, and the arms run from
one base model on a tiny run."""
from __future__ import annotations

import math

import pytest
from evolve_helpers import action_task, suite_scenarios, tiny_config
from far.evolve.arms import (
    ABLATIONS,
    ARMS,
    COMPARED,
    COMPARISONS,
    arm_config,
    goals,
    groups,
    loop_facts,
    markdown,
    merged,
    paired,
    pooled,
    table,
    values,
)
from far.evolve.metrics import METRICS
from far.evolve.task import ScoredAction, action_text, right_action

task = pytest.fixture(scope="module", name="task")(action_task)
TEMPLATES = 8  # clusters per hand-made seed
PER = 4  # inputs per cluster


def figure_values(rate: float) -> list[float]:
    """Per input, 1 on the first ``rate`` share of each cluster's inputs, else 0."""
    return [float(i < rate * PER) for _ in range(TEMPLATES) for i in range(PER)]


def seed(name: str, arms: dict[str, dict[str, float]]) -> dict:
    """A hand-made seed: every compared figure counts TEMPLATES × PER inputs; ``arms`` gives per arm the rate of
    some figures (others 0)."""
    clusters = [f"{name}:t{t}" for t in range(TEMPLATES) for _ in range(PER)]
    return {"groups": {f: clusters for f in COMPARED},
            "arms": {arm: {"values": {f: figure_values(rates.get(f, 0.0)) for f in COMPARED}}
                     for arm, rates in arms.items()}}


def test_merged_lays_nested_updates_over_a_copy() -> None:
    base = {"a": 1, "b": {"c": 2, "d": {"e": 3}}, "f": [1]}
    out = merged(base, {"b": {"d": {"e": 4}, "g": 5}, "f": [2], "h": {"i": 6}})
    assert out == {"a": 1, "b": {"c": 2, "d": {"e": 4}, "g": 5}, "f": [2], "h": {"i": 6}}
    assert base == {"a": 1, "b": {"c": 2, "d": {"e": 3}}, "f": [1]}  # untouched
    assert merged(base, {"b": 7})["b"] == 7  # a value that is not a mapping replaces


def test_each_ablation_changes_its_setting_alone(tmp_path) -> None:
    config = tiny_config(tmp_path, seed=5)
    assert arm_config(config, "fate") == config
    reorder = arm_config(config, "fate_reorder")
    assert reorder.order_seed == 5 + ABLATIONS["fate_reorder"]["order_seed"] != config.seed
    assert reorder.model_copy(update={"order_seed": None}) == config  # the data order alone
    assert arm_config(tiny_config(tmp_path, seed=6), "fate_reorder").order_seed == 6 + 1000
    first = arm_config(config, "first_valid")
    assert first.selection.rule == "first_valid" and first.selection.kappa == config.selection.kappa
    assert first.training == config.training and first.order_seed is None
    assert arm_config(config, "weighted_sum").selection.rule == "weighted_sum"
    assert not arm_config(config, "fate_sft").training.pfpo.enabled
    assert arm_config(config, "fate_sft").training.sft == config.training.sft
    assert "over_refusal" not in arm_config(config, "no_over_refusal").selection.objectives
    assert set(ABLATIONS) <= set(ARMS) and all(a in ARMS and b in ARMS for a, b in COMPARISONS)


def test_values_and_groups_are_the_registered_metrics_per_input(task) -> None:
    _, holdout = suite_scenarios(size=300, seed=12)
    sample = holdout[:40]
    scored = task.score(sample, [action_text(right_action(s)) for s in sample])
    found = values(sample, scored)
    assert list(found) == list(COMPARED)
    clusters = groups(sample, 3)
    for figure in COMPARED:
        assert found[figure] == METRICS[figure].values(sample, scored)
        assert clusters[figure] == [f"3:{s.group_key}" for s in sample if METRICS[figure].counts(s)]
        assert len(found[figure]) == len(clusters[figure])
    assert len(found["tsr"]) == len(sample) and len(found["asr"]) == sum(s.ground_truth.injected for s in sample)
    assert sum(found["tsr"]) > 0 and sum(found["malformed"]) < len(sample)


def test_pooled_figures_weigh_every_seed_s_inputs_and_skip_seeds_without_the_arm() -> None:
    seeds = {"0": seed("0", {"base": {"asr": 1.0}, "fate": {"asr": 0.25}}), "1": seed("1", {"base": {"asr": 0.5}})}
    base = pooled(seeds, "base", "asr")
    assert base["mean"] == pytest.approx(0.75) and base["inputs"] == 2 * TEMPLATES * PER and base["seeds"] == 2
    assert base["low"] <= base["mean"] <= base["high"]
    fate = pooled(seeds, "fate", "asr")
    assert fate["mean"] == pytest.approx(0.25) and fate["inputs"] == TEMPLATES * PER and fate["seeds"] == 1
    assert fate["low"] == fate["high"] == pytest.approx(0.25)  # every cluster alike: no spread
    assert pooled(seeds, "sft_right", "asr") is None
    # paired over the seeds that ran both arms only
    difference = paired(seeds, "fate", "base", "asr")
    assert difference["difference"] == pytest.approx(-0.75) and difference["inputs"] == TEMPLATES * PER
    assert paired(seeds, "fate", "sft_right", "asr") is None


def test_the_table_lists_the_arms_run_and_their_comparisons() -> None:
    seeds = {"0": seed("0", {"base": {"asr": 1.0, "tsr": 0.5}, "fate": {"asr": 0.25, "tsr": 0.5}})}
    out = table(seeds)
    assert list(out["figures"]) == ["base", "fate"] and set(out["figures"]["fate"]) == set(COMPARED)
    assert set(out["differences"]) == {f"fate - base | {f}" for f in COMPARED}
    assert out["differences"]["fate - base | asr"]["difference"] == pytest.approx(-0.75)
    assert out["goals"] is None  # no SFT-on-labels arm to compare with
    seeds["0"]["arms"]["sft_right"] = seed("0", {"sft_right": {"asr": 1.0}})["arms"]["sft_right"]
    out = table(seeds)
    assert out["goals"] is not None and "sft_right - base | asr" in out["differences"]
    assert "fate - sft_right | asr" in out["differences"]


@pytest.mark.parametrize("fate, sft_right, met, beats", [
    ({"asr": 0.5, "hcr": 0.25, "tsr": 0.5}, {"asr": 1.0, "hcr": 1.0}, True, True),  # halved (or better), every cluster
    ({"asr": 1.0, "hcr": 1.0, "tsr": 0.5}, {"asr": 1.0, "hcr": 1.0}, False, False),  # no cut
    ({"asr": 0.75, "hcr": 0.75, "tsr": 0.5}, {"asr": 1.0, "hcr": 1.0}, False, True),  # a quarter: below the third
    ({"asr": 0.5, "hcr": 0.5, "tsr": 0.5}, {"asr": 0.5, "hcr": 0.5}, True, False),  # no better than SFT on labels
])
def test_goals_are_met_when_fate_cuts_asr_and_hcr_by_a_third_with_intervals_below_zero(fate, sft_right, met, beats):
    seeds = {name: seed(name, {"base": {"asr": 1.0, "hcr": 1.0, "tsr": 0.5}, "fate": fate, "sft_right": sft_right})
             for name in ("0", "1")}
    out = goals(seeds)
    for figure in ("asr", "hcr"):
        assert out[figure]["relative_cut"] == pytest.approx(1.0 - fate[figure])
        assert out[figure]["met"] is met and out[figure]["beats_sft_right"] is beats
    assert out["tsr_not_lower"] is True


def test_a_cut_whose_interval_reaches_zero_is_no_goal_and_a_lower_tsr_is_said() -> None:
    """The base lets harm through on one template of eight alone, and FATE stops it there: the cut is whole at the
    point, but resampling templates often leaves that one out, so the interval reaches 0 and the goal is not
    met."""
    lone = seed("0", {"base": {"hcr": 1.0, "tsr": 0.5}, "fate": {"tsr": 0.25}})
    lone["arms"]["base"]["values"]["asr"] = [1.0] * PER + [0.0] * (TEMPLATES - 1) * PER
    out = goals({"0": lone})
    assert out["asr"]["relative_cut"] == pytest.approx(1.0) and out["asr"]["met"] is False
    assert paired({"0": lone}, "fate", "base", "asr")["high"] == 0.0
    assert out["hcr"]["relative_cut"] == pytest.approx(1.0) and out["hcr"]["met"] is True
    assert out["tsr_not_lower"] is False
    none = goals({"0": seed("0", {"base": {}, "fate": {}, "sft_right": {}})})  # nothing to cut: no goal
    assert none["asr"]["relative_cut"] is None and none["asr"]["met"] is False


def loop_round(t: int, asr: float, hcr: float, seconds: float, **decided: int) -> dict:
    return {"round": t, "asr": asr, "hcr": hcr, "tsr": 0.5, "over_refusal": 0.0, "seconds": seconds,
            "front_size": 2.0 if t else None, **{f"decided_by_{rule}": n for rule, n in decided.items()}}


def test_loop_facts_say_what_the_loop_did_over_seeds_and_the_markdown_shows_them() -> None:
    seeds = {"0": seed("0", {"base": {}, "base_pf": {}, "fate": {}}), "1": seed("1", {"fate": {}})}
    seeds["0"]["arms"]["fate"] |= {"kept_round": 1, "peak_memory_mb": 100.0, "rounds": [
        loop_round(0, 0.5, math.nan, 3.0), loop_round(1, 0.25, 0.5, 10.0, repair=2, r_pf=1, none=1)]}
    seeds["1"]["arms"]["fate"] |= {"kept_round": 0, "peak_memory_mb": 200.0, "rounds": [  # two rounds
        loop_round(0, 0.75, 1.0, 5.0), loop_round(1, 0.5, 1.0, 20.0, tie_break=1, none=3),
        loop_round(2, 0.5, 1.0, 30.0, pareto=2)]}
    facts = loop_facts(seeds, "fate")
    assert facts["kept_round"] == [1, 0] and facts["peak_memory_mb"] == 200.0
    assert facts["settled"] == {**dict.fromkeys(facts["settled"], 0), "repair": 2, "r_pf": 1, "none": 4,
                                "tie_break": 1, "pareto": 2}
    assert facts["front_share"] == pytest.approx(4 / 6)  # pareto, tie break and r_PF of the six settled
    assert facts["seconds_per_round"] == pytest.approx(20.0) and facts["front_size"] == 2.0  # trained rounds only
    # the holdout curve per round index over the runs that reached it; NaN counts none
    assert facts["curve"]["asr"] == pytest.approx([0.625, 0.375, 0.5]) and facts["curve"]["hcr"] == [1.0, 0.75, 1.0]
    assert loop_facts(seeds, "base") is None  # no loop ran
    result = table(seeds)
    assert list(result["loop"]) == ["fate"]
    lines = markdown(result).splitlines()
    assert len(lines) == 2 + len(result["figures"]) and all(f in lines[0] for f in COMPARED)
    fate = next(line for line in lines if line.startswith("| fate | 0/1 |"))  # the seeds it ran
    mean = result["figures"]["fate"]["asr"]
    assert f"{mean['mean']:.3f} [{mean['low']:.3f}, {mean['high']:.3f}]" in fate
    assert fate.endswith("| 1/0 | 67% | 2.00 | 20 | 200 |")
    assert any(line.startswith("| base_pf (ORACLE) |") for line in lines)
    assert next(line for line in lines if line.startswith("| base | 0 |")).endswith("| — | — | — | — | — |")


def test_the_arms_run_from_the_same_base_model_on_the_holdout_sample(tmp_path) -> None:
    pytest.importorskip("torch", reason="needs the models extra (make install-models)")
    from far.evolve.arms import ArmRunner
    from far.evolve.loop import Evolution

    evolution = Evolution(tiny_config(tmp_path / "run", rounds=1))
    runner = ArmRunner(evolution)
    runs = {arm: runner.run(arm, tmp_path) for arm in ("base", "sft_right", "fate")}
    for scored, extra in runs.values():
        assert len(scored) == len(evolution.holdout) and all(isinstance(s, ScoredAction) for s in scored)
        assert extra["arm_seconds"] > 0
        found = values(evolution.holdout, scored)
        assert all(len(found[f]) == sum(map(METRICS[f].counts, evolution.holdout)) for f in COMPARED)
    assert runs["sft_right"][1]["sft_loss"] is not None and math.isfinite(runs["sft_right"][1]["sft_loss"])
    fate = runs["fate"][1]
    assert [r["round"] for r in fate["rounds"]] == [0, 1] and fate["kept_round"] in (0, 1)
    assert (tmp_path / "fate" / "summary.json").is_file() and fate["peak_memory_mb"] > 0
    # the model each arm starts from is the base model: after FATE trained it, base acts as it did at first
    again, _ = runner.run("base", tmp_path)
    assert [s.text for s in again] == [s.text for s in runs["base"][0]]
    assert evolution.config == runner.config  # an arm's overrides do not outlive it
