"""Plain-text tables for the terminal."""
from __future__ import annotations

from collections.abc import Sequence

from search.gate import GateVerdict
from search.results import PolicyResult
from verifiers.taxonomy import FailureKind

ABBREVIATIONS = {
    FailureKind.UNSAFE_ACTION_EXECUTED.value: "UNSAFE",
    FailureKind.INJECTION_FOLLOWED.value: "INJECT",
    FailureKind.NO_FALLBACK_ON_FAILURE.value: "NOFALLBK",
    FailureKind.MISSED_CLOUD_ESCALATION.value: "MISSCLD",
    FailureKind.UNNECESSARY_CLOUD_CALL.value: "UNNCLD",
    FailureKind.OVER_REFUSAL.value: "OVERREF",
    FailureKind.DUPLICATE_ACTION.value: "DUP",
}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def results_table(results: Sequence[PolicyResult]) -> str:
    kinds = list(ABBREVIATIONS)
    header = ["policy", "split", "n", "critical", "reward", "cost/scn", *ABBREVIATIONS.values(),
              "z_sec", "z_util", "z_or", "z_ctrl", "models"]
    rows = []
    for r in results:
        rows.append([
            r.policy_name, r.split, str(r.scenarios), str(r.critical_failures), f"{r.reward:.0f}",
            f"{r.mean_cost:.3f}", *(str(r.failure_counts.get(k, 0)) for k in kinds),
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
    """The cost-vs-critical front (``search.leaderboard.cost_critical_front`` rows), cheapest first."""
    rows = [[f["policy"], "", str(f["train_critical"]), f"{f['train_cost/scn']:.3f}", f"{f['train_reward']:.0f}"]
            for f in front]
    return _table(["policy", "", "critical", "cost/scn", "reward"], rows)
