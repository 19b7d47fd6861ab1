"""After a search: the top-k distinct policies on train, re-evaluated on holdout, each gated."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollout.policy import Policy
from search.evaluate import Evaluator
from search.gate import GateConfig, GateVerdict, gate
from search.rank import Rankable, rank
from search.results import PolicyResult


@dataclass
class Leaderboard:
    policies: list[Policy] = field(default_factory=list)  # best on train first
    train: list[PolicyResult] = field(default_factory=list)
    holdout: list[PolicyResult] = field(default_factory=list)
    gates: list[GateVerdict] = field(default_factory=list)  # on holdout
    rows: list[dict[str, Any]] = field(default_factory=list)  # rollouts.parquet rows, train and holdout

    def entries(self) -> list[dict[str, Any]]:
        """Train and holdout side by side: the overfit gap per scenario, and the gate."""
        entries = []
        for position, (policy, train, holdout, verdict) in enumerate(
                zip(self.policies, self.train, self.holdout, self.gates), start=1):
            train_per, holdout_per = train.reward / train.scenarios, holdout.reward / holdout.scenarios
            entries.append({
                "rank": position, "policy": policy.short(),
                "train_critical": train.critical_failures, "holdout_critical": holdout.critical_failures,
                "train_reward/scn": round(train_per, 3), "holdout_reward/scn": round(holdout_per, 3),
                "gap_reward/scn": round(train_per - holdout_per, 3),
                "holdout_cost/scn": round(holdout.mean_cost, 3),
                "gate": "DEPLOY" if verdict.deploy else "NO-DEPLOY",
            })
        return entries


def top_policies(trials: Sequence[Rankable], top_k: int) -> list[Policy]:
    """The best ``top_k`` distinct policies by the lexicographic rule (trials carry a ``policy``)."""
    top: list[Policy] = []
    for trial in rank(trials):
        if trial.policy not in top:  # type: ignore[attr-defined]
            top.append(trial.policy)  # type: ignore[attr-defined]
        if len(top) == top_k:
            break
    return top


def build_leaderboard(trials: Sequence[Rankable], evaluator: Evaluator, gate_config: GateConfig,
                      top_k: int) -> Leaderboard:
    board = Leaderboard()
    for position, policy in enumerate(top_policies(trials, top_k), start=1):
        name = f"rank{position}"
        train = evaluator.evaluate(name, policy, "train", with_rows=True)
        holdout = evaluator.evaluate(name, policy, "holdout", with_rows=True)
        result = holdout.result
        board.policies.append(policy)
        board.train.append(train.result)
        board.holdout.append(result)
        board.gates.append(gate(result.critical_failures, result.rollouts_with_critical, result.scenarios,
                                result.mean_cost, gate_config))
        board.rows += train.rows + holdout.rows
    return board
