"""The runtime guard's decisions as the policy tightens (``far.rollout.guard``): a stricter policy never lets
through a call a looser one blocks, on any recorded model outputs.

Stricter means: every rule's action as strict or stricter (allow < confirm < review < block), every kind's block
threshold and cloud threshold as low or lower, confirmation required if the looser policy required it; the same
retries and fallback (with fewer retries a faulted review ends in the fallback instead of a veto). The rule holds
because the route blocks on a rule, then on the block threshold, then sends to the cloud on a rule or the cloud
threshold: each step the looser policy blocks at, or reaches the cloud's veto through, the stricter one blocks at
too or reaches the same veto (the recorded reviews are the same).

Confirmation is not monotone, and is not claimed: a stricter rule that sends a call to review instead of asking
the user lets the cloud's revision run unasked (the user is asked about the proposal, not the revision)."""
from __future__ import annotations

from dataclasses import replace

from conftest import make_record, oracle_models
from far.models.backends import ModelsConfig, build_models
from far.rollout.guard import Guard
from far.rollout.policy import CALL_KINDS, RULE_STRICTNESS, RULES, Policy
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCENARIOS = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=300, seed=8)).scenarios("holdout"))
RECORDS = build_models(ModelsConfig.model_validate(oracle_models(cache={"enabled": False}))).record(SCENARIOS)
ACTIONS = ("allow", "confirm", "review", "block")
FALLBACKS = ("safe_shutdown", "ask_user", "edge_only", "none")
THRESHOLD = st.floats(0.0, 1.0)
BLOCK_AT = st.just(1.0) | THRESHOLD  # often never: so that calls reach the cloud, and its veto

looser_policies = st.builds(
    Policy, cloud_threshold=THRESHOLD, edge_block_threshold=BLOCK_AT, require_confirmation=st.booleans(),
    max_retries=st.integers(0, 2), fallback_mode=st.sampled_from(FALLBACKS),
    **{f"cloud_threshold_{kind}": st.none() | THRESHOLD for kind in CALL_KINDS},
    **{f"edge_block_threshold_{kind}": st.none() | BLOCK_AT for kind in CALL_KINDS},
    **{name: st.sampled_from(ACTIONS) for name, _ in RULES})


@st.composite
def stricter_than(draw, loose: Policy) -> Policy:
    """A policy as strict or stricter than ``loose`` on every rule and threshold, with its retries and fallback."""
    fields = {name: draw(st.sampled_from([a for a in ACTIONS if RULE_STRICTNESS[a] >= RULE_STRICTNESS[getattr(
        loose, name)]])) for name, _ in RULES}
    fields["require_confirmation"] = loose.require_confirmation or draw(st.booleans())
    fields["cloud_threshold"] = draw(st.floats(0.0, loose.cloud_threshold))
    fields["edge_block_threshold"] = draw(st.floats(0.0, loose.edge_block_threshold))
    for kind in CALL_KINDS:  # each kind's threshold as the looser policy applies it, or lower
        fields[f"cloud_threshold_{kind}"] = draw(st.floats(0.0, loose.cloud_threshold_for(kind)[0]))
        fields[f"edge_block_threshold_{kind}"] = draw(st.floats(0.0, loose.block_threshold_for(kind)[0]))
    return Policy(max_retries=loose.max_retries, fallback_mode=loose.fallback_mode, **fields)


@st.composite
def recorded_calls(draw):
    """A holdout call with the oracle's record, or one whose model outputs are drawn: the edge's risk, faulted
    cloud attempts before a verdict, and the tools a scope model predicted."""
    index = draw(st.integers(0, len(SCENARIOS) - 1))
    scenario, record = SCENARIOS[index], RECORDS[index]
    if draw(st.booleans()):
        verdict = draw(st.sampled_from(["execute", "veto", "revise"]))
        revised = scenario.ground_truth.intended_action or scenario.proposed_action
        record = make_record(scenario, risk=draw(THRESHOLD), verdict=verdict,
                             revision=revised if verdict == "revise" else None,
                             cloud_faults=draw(st.lists(st.sampled_from(["MODEL_TIMEOUT", "MALFORMED_OUTPUT"]),
                                                        max_size=3)))
    scope = draw(st.sampled_from([None, (scenario.proposed_action.tool,), ("another_tool",)]))
    return scenario, replace(record, scope=scope)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), loose=looser_policies, call=recorded_calls())
def test_a_stricter_policy_blocks_whatever_a_looser_one_blocks(data, loose, call):
    scenario, record = call
    strict = data.draw(stricter_than(loose))
    looser, stricter = Guard(loose).decide_recorded(scenario, record), Guard(strict).decide_recorded(scenario, record)
    if looser.action == "block":
        assert stricter.action == "block", (looser, stricter)


def test_the_draws_reach_every_way_of_blocking():
    """The property above is not vacuous: over a fixed sweep, the looser policy blocks by a rule, by the block
    threshold and by the cloud's veto."""
    rules = {"provenance_rule": "block", "untrusted_target_rule": "block", "untrusted_payload_rule": "block"}
    ways = set()
    for scenario, record in zip(SCENARIOS, RECORDS):
        for policy in (Policy(cloud_threshold=1.0, **rules), Policy(cloud_threshold=1.0, edge_block_threshold=0.5),
                       Policy(cloud_threshold=0.0)):
            decision = Guard(policy).decide_recorded(scenario, record)
            if decision.action == "block":
                ways.add("rule" if decision.rule in rules else decision.rule)
    assert {"rule", "edge_block_threshold", "cloud_review"} <= ways
