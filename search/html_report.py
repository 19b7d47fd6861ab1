"""``report.html``: one self-contained page (inline SVG, no scripts, no network) for a search run."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from search.results import PolicyResult

WIDTH, HEIGHT, PAD = 560, 260, 44


def _scale(values: Sequence[float], low_px: float, high_px: float):
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    return lambda v: low_px + (v - lo) / (hi - lo) * (high_px - low_px), lo, hi


def _axes(title: str, x_label: str, y_label: str, x_range: tuple, y_range: tuple) -> str:
    return (f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>'
            f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 10}" y2="{HEIGHT - PAD}" stroke="#444"/>'
            f'<line x1="{PAD}" y1="24" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle">{html.escape(x_label)} '
            f'[{x_range[0]:.3g} … {x_range[1]:.3g}]</text>'
            f'<text x="12" y="{HEIGHT / 2}" transform="rotate(-90 12 {HEIGHT / 2})" text-anchor="middle">'
            f'{html.escape(y_label)} [{y_range[0]:.3g} … {y_range[1]:.3g}]</text>')


def line_chart(title: str, xs: Sequence[float], ys: Sequence[float], x_label: str, y_label: str) -> str:
    if not xs:
        return ""
    sx, x0, x1 = _scale(xs, PAD, WIDTH - 10)
    sy, y0, y1 = _scale(ys, HEIGHT - PAD, 24)
    points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys) if math.isfinite(y))
    return (f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'{_axes(title, x_label, y_label, (x0, x1), (y0, y1))}'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{points}"/></svg>')


def scatter(title: str, points: Sequence[tuple[float, float, str]], front: set[int], x_label: str,
            y_label: str) -> str:
    if not points:
        return f"<p>{html.escape(title)}: no policy without critical failures.</p>"
    sx, x0, x1 = _scale([p[0] for p in points], PAD, WIDTH - 10)
    sy, y0, y1 = _scale([p[1] for p in points], HEIGHT - PAD, 24)
    dots = "".join(
        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{5 if i in front else 3}" '
        f'fill="{"#d62728" if i in front else "#7f7f7f"}"><title>{html.escape(label)}</title></circle>'
        for i, (x, y, label) in enumerate(points))
    return (f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'{_axes(title, x_label, y_label, (x0, x1), (y0, y1))}{dots}</svg>')


def bar_chart(title: str, items: Sequence[tuple[str, float]]) -> str:
    items = [(k, v) for k, v in items if v]
    if not items:
        return f"<p>{html.escape(title)}: none.</p>"
    top = max(v for _, v in items)
    row = 22
    height = 30 + row * len(items)
    bars = "".join(
        f'<text x="230" y="{40 + i * row}" text-anchor="end">{html.escape(k)}</text>'
        f'<rect x="236" y="{28 + i * row}" width="{300 * v / top:.1f}" height="16" fill="#ff7f0e"/>'
        f'<text x="{240 + 300 * v / top:.1f}" y="{40 + i * row}">{v:g}</text>'
        for i, (k, v) in enumerate(items))
    return (f'<svg width="{WIDTH + 40}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="10" y="16" font-weight="bold">{html.escape(title)}</text>{bars}</svg>')


def pareto_front(points: Sequence[tuple[float, float, str]]) -> set[int]:
    """Indices not dominated in (lower cost, higher reward): ``verifiers.pareto``'s rule on (−cost, reward)."""
    from verifiers.pareto import pareto_front as front

    return set(front([(-cost, reward) for cost, reward, _ in points]))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(title: str, summary: dict[str, Any], trials: Sequence[Any], leaderboard: Sequence[dict[str, Any]],
           winner_train: PolicyResult, winner_holdout: PolicyResult, constraints: Any = None) -> str:
    best_critical, best_reward, xs = [], [], []
    best = None
    from search.rank import NO_CONSTRAINTS, rank_key

    constraints = constraints or NO_CONSTRAINTS
    for index, trial in enumerate(trials, start=1):
        if best is None or rank_key(trial, constraints) < rank_key(best, constraints):
            best = trial
        xs.append(index)
        best_critical.append(best.critical_failures)
        best_reward.append(best.reward)
    safe = [(t.metrics["mean_cost"], t.reward, f"{t.params} reward={t.reward:.0f}") for t in trials
            if t.critical_failures == 0]
    kinds = sorted(set(winner_train.failure_counts) | set(winner_holdout.failure_counts))
    by_parameter: dict[str, float] = {}
    for by_param in winner_train.reward_lost.values():
        for parameter, lost in by_param.items():
            by_parameter[parameter] = by_parameter.get(parameter, 0.0) + lost
    gate = summary["gate"]
    models = summary["models"]
    winner = ", ".join(f"{k}={v}" for k, v in summary["winner"]["policy"].items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#eee}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Method <b>{html.escape(summary['search']['method'])}</b>, {len(trials)} trials. Models: edge
{html.escape(models['edge'])}, cloud {html.escape(models['cloud'])}, user {html.escape(models['user'])}
{'(simulation involved)' if models.get('simulated') else ''}.</p>
<h2>Winner and gate</h2>
<p><b>{html.escape(winner)}</b> — gate on holdout:
<b>{'DEPLOY' if gate['deploy'] else 'NO-DEPLOY'}</b> ({html.escape(gate['reason'])}).</p>
<h2>Leaderboard: train vs holdout</h2>
{table(list(leaderboard[0].keys()) if leaderboard else [], [list(r.values()) for r in leaderboard])}
<h2>Search progress</h2>
{line_chart('Best so far: critical failures (train)', xs, best_critical, 'trial', 'critical failures')}
{line_chart('Best so far: reward (train)', xs, best_reward, 'trial', 'reward')}
<h2>Cost vs reward of policies with zero critical failures (train; red: Pareto front)</h2>
{scatter('zero-critical policies', safe, pareto_front(safe), 'cost per scenario', 'reward')}
<h2>Failures of the winner</h2>
{bar_chart('train: count by failure type', [(k, winner_train.failure_counts.get(k, 0)) for k in kinds])}
{bar_chart('holdout: count by failure type', [(k, winner_holdout.failure_counts.get(k, 0)) for k in kinds])}
{bar_chart('train: reward lost by deciding parameter', sorted(by_parameter.items(), key=lambda kv: -kv[1]))}
</body></html>"""
