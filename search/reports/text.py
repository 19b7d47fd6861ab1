"""Plain-text tables for the terminal."""
from __future__ import annotations

import math
from collections.abc import Sequence

from far.search.evaluation.results import PolicyResult
from far.search.ranking.gate import GateVerdict
from far.verifiers.taxonomy import FailureKind

ABBREVIATIONS = {
    FailureKind.UNSAFE_ACTION_EXECUTED.value: "UNSAFE",
    FailureKind.INJECTION_FOLLOWED.value: "INJECT",
    FailureKind.NO_FALLBACK_ON_FAILURE.value: "NOFALLBK",
    FailureKind.MISSED_CLOUD_ESCALATION.value: "MISSCLD",
    FailureKind.UNNECESSARY_CLOUD_CALL.value: "UNNCLD",
    FailureKind.OVER_REFUSAL.value: "OVERREF",
    FailureKind.DUPLICATE_ACTION.value: "DUP",
}


def pct(value: float | None) -> str:
    """A rate as a percentage; "-" where there is none (None, or NaN: a rate over no scenario)."""
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def results_table(results: Sequence[PolicyResult]) -> str:
    kinds = list(ABBREVIATIONS)
    header = ["policy", "split", "n", "critical", "reward", "cost/scn", "refused", "done", *ABBREVIATIONS.values(),
              "z_sec", "z_util", "z_or", "z_ctrl", "models"]
    rows = []
    for r in results:
        rows.append([
            r.policy_name, r.split, str(r.scenarios), str(r.critical_failures), f"{r.reward:.0f}",
            f"{r.mean_cost:.3f}", pct(r.over_refusal_rate), pct(r.benign_success_rate),
            *(str(r.failure_counts.get(k, 0)) for k in kinds),
            *(f"{r.z_mean[d]:.3f}" for d in ("security", "utility", "over_refusal", "controllability")),
            r.mark,
        ])
    return _table(header, rows)


def gate_table(verdicts: dict[str, GateVerdict], mark: str = "") -> str:
    """``mark``: ORACLE (...) when label-reading models produced the holdout figures, printed beside each verdict."""
    suffix = f" [{mark}]" if mark and mark != "real" else ""
    rows = [[name, ("DEPLOY" if v.deploy else "NO-DEPLOY") + suffix, f"{v.critical_rate_upper:.4f}", v.reason]
            for name, v in verdicts.items()]
    return _table(["policy", "verdict", "crit_rate_ub", "reason"], rows)


def attribution_table(result: PolicyResult, top: int = 8) -> str:
    entries = sorted(
        ((kind, parameter, lost) for kind, by_param in result.reward_lost.items() for parameter, lost in
         by_param.items()),
        key=lambda item: -item[2],
    )[:top]
    if not entries:
        return "  (no reward lost)"
    return _table(["failure", "decided by", "reward lost"],
                  [[kind, parameter, f"{lost:.0f}"] for kind, parameter, lost in entries])


def front_table(front: Sequence[dict]) -> str:
    """The critical / cost / over-refusal front (``far.search.ranking.leaderboard.front_rows``), cheapest first."""
    rows = [[f["policy"], "", str(f["train_critical"]), f"{f['train_cost/scn']:.3f}", pct(f["train_refused"]),
             f"{f['train_reward']:.0f}"] for f in front]
    return _table(["policy", "", "critical", "cost/scn", "refused", "reward"], rows)


def attack_rows(breakdown: Sequence[dict], policy: str, split: str) -> list[dict]:
    """Per (suite, attack) for one policy and split, from ``breakdown`` rows: ASR (injected rollouts where the
    attack succeeded), utility under attack (injected rollouts whose user task was done), and the suite's
    benign utility; plus an ``all`` row per attack over the suites (weighted by rollouts)."""
    rows = [r for r in breakdown if r["policy"] == policy and r["split"] == split]
    benign: dict[str, tuple[int, float]] = {}
    for row in rows:
        if row["kind"] == "benign":
            n, done = benign.get(row["category"], (0, 0.0))
            benign[row["category"]] = (n + row["n"], done + row["task_success_rate"] * row["n"])
    table: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if row["kind"] != "injected" or not row.get("attack"):
            continue
        for suite in (row["category"], "all"):
            n, asr, utility = table.get((suite, row["attack"]), (0, 0.0, 0.0))
            table[(suite, row["attack"])] = (n + row["n"], asr + row["security_failure_rate"] * row["n"],
                                             utility + row["task_success_rate"] * row["n"])
    all_benign = (sum(n for n, _ in benign.values()), sum(d for _, d in benign.values()))
    out = []
    for (suite, attack), (n, asr, utility) in sorted(table.items(), key=lambda item: (item[0][1], item[0][0] == "all",
                                                                                     item[0][0])):
        benign_n, benign_done = all_benign if suite == "all" else benign.get(suite, (0, 0.0))
        out.append({"suite": suite, "attack": attack, "injected": n, "asr": asr / n,
                    "utility_under_attack": utility / n, "benign": benign_n,
                    "benign_utility": benign_done / benign_n if benign_n else None})
    return out


def attack_table(rows: Sequence[dict]) -> str:
    return _table(["attack", "suite", "injected", "ASR", "utility under attack", "benign", "benign utility"],
                  [[r["attack"], r["suite"], str(r["injected"]), pct(r["asr"]), pct(r["utility_under_attack"]),
                    str(r["benign"]), pct(r["benign_utility"])] for r in rows])


def effects_table(effects: Sequence[dict]) -> str:
    """``results.rule_effects`` rows: which parameter stopped or rerouted how many calls, at what cost."""
    if not effects:
        return "  (no parameter stopped or rerouted a call)"
    return _table(["decided by", "action", "rollouts", "harmful stopped", "benign refused", "cost"],
                  [[e["parameter"], e["action"], str(e["decided"]), str(e["harmful_stopped"]),
                    str(e["benign_refused"]), f"{e['cost']:.1f}"] for e in effects])
