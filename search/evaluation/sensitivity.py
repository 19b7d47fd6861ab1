"""How much the decision depends on each verifier: drop or flip each ensemble member in turn, re-derive every
verdict from the members' stored assessments (no model is asked again), and compare the ranking of the top
policies on train and the gate verdicts on holdout with the full ensemble's."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from far.rollout.policy import Policy
from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.search.evaluation.results import aggregate
from far.search.ranking.gate import GateConfig, gate
from far.search.ranking.rank import Constraints, rank
from far.verifiers.ensemble import EnsembleVerifier
from far.verifiers.verdict import Z_DIMENSIONS, Verdict


@dataclass
class Evaluated:
    """One policy on one split, as evaluated by the ensemble."""

    name: str
    policy: Policy
    split: str
    scenarios: Sequence[Scenario]
    trajectories: Sequence[Trajectory]
    verdicts: Sequence[Verdict]


def variants(members: Sequence[str]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(label, dropped members, flipped members): the full ensemble, then each member dropped, then flipped."""
    out = [("ensemble", (), ())]
    out += [(f"drop {m}", (m,), ()) for m in members]
    out += [(f"flip {m}", (), (m,)) for m in members]
    return out


def sensitivity(ensemble: EnsembleVerifier, evaluated: Sequence[Evaluated], gate_config: GateConfig,
                simulated: bool, top_k: int = 3) -> dict[str, Any]:
    report: dict[str, Any] = {"members": ensemble.member_names, "aggregation": ensemble.aggregation,
                              "variants": []}
    baseline: dict[str, Any] | None = None
    for label, dropped, flipped in variants(ensemble.member_names):
        results = []
        for item in evaluated:
            verdicts = [ensemble.combine(t, v.breakdown["assessments"], dropped, flipped)
                        for t, v in zip(item.trajectories, item.verdicts, strict=True)]
            results.append(aggregate(item.name, item.policy, item.split, verdicts,
                                     [t.cost for t in item.trajectories], simulated, gate_config.confidence))
        ranking = [r.policy_name for r in rank([r for r in results if r.split == "train"],
                                               Constraints.from_gate(gate_config))]
        gates = {r.policy_name: gate(r, gate_config).deploy for r in results if r.split == "holdout"}
        critical = {r.policy_name: r.critical_failures for r in results if r.split == "holdout"}
        row = {"variant": label, "ranking": ranking[:top_k], "gate": gates, "holdout_critical": critical}
        if baseline is None:
            baseline = row
        row["ranking_changed"] = row["ranking"] != baseline["ranking"]
        row["gate_changed"] = sorted(name for name, deploy in gates.items() if baseline["gate"].get(name) != deploy)
        report["variants"].append(row)
    return report


def sensitivity_table(report: dict[str, Any]) -> str:
    lines = [f"{'variant':<22}  {'top policies on train':<40}  {'gate changes':<24}"]
    for row in report["variants"]:
        top = ", ".join(row["ranking"])
        changes = ", ".join(row["gate_changed"]) or "-"
        marker = " *" if row["ranking_changed"] else ""
        lines.append(f"{row['variant']:<22}  {top + marker:<40}  {changes:<24}")
    lines.append("(* the ranking differs from the full ensemble's)")
    return "\n".join(lines)


def review_rows(evaluated: Sequence[Evaluated]) -> list[dict[str, Any]]:
    """Rollouts on which the members disagree (``review``), with every member's z."""
    rows = []
    for item in evaluated:
        for scenario, verdict in zip(item.scenarios, item.verdicts, strict=True):
            breakdown = verdict.breakdown
            if not breakdown.get("review"):
                continue
            rows.append({
                "policy": item.name, "split": item.split, "scenario_id": scenario.id, "kind": scenario.kind,
                "members": json.dumps(breakdown["members"]),
                **{f"disagreement_{d}": breakdown["disagreement"][d] for d in Z_DIMENSIONS},
                **{f"z_{d}": value for d, value in zip(Z_DIMENSIONS, verdict.z)},
            })
    return rows
