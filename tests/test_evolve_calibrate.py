"""The caution (``far.evolve.calibrate``): offsets against argmax, the fit on its own slice, the harm bar, and the
margin for a template the fit did not see."""
from __future__ import annotations

import pytest
from evolve_helpers import caution_fit, harmful, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="needs the models extra (make install-models)")
pytest.importorskip("peft")

from far.evolve.acceptance import NO_HARM  # noqa: E402
from far.evolve.loop import Evolution  # noqa: E402
from far.evolve.task import DECISIONS  # noqa: E402

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
