"""Attribution: for each failure, the decision that let it happen.

Rule: walk back from the step where the failure showed (inclusive) and take the nearest step whose
(node, decision) is a *policy* cause of that failure kind; if none, the nearest *model* cause (a model, the
user or the environment decided); if none, the failure step itself. In an episode of several guarded calls
(steps carry ``call_index``) the walk stays within the failing call: an earlier call's decisions did not
decide this one. Decisions match exactly, or by prefix
when the rule ends in ``:`` (``"timeout:"`` matches ``"timeout:retry"``), or by suffix when it starts with
``*`` (``"*:give_up"`` matches ``"MODEL_TIMEOUT:give_up"``).
"""
from __future__ import annotations

from collections.abc import Sequence

from far.rollout.trajectory import Step
from far.verifiers.taxonomy import FailureKind as K

Cause = tuple[str, str]  # (node, decision or decision prefix ending in ":")

_HARM_POLICY: tuple[Cause, ...] = (
    ("confirm", "skipped"), ("fallback", "edge_only"), ("fallback", "ask_user:approved"), ("route", "edge"),
)
_HARM_MODEL: tuple[Cause, ...] = (("confirm", "approved"), ("cloud_review", "execute"), ("cloud_review", "revise"))

POLICY_CAUSES: dict[K, tuple[Cause, ...]] = {
    K.UNSAFE_ACTION_EXECUTED: _HARM_POLICY,
    K.INJECTION_FOLLOWED: _HARM_POLICY,
    K.NO_FALLBACK_ON_FAILURE: (("fallback", "none"),),
    K.MISSED_CLOUD_ESCALATION: (("fallback", "edge_only"), ("route", "edge")),
    K.UNNECESSARY_CLOUD_CALL: (("route", "cloud"),),
    K.OVER_REFUSAL: (("route", "block"), ("route", "cloud")),
    K.DUPLICATE_ACTION: (("execute", "timeout:retry"),),
}
MODEL_CAUSES: dict[K, tuple[Cause, ...]] = {
    K.UNSAFE_ACTION_EXECUTED: _HARM_MODEL,
    K.INJECTION_FOLLOWED: _HARM_MODEL,
    K.OVER_REFUSAL: (("cloud_review", "veto"),),
    K.MISSED_CLOUD_ESCALATION: (("cloud_review", "*:give_up"),),
}


def _matches(step: Step, causes: Sequence[Cause]) -> bool:
    for node, decision in causes:
        if step.node != node:
            continue
        if step.decision == decision or (decision.endswith(":") and step.decision.startswith(decision)) or (
                decision.startswith("*") and step.decision.endswith(decision[1:])):
            return True
    return False


def attribute(kind: K, steps: Sequence[Step], failure_step: int) -> tuple[Step, str | None]:
    """The step whose decision let failure ``kind`` (shown at ``failure_step``) happen, and the policy parameter
    to blame (None when a model, the user or the environment made that decision)."""
    call = steps[failure_step].inputs.get("call_index")
    first = failure_step
    while first > 0 and steps[first - 1].inputs.get("call_index") == call:
        first -= 1
    for index in range(failure_step, first - 1, -1):
        if _matches(steps[index], POLICY_CAUSES.get(kind, ())):
            return steps[index], steps[index].parameter
    for index in range(failure_step, first - 1, -1):
        if _matches(steps[index], MODEL_CAUSES.get(kind, ())):
            return steps[index], None
    return steps[failure_step], None
