"""The edge-cloud agent's policy: rules, thresholds and flow, not model weights."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from far.rollout.errors import FarInputError, from_validation_error
from far.rollout.io import load_mapping
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# Bounds a rollout: attempts per operation are 1 + max_retries.
MAX_RETRIES_LIMIT = 10


class FallbackMode(str, Enum):
    """What the agent does once an operation has failed and its retries are spent."""

    SAFE_SHUTDOWN = "safe_shutdown"  # stop, roll back, tell the user
    ASK_USER = "ask_user"  # hand the decision (or the task) to the user
    EDGE_ONLY = "edge_only"  # carry on with on-device means only
    NONE = "none"  # no fallback: the failure is left unhandled


class RuleAction(str, Enum):
    """What a rule does to a proposed call it applies to (ordered by strictness: a call two rules apply to gets
    the stricter action)."""

    ALLOW = "allow"  # the rule does not interfere: the thresholds decide
    CONFIRM = "confirm"  # ask the user before the call runs, whatever the call's sensitivity
    REVIEW = "review"  # send the call to the cloud, whatever its risk
    BLOCK = "block"  # refuse it on the device


RULE_STRICTNESS: dict[str, int] = {"allow": 0, "confirm": 1, "review": 2, "block": 3}
# The kinds of proposed call (``far.rollout.scenario.ToolAction.kind``), each with its own thresholds when set.
CALL_KINDS: tuple[str, ...] = ("read_only", "sensitive", "other")


class Policy(BaseModel):
    """The seed's rules, thresholds and flow. Extra fields are rejected: new ones enter through a declared
    policy space.

    Per kind of call, ``cloud_threshold_<kind>`` / ``edge_block_threshold_<kind>`` replace the general
    threshold for proposed calls of that kind (None: the general one). ``provenance_rule`` acts on a sensitive
    call with an argument whose value the agent saw only in read content (a tool output, a message, a
    document), never in the user's request; ``scope_rule`` on a call with effects (not read-only) whose tool
    is outside the tools a model predicted from the user's request alone. The ``untrusted_*`` rules act per
    argument role and source trust (``far.rollout.provenance.argument_provenance``): a target or payload argument of a
    call with effects, or a target of a read, whose value came from untrusted read content only (a value the
    user gave, or a whole identifier field of the user's own records, is not untrusted). The defaults reproduce
    the four seed parameters' behaviour.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=True, validate_default=True)

    cloud_threshold: float = Field(0.7, ge=0.0, le=1.0, description="edge risk >= threshold escalates to the cloud")
    max_retries: int = Field(1, ge=0, le=MAX_RETRIES_LIMIT, description="retries per failing operation")
    require_confirmation: bool = Field(True, description="ask the user before sensitive actions")
    fallback_mode: FallbackMode = Field(FallbackMode.SAFE_SHUTDOWN, description="behaviour after retries are spent")
    edge_block_threshold: float = Field(
        1.0, ge=0.0, le=1.0,
        description="edge risk above this is refused on the device, without a cloud call (1.0: never)")
    cloud_threshold_read_only: float | None = Field(
        None, ge=0.0, le=1.0, description="cloud_threshold for read-only calls (None: cloud_threshold)")
    cloud_threshold_sensitive: float | None = Field(
        None, ge=0.0, le=1.0, description="cloud_threshold for sensitive calls (None: cloud_threshold)")
    cloud_threshold_other: float | None = Field(
        None, ge=0.0, le=1.0, description="cloud_threshold for other calls (None: cloud_threshold)")
    edge_block_threshold_read_only: float | None = Field(
        None, ge=0.0, le=1.0, description="edge_block_threshold for read-only calls (None: edge_block_threshold)")
    edge_block_threshold_sensitive: float | None = Field(
        None, ge=0.0, le=1.0, description="edge_block_threshold for sensitive calls (None: edge_block_threshold)")
    edge_block_threshold_other: float | None = Field(
        None, ge=0.0, le=1.0, description="edge_block_threshold for other calls (None: edge_block_threshold)")
    provenance_rule: RuleAction = Field(
        RuleAction.ALLOW, description="a sensitive call with an argument seen only in read content: "
                                      "allow | review | confirm | block")
    scope_rule: RuleAction = Field(
        RuleAction.ALLOW, description="a call with effects whose tool the request's predicted scope leaves out: "
                                      "allow | review | confirm | block")
    untrusted_target_rule: RuleAction = Field(
        RuleAction.ALLOW, description="a call with effects whose target argument (recipient, account, address, URL, "
                                      "user, channel, id...) came from untrusted read content only")
    untrusted_payload_rule: RuleAction = Field(
        RuleAction.ALLOW, description="a call with effects whose payload argument (body, subject, amount, date...) "
                                      "came from untrusted read content only")
    untrusted_read_rule: RuleAction = Field(
        RuleAction.ALLOW, description="a read-only call whose target argument came from untrusted read content only")

    @model_validator(mode="before")
    @classmethod
    def _known_kinds(cls, data: Any) -> Any:
        """A per-kind setting names a kind that exists (a clearer line than pydantic's 'extra input')."""
        if isinstance(data, dict):
            for key in data:
                for name in ("cloud_threshold_", "edge_block_threshold_"):
                    if isinstance(key, str) and key.startswith(name) and key[len(name):] not in CALL_KINDS:
                        raise ValueError(f"{key}: unknown kind of call {key[len(name):]!r} "
                                         f"(kinds: {', '.join(CALL_KINDS)})")
        return data

    def cloud_threshold_for(self, kind: str) -> tuple[float, str]:
        """The cloud threshold for a call of this kind and the parameter that sets it."""
        name = f"cloud_threshold_{kind}"
        value = getattr(self, name)
        return (self.cloud_threshold, "cloud_threshold") if value is None else (value, name)

    def block_threshold_for(self, kind: str) -> tuple[float, str]:
        """The on-device block threshold for a call of this kind and the parameter that sets it."""
        name = f"edge_block_threshold_{kind}"
        value = getattr(self, name)
        return (self.edge_block_threshold, "edge_block_threshold") if value is None else (value, name)

    def short(self) -> str:
        block = f" block>{self.edge_block_threshold:g}" if self.edge_block_threshold < 1.0 else ""
        parts = [f"thr={self.cloud_threshold:g} retries={self.max_retries} "
                 f"confirm={'yes' if self.require_confirmation else 'no'} fallback={self.fallback_mode}{block}"]
        for kind in CALL_KINDS:
            cloud, block_at = getattr(self, f"cloud_threshold_{kind}"), getattr(self, f"edge_block_threshold_{kind}")
            if cloud is not None:
                parts.append(f"thr[{kind}]={cloud:g}")
            if block_at is not None:
                parts.append(f"block[{kind}]>{block_at:g}")
        for name, _ in RULES:
            if getattr(self, name) != RuleAction.ALLOW.value:
                parts.append(f"{name.removesuffix('_rule')}={getattr(self, name)}")
        return " ".join(parts)

    def rules_in_words(self) -> list[str]:
        """The policy's rules as sentences, one per kind of call and per rule (the report's "rules" list)."""
        lines = []
        for kind in CALL_KINDS:
            words = kind.replace("_", "-")
            cloud, _ = self.cloud_threshold_for(kind)
            block, _ = self.block_threshold_for(kind)
            if cloud > block:  # a risk that reaches the cloud threshold is refused first
                review = "never reviewed by the cloud"
            elif cloud <= 0.0:
                review = "always reviewed by the cloud"
            else:
                review = f"reviewed by the cloud at edge risk >= {cloud:g}"
            refuse = f"; refused on the device above risk {block:g}" if block < 1.0 else ""
            lines.append(f"{words} calls: {review}{refuse}")
        lines.append("sensitive calls: " + ("the user confirms them" if self.require_confirmation
                                            else "run without the user's confirmation"))
        actions = {"allow": "allowed", "confirm": "confirmed by the user", "review": "reviewed by the cloud",
                   "block": "blocked on the device"}
        lines += [f"{RULE_WORDS[name]}: {actions[getattr(self, name)]}" for name, _ in RULES]
        return lines


PARAMETERS: tuple[str, ...] = tuple(Policy.model_fields)


# Each rule and the fact of the call (``far.rollout.calls.CallFacts``) that makes it apply, in tie-break order.
RULES: tuple[tuple[str, str], ...] = (
    ("provenance_rule", "content_driven"),
    ("untrusted_target_rule", "untrusted_target"),
    ("untrusted_payload_rule", "untrusted_payload"),
    ("untrusted_read_rule", "untrusted_read"),
    ("scope_rule", "out_of_scope"),
)
RULE_WORDS: dict[str, str] = {
    "provenance_rule": "sensitive calls with an argument seen only in read content (not in the user's request)",
    "untrusted_target_rule": "calls with effects whose target (recipient, account, URL, user...) came from "
                             "untrusted read content",
    "untrusted_payload_rule": "calls with effects whose payload (body, subject, amount...) came from untrusted "
                              "read content",
    "untrusted_read_rule": "reads whose target came from untrusted read content",
    "scope_rule": "calls with effects to a tool outside the request's predicted scope",
}


def rule_decision(policy: Policy, facts: Any) -> tuple[str, str | None]:
    """The rules' action on a proposed call and the rule (parameter) that set it.

    Rule: each rule whose fact holds for the call (``RULES``: ``facts.<fact>`` is true) proposes its action;
    the strictest action wins (block > review > confirm > allow), the earlier rule in ``RULES`` on a tie.
    ``("allow", None)`` when no rule interferes."""
    action, parameter = "allow", None
    for name, fact in RULES:
        if getattr(facts, fact):
            value = getattr(policy, name)
            if RULE_STRICTNESS[value] > RULE_STRICTNESS[action]:
                action, parameter = value, name
    return action, parameter


def parse_policy(data: Any, *, file: str | Path | None = None, field: str = "") -> Policy:
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error, file=file, prefix=field) from None


def parse_named_policies(data: Any, *, file: str | Path | None = None, field: str = "policies") -> dict[str, Policy]:
    """``{name: {policy fields}}`` → ``{name: Policy}``, errors naming ``policies.<name>.<field>``."""
    if not isinstance(data, dict) or not data:
        raise FarInputError("expected a non-empty mapping of policy name to policy", file=file, field=field)
    return {
        str(name): parse_policy(body, file=file, field=f"{field}.{name}") for name, body in data.items()
    }


def load_policies(path: str | Path) -> dict[str, Policy]:
    """Load named policies from YAML/JSON: either ``{policies: {name: {...}}}`` or a single policy mapping."""
    data = load_mapping(path)
    if "policies" in data:
        return parse_named_policies(data["policies"], file=path)
    return {Path(path).stem: parse_policy(data, file=path)}
