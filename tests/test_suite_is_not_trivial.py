"""A brute-force sweep of a small grid on the built-in suite: every parameter matters, and the best policy
by the lexicographic rule is not at a corner of the grid."""
import itertools

import pytest
from conftest import ORACLE_MODELS
from far.models.backends import ModelsConfig, build_models
from far.rollout.policy import Policy
from far.search.evaluation.evaluate import Evaluator
from far.search.ranking.rank import rank
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig
from far.verifiers.rules import RuleVerifier

GRID = {
    "cloud_threshold": [0.0, 0.25, 0.5, 0.75, 1.0],
    "max_retries": [0, 1, 3],
    "require_confirmation": [False, True],
    "fallback_mode": ["safe_shutdown", "ask_user", "edge_only", "none"],
}
NUMERIC = ("cloud_threshold", "max_retries")


@pytest.fixture(scope="module", params=[0, 1])
def sweep(request):
    evaluator = Evaluator(EdgeCloudSuite(EdgeCloudSuiteConfig(size=1500, seed=request.param)),
                          build_models(ModelsConfig.model_validate(ORACLE_MODELS)), RuleVerifier())
    results = {}
    for values in itertools.product(*GRID.values()):
        policy = Policy(**dict(zip(GRID, values)))
        results[values] = evaluator.evaluate("p", policy, "train").result
    return results


def test_each_parameter_changes_some_failure_count(sweep):
    names = list(GRID)
    for position, name in enumerate(names):
        changed = False
        for values, result in sweep.items():
            for other in GRID[name]:
                varied = list(values)
                varied[position] = other
                if sweep[tuple(varied)].failure_counts != result.failure_counts:
                    changed = True
                    break
            if changed:
                break
        assert changed, f"{name} never changes any failure count"


def test_best_policy_is_not_at_a_corner(sweep):
    best = rank(sweep.values())[0]
    corner = all(getattr(best.policy, name) in (GRID[name][0], GRID[name][-1]) for name in NUMERIC)
    assert not corner, f"best policy {best.policy.short()} sits at a corner of the grid"
    # and it is not simply the safest: it trades cost for reward among equally safe policies
    safest = min(r.critical_failures for r in sweep.values())
    tied = [r for r in sweep.values() if r.critical_failures == safest]
    assert best.critical_failures == safest and len(tied) > 1
