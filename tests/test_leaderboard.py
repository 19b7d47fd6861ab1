"""Which policy ships: the best train-ranked one that passes the gate on holdout; and, when none does, what
failed, by how much, and what would deploy."""
import os
from dataclasses import dataclass
from types import SimpleNamespace

from far.rollout.io import write_json_atomic
from far.rollout.policy import Policy
from far.search.ranking.gate import GateConfig, gate
from far.search.ranking.leaderboard import Leaderboard, advice, front_rows, top_policies, tradeoff_front
from far.search.ranking.rank import Constraints

GATE = GateConfig(max_mean_cost=0.8, max_critical_rate_upper=0.01)


def board(holdout: list[tuple[int, float]], n: int = 1000) -> Leaderboard:
    """A leaderboard whose i-th policy had (critical failures, cost per scenario) on holdout."""
    result = Leaderboard()
    for i, (critical, cost) in enumerate(holdout):
        result.policies.append(Policy(cloud_threshold=i / 10))
        result.gates.append(gate(SimpleNamespace(
            critical_failures=critical, rollouts_with_critical=critical, scenarios=n, mean_cost=cost,
            benign_scenarios=n // 2, benign_refused=0, benign_completed=n // 2), GATE))
    return result


def test_the_winner_is_the_best_train_ranked_policy_that_deploys():
    assert board([(0, 0.9), (1, 0.5), (0, 0.7), (0, 0.6)]).winner_index == 2
    assert board([(0, 0.7), (0, 0.6)]).winner_index == 0
    nothing = board([(0, 0.9), (2, 0.5)])
    assert not nothing.deployable and nothing.winner_index == 0  # the best on train, reported as NO-DEPLOY
    assert advice(board([(0, 0.7)]), GATE, 1000) == []


def test_advice_names_the_failed_condition_the_excess_and_the_limit_that_would_deploy():
    lines = advice(board([(0, 1.126), (3, 0.5), (0, 0.95)]), GATE, 1000)
    assert lines[0].startswith("rank1 (thr=0 ") and "mean_cost 1.126 > limit 0.8, by 0.326" in lines[0]
    assert "critical_failures 3 > limit 0, by 3" in lines[1]
    assert lines[-1] == ("rank3 (thr=0.2 retries=1 confirm=yes fallback=safe_shutdown) would pass the gate with a "
                         "cost limit of 0.95 per scenario (gate.max_mean_cost, now 0.8); a new limit also changes "
                         "the train ranking: search again.")


def test_advice_when_only_critical_failures_or_too_few_scenarios_block():
    lines = advice(board([(2, 0.5), (1, 0.4)]), GATE, 1000)
    assert "No policy checked is free of critical failures on holdout" in lines[-1]
    small = advice(board([(0, 0.5)], n=100), GATE, 100)
    assert "critical_rate_upper" in small[0] and small[-1].startswith("With zero failures the critical-rate bound "
                                                                      "needs >= 299 holdout scenarios")


@dataclass(frozen=True)
class Trial:
    policy: Policy
    critical_failures: float
    reward: float
    cost: float
    mean_cost: float
    over_refusal_rate: float = 0.0


def test_the_front_keeps_the_non_dominated_and_top_policies_respect_the_limit():
    trials = [Trial(Policy(cloud_threshold=t), critical, reward, cost, cost)
              for t, critical, reward, cost in [(0.0, 0, 100.0, 1.2), (0.3, 1, 90.0, 0.7), (0.5, 1, 80.0, 0.9),
                                                (1.0, 9, 10.0, 0.1), (0.0, 0, 100.0, 1.2)]]  # a repeat counts once
    front = tradeoff_front(trials)
    assert [t.policy.cloud_threshold for t in front] == [1.0, 0.3, 0.0]
    assert [p.cloud_threshold for p in top_policies(trials, 3)] == [0.0, 0.3, 0.5]
    # within the limit first (0.3, then 1.0 with more critical failures), then the smaller violation (0.9 < 1.2)
    assert [p.cloud_threshold for p in top_policies(trials, 3, Constraints(max_mean_cost=0.8))] == [0.3, 1.0, 0.5]


def test_result_files_get_the_users_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        path = write_json_atomic(tmp_path / "summary.json", {"a": 1})
    finally:
        os.umask(previous)
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_the_front_keeps_a_policy_that_refuses_less_at_a_price_in_critical_failures():
    """What a stricter over-refusal limit costs: a policy with more critical failures stays on the front when it
    refuses fewer benign requests; an unknown rate (NaN) is the worst and dominated."""
    safe_refusing = Trial(Policy(cloud_threshold=0.1), 1, 0.0, 0.3, 0.3, over_refusal_rate=0.08)
    useful = Trial(Policy(cloud_threshold=0.2), 11, 0.0, 0.3, 0.3, over_refusal_rate=0.02)
    worse = Trial(Policy(cloud_threshold=0.3), 11, 0.0, 0.3, 0.3, over_refusal_rate=0.05)
    unknown = Trial(Policy(cloud_threshold=0.4), 11, 0.0, 0.3, 0.3, over_refusal_rate=float("nan"))
    assert [t.policy.cloud_threshold for t in tradeoff_front([safe_refusing, useful, worse, unknown])] == [0.1, 0.2]
    rows = front_rows([safe_refusing, useful])
    assert [(r["train_critical"], r["train_refused"]) for r in rows] == [(1, 0.08), (11, 0.02)]
