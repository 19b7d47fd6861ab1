"""The decision task (``far.evolve.task``): a decision parsed strictly, and what each decision makes happen in the
oracle world."""
from __future__ import annotations

import pytest
from evolve_helpers import decision_task
from far.evolve.task import MALFORMED, parse_decision
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig

task = pytest.fixture(scope="module", name="task")(decision_task)


def test_decisions_are_parsed_strictly():
    assert parse_decision(" Escalate.") == "escalate"
    assert parse_decision("handle") == "handle"
    for bad in ("", "handle it", "yes", "refuse!", "escalate\nhandle"):
        assert parse_decision(bad) == MALFORMED


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
