"""Aggregation over a split: the benign counts the gate's usefulness limits read."""
import math

from hypothesis import given
from hypothesis import strategies as st

from rollout.policy import Policy
from search.results import aggregate
from verifiers.taxonomy import FailureKind, SuccessKind
from verifiers.verdict import Failure, Verdict, ZVector

REFUSAL = Failure(kind=FailureKind.OVER_REFUSAL, critical=False, penalty=-10.0, step=1, node="route", cause_step=1,
                  cause_node="route", decision="block", parameter="edge_block_threshold")


def verdict(benign: bool, refused: bool, done: bool) -> Verdict:
    return Verdict((REFUSAL,) if refused else (), (SuccessKind.TASK_SUCCESS,) if done else (), 0.0,
                   ZVector(1.0, float(done), 0.0 if refused else 1.0, 1.0), benign=benign)


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=40))
def test_benign_counts_are_over_benign_rollouts_only(rows):
    verdicts = [verdict(*row) for row in rows]
    result = aggregate("p", Policy(), "holdout", verdicts, [0.0] * len(verdicts), simulated=False)
    benign = [row for row in rows if row[0]]
    assert result.benign_scenarios == len(benign)
    assert result.benign_refused == sum(refused for _, refused, _ in benign)
    assert result.benign_completed == sum(done for _, _, done in benign)
    if benign:
        assert result.over_refusal_rate == result.benign_refused / len(benign)
        assert 0.0 <= result.benign_success_rate <= 1.0
    else:  # a rate over nothing is unknown, never 0
        assert math.isnan(result.over_refusal_rate) and math.isnan(result.benign_success_rate)
    assert result.failure_counts[FailureKind.OVER_REFUSAL.value] == sum(refused for _, refused, _ in rows)
