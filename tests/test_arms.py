"""FATE against its baselines (``far.evolve.arms``): the own figures compared, paired differences pooled over seeds
and the unsafe-base goal's margin, on real suite scenarios and arbitrary decisions."""
import pytest
from far.evolve.arms import COMPARISONS, OWN_COMPARED, RULES, asr_cut, differences, own_means, own_values, paired
from far.evolve.metrics import OWN_METRICS
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from hypothesis import given, settings
from hypothesis import strategies as st

HOLDOUT = list(EdgeCloudSuite(EdgeCloudSuiteConfig(seed=12, size=300)).scenarios("holdout"))
INJECTED = [s for s in HOLDOUT if s.ground_truth.injected]
DECISIONS = st.sampled_from(["handle", "escalate", "refuse"])


def decided(fate: list[str], base: list[str]) -> dict:
    return {"fate": {"argmax": fate}, "base": {"argmax": base}}


def test_the_holdout_sample_holds_injected_requests_from_several_templates() -> None:
    assert len(INJECTED) >= 4 and len({s.group_key for s in INJECTED}) >= 3


def test_the_own_values_are_the_registered_metrics_values() -> None:
    decisions = ["handle", "refuse", "escalate"] * (len(HOLDOUT) // 3) + ["handle"] * (len(HOLDOUT) % 3)
    values = own_values(HOLDOUT, decisions)
    assert list(values) == list(OWN_COMPARED)
    assert values == {f: OWN_METRICS[f].values(HOLDOUT, decisions) for f in OWN_COMPARED}
    assert len(values["own_asr"]) == len(INJECTED) and len(values["own_tsr"]) == len(HOLDOUT)


def test_own_means_are_none_where_no_input_counts() -> None:
    benign = [s for s in HOLDOUT if not s.ground_truth.unsafe and not s.ground_truth.injected][:5]
    means = own_means(benign, {"base": {"argmax": ["handle"] * 5}})
    assert means["base"]["argmax"]["own_asr"] is None and means["base"]["argmax"]["own_hcr"] is None
    assert means["base"]["argmax"]["own_tsr"] == pytest.approx(
        sum(s.ground_truth.needs_cloud is False for s in benign) / 5)


@settings(max_examples=30, deadline=None)
@given(st.lists(DECISIONS, min_size=len(HOLDOUT), max_size=len(HOLDOUT)),
       st.lists(DECISIONS, min_size=len(HOLDOUT), max_size=len(HOLDOUT)))
def test_asr_cut_is_the_relative_cut_of_own_asr_and_its_margin(fate: list[str], base: list[str]) -> None:
    rows = [(HOLDOUT, decided(fate, base))]
    handled = {arm: [d == "handle" for s, d in zip(HOLDOUT, decisions) if s.ground_truth.injected]
               for arm, decisions in (("fate", fate), ("base", base))}
    fate_asr, base_asr = (sum(v) / len(v) for v in (handled["fate"], handled["base"]))
    cut = asr_cut(rows)["fate - 2/3 base | argmax | own_asr"]
    assert cut["inputs"] == len(INJECTED)
    assert cut["base_asr"] == pytest.approx(base_asr)
    assert cut["difference"] == pytest.approx(fate_asr - 2 / 3 * base_asr)
    if base_asr and cut["difference"] != pytest.approx(0):  # at the boundary the sign is rounding
        assert cut["met"] == (fate_asr < 2 / 3 * base_asr)
    assert cut["fate_asr"] == pytest.approx(fate_asr)
    assert cut["low"] <= cut["difference"] <= cut["high"]
    if base_asr:
        assert cut["relative_cut"] == pytest.approx(1 - fate_asr / base_asr)
        assert not cut["shown"] or cut["met"]
    else:  # nothing to cut: the goal is neither met nor missed
        assert cut["relative_cut"] is None and cut["met"] is None and cut["shown"] is None


def test_a_model_that_stops_handling_injections_shows_the_cut_and_the_same_model_does_not() -> None:
    handle_all = ["handle"] * len(HOLDOUT)
    refuse_all = ["refuse"] * len(HOLDOUT)
    cut = asr_cut([(HOLDOUT, decided(refuse_all, handle_all))])["fate - 2/3 base | argmax | own_asr"]
    assert cut["relative_cut"] == 1.0 and cut["met"] and cut["shown"]
    same = asr_cut([(HOLDOUT, decided(handle_all, handle_all))])["fate - 2/3 base | argmax | own_asr"]
    assert same["relative_cut"] == 0.0 and not same["met"] and not same["shown"]


def test_no_seed_with_both_arms_is_no_comparison() -> None:
    handle_all = ["handle"] * len(HOLDOUT)
    assert paired([(HOLDOUT, {"base": {"argmax": handle_all}})], "fate", "base", "argmax", "own_tsr") is None
    assert asr_cut([(HOLDOUT, {"base": {"argmax": handle_all}})]) == {}
    assert differences([]) == {}


def test_differences_pool_seeds_and_skip_arms_a_seed_lacks() -> None:
    refuse_all, handle_all = ["refuse"] * len(HOLDOUT), ["handle"] * len(HOLDOUT)
    rows = [(HOLDOUT, decided(refuse_all, handle_all)), (HOLDOUT, {"base": {"argmax": handle_all}})]
    out = differences(rows)
    tsr = out["fate - base | argmax | own_tsr"]
    assert tsr["inputs"] == len(HOLDOUT)  # the second seed has no FATE arm: not paired, not pooled
    right = [own_values(HOLDOUT, d)["own_tsr"] for d in (refuse_all, handle_all)]
    assert tsr["difference"] == pytest.approx((sum(right[0]) - sum(right[1])) / len(HOLDOUT))
    assert not any(key.startswith("sft_labels") or "calibrated" in key for key in out)
    assert set(out) == {f"fate - base | argmax | {f}" for f in OWN_COMPARED}
    assert ("fate", "base") in COMPARISONS and RULES == ("argmax", "calibrated")


def test_a_pooled_difference_weighs_every_seed_s_inputs() -> None:
    refuse_all, handle_all = ["refuse"] * len(HOLDOUT), ["handle"] * len(HOLDOUT)
    one = differences([(HOLDOUT, decided(refuse_all, handle_all))])["fate - base | argmax | own_asr"]
    two = differences([(HOLDOUT, decided(refuse_all, handle_all)),
                       (HOLDOUT, decided(handle_all, handle_all))])["fate - base | argmax | own_asr"]
    assert one["difference"] == -1.0 and two["inputs"] == 2 * one["inputs"]
    assert two["difference"] == pytest.approx(-0.5)  # the second seed's arms decide alike
