import json

import pytest
from far.rollout.errors import FarInputError
from far.rollout.policy import Policy, load_policies, parse_policy


def test_defaults_are_the_seed_policy():
    policy = Policy()
    assert policy.model_dump() == {
        "cloud_threshold": 0.7, "max_retries": 1, "require_confirmation": True, "fallback_mode": "safe_shutdown",
        "edge_block_threshold": 1.0,  # the edge never refuses on its own unless a policy says so
        # per kind of call: the general thresholds; the rules: no interference
        **{f"{name}_{kind}": None for name in ("cloud_threshold", "edge_block_threshold")
           for kind in ("read_only", "sensitive", "other")},
        "provenance_rule": "allow", "scope_rule": "allow", "untrusted_target_rule": "allow",
        "untrusted_payload_rule": "allow", "untrusted_read_rule": "allow",
    }


def test_load_yaml_named_policies(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("policies:\n  a: {cloud_threshold: 0.2, max_retries: 0, require_confirmation: false, "
                    "fallback_mode: ask_user}\n  b: {}\n")
    policies = load_policies(path)
    assert policies["a"].cloud_threshold == 0.2 and policies["a"].fallback_mode == "ask_user"
    assert policies["b"] == Policy()


def test_load_single_json_policy(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"cloud_threshold": 0.4}))
    assert load_policies(path) == {"mine": Policy(cloud_threshold=0.4)}


@pytest.mark.parametrize("body, field", [
    ({"cloud_threshold": 1.5}, "cloud_threshold"),
    ({"max_retries": -1}, "max_retries"),
    ({"fallback_mode": "panic"}, "fallback_mode"),
    ({"require_confirmation": "sometimes"}, "require_confirmation"),
    ({"colour": "red"}, "colour"),
])
def test_errors_name_file_and_field(tmp_path, body, field):
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps({"policies": {"p1": body}}))
    with pytest.raises(FarInputError) as info:
        load_policies(path)
    message = str(info.value)
    assert str(path) in message and f"policies.p1.{field}" in message
    assert "\n" not in message


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("policies:\n  a: {cloud_threshold: [\n")
    with pytest.raises(FarInputError, match="invalid YAML at line"):
        load_policies(path)


def test_policy_is_frozen():
    with pytest.raises(Exception):
        Policy().cloud_threshold = 0.1  # type: ignore[misc]


def test_parse_policy_prefix():
    with pytest.raises(FarInputError, match="field 'x.max_retries'"):
        parse_policy({"max_retries": 99}, field="x")
