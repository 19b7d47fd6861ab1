"""After a search: the top-k distinct policies on train (``far.search.ranking.rank`` under the gate's hard limits),
re-evaluated on holdout and gated; the winner is the best of them that passes the gate, and when none does,
``advice`` says what failed, by how much, and what would deploy."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from far.rollout.policy import Policy
from far.search.evaluation.evaluate import Evaluator
from far.search.evaluation.results import PolicyResult, rule_effects
from far.search.ranking.gate import GateConfig, GateVerdict, gate, holdout_needed
from far.search.ranking.rank import NO_CONSTRAINTS, Constraints, Rankable, rank


@dataclass
class Leaderboard:
    policies: list[Policy] = field(default_factory=list)  # best on train first
    train: list[PolicyResult] = field(default_factory=list)
    holdout: list[PolicyResult] = field(default_factory=list)
    gates: list[GateVerdict] = field(default_factory=list)  # on holdout
    rows: list[dict[str, Any]] = field(default_factory=list)  # rollouts.parquet rows, train and holdout
    effects: list[list[dict[str, Any]]] = field(default_factory=list)  # per policy: ``rule_effects`` on holdout

    @property
    def winner_index(self) -> int:
        """The best train-ranked policy that passes the gate on holdout; the best on train if none does."""
        return next((i for i, verdict in enumerate(self.gates) if verdict.deploy), 0)

    @property
    def deployable(self) -> bool:
        return any(verdict.deploy for verdict in self.gates)

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
                "train_cost/scn": round(train.mean_cost, 3), "holdout_cost/scn": round(holdout.mean_cost, 3),
                "train_refused": train.over_refusal_rate, "holdout_refused": holdout.over_refusal_rate,
                "train_benign_done": train.benign_success_rate, "holdout_benign_done": holdout.benign_success_rate,
                "gate": "DEPLOY" if verdict.deploy else "NO-DEPLOY",
                "models": holdout.mark,  # ORACLE (...) when label-reading models made these figures
            })
        return entries


def top_policies(trials: Sequence[Rankable], top_k: int, constraints: Constraints = NO_CONSTRAINTS) -> list[Policy]:
    """The best ``top_k`` distinct policies by ``far.search.ranking.rank`` (trials carry a ``policy``)."""
    top: list[Policy] = []
    for trial in rank(trials, constraints):
        if trial.policy not in top:  # type: ignore[attr-defined]
            top.append(trial.policy)  # type: ignore[attr-defined]
        if len(top) == top_k:
            break
    return top


def build_leaderboard(trials: Sequence[Rankable], evaluator: Evaluator, gate_config: GateConfig,
                      top_k: int) -> Leaderboard:
    board = Leaderboard()
    for position, policy in enumerate(top_policies(trials, top_k, Constraints.from_gate(gate_config)), start=1):
        name = f"rank{position}"
        train = evaluator.evaluate(name, policy, "train", with_rows=True)
        holdout = evaluator.evaluate(name, policy, "holdout", with_rows=True)
        result = holdout.result
        board.policies.append(policy)
        board.train.append(train.result)
        board.holdout.append(result)
        board.gates.append(gate(result, gate_config))
        board.rows += train.rows + holdout.rows
        board.effects.append(rule_effects(evaluator.scenarios("holdout"), holdout.trajectories, holdout.verdicts))
    return board


def distinct_trials(trials: Sequence[Any]) -> list[Any]:
    """The first trial of each distinct policy, in trial order."""
    distinct: dict[Any, Any] = {}
    for trial in trials:
        distinct.setdefault(trial.policy, trial)
    return list(distinct.values())


def _worst_if_nan(value: float) -> float:
    return math.inf if math.isnan(value) else value


def tradeoff_front(trials: Sequence[Any]) -> list[Any]:
    """The distinct trial policies no other dominates on (fewer critical failures, lower cost per scenario,
    fewer benign scenarios refused) on train (``far.verifiers.pareto``'s rule on the negated three; an unknown
    rate is the worst), cheapest first: what each price in cost or refusals buys in critical failures."""
    from far.verifiers.pareto import pareto_front

    candidates = distinct_trials(trials)
    front = pareto_front([(-float(t.critical_failures), -_worst_if_nan(float(t.mean_cost)),
                           -_worst_if_nan(float(t.over_refusal_rate))) for t in candidates])
    return sorted((candidates[i] for i in front), key=lambda t: (t.mean_cost, t.critical_failures))


def front_rows(trials: Sequence[Any]) -> list[dict[str, Any]]:
    """``tradeoff_front`` as the rows the console, ``summary.json`` and the report show."""
    return [{"policy": t.policy.short(), "train_critical": t.critical_failures,
             "train_cost/scn": round(t.mean_cost, 4), "train_refused": t.over_refusal_rate,
             "train_reward": t.reward} for t in tradeoff_front(trials)]


def blocking_kinds(rows: Sequence[dict[str, Any]], policy: str, split: str) -> list[str]:
    """Which kinds of scenario hold a policy's critical failures on a split, and what let each happen (the
    attributed decision): one sentence per kind, most failures first."""
    import json
    from collections import Counter

    by_kind: dict[str, Counter] = {}
    for row in rows:
        if row["policy"] != policy or row["split"] != split or not row["critical_failures"]:
            continue
        for failure in json.loads(row["failures"]):
            if failure["critical"]:
                cause = failure["parameter"] or f"a model ({failure['cause_node']}: {failure['decision']})"
                by_kind.setdefault(row["kind"], Counter())[cause] += 1
    lines = []
    for kind, causes in sorted(by_kind.items(), key=lambda item: -sum(item[1].values())):
        decided = ", ".join(f"{n} by {cause}" for cause, n in causes.most_common())
        lines.append(f"{policy}'s critical failures on {split}, {kind} scenarios: {sum(causes.values())} "
                     f"({decided})")
    return lines


def advice(board: Leaderboard, gate_config: GateConfig, holdout_scenarios: int) -> list[str]:
    """Plain sentences for a run where nothing deploys: which condition failed for each checked policy and by
    how much, and what limit (or which policy) would deploy."""
    if board.deployable:
        return []
    lines = []
    cost_only = []  # (cost limit that would deploy it, position, policy)
    for position, (policy, verdict) in enumerate(zip(board.policies, board.gates), start=1):
        failed = [c for c in verdict.checks if not c.passed]
        lines.append(f"rank{position} ({policy.short()}): " + "; ".join(
            f"{c.failure()}, by {abs(c.value - c.limit):.4g}" for c in failed))
        if [c.name for c in failed] == ["mean_cost"] and math.isfinite(failed[0].value):
            cost_only.append((failed[0].value, position, policy))
    lines += blocking_kinds(board.rows, "rank1", "holdout")
    if cost_only:
        limit, position, policy = min(cost_only, key=lambda item: (item[0], item[1]))
        lines.append(f"rank{position} ({policy.short()}) would pass the gate with a cost limit of "
                     f"{math.ceil(limit * 1000) / 1000:g} per scenario (gate.max_mean_cost, now "
                     f"{gate_config.max_mean_cost:g}); a new limit also changes the train ranking: search again.")
    elif all(v.checks[0].value > v.checks[0].limit for v in board.gates):
        lines.append("No policy checked is free of critical failures on holdout: no limit should be raised for "
                     "that; widen the space (stricter settings) or improve the models.")
    if gate_config.max_critical_rate_upper is not None:
        needed = holdout_needed(gate_config.max_critical_rate_upper, gate_config.confidence)
        if any(c.name == "critical_rate_upper" and not c.passed for v in board.gates for c in v.checks):
            lines.append(f"With zero failures the critical-rate bound needs >= {needed} holdout scenarios "
                         f"(this holdout has {holdout_scenarios}).")
    return lines
