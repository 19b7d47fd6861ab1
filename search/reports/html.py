"""``report.html`` for a search run: one self-contained page, drawn with Plotly (its JavaScript inlined: it opens
offline, and hovering a point shows that policy's parameters and figures).

What a person reads, top to bottom: the verdict (which policy ships, or a plain sentence of what to change when
none does), the leaderboard (train vs holdout, gate), the search's progress (the best so far never goes
down), cost vs reward with the gate's cost limit and the deployable policies marked, and where the winner's
reward was lost. ``tests/test_report.py`` checks the page in a real headless browser.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from far.search.evaluation.results import PolicyResult
from far.search.ranking.rank import NO_CONSTRAINTS, Constraints, is_feasible, rank, rank_key
from far.search.reports.text import pct

COST_AXIS = "cost per scenario (cost units; one cloud call = 1.0)"
REWARD_AXIS = "reward on train (points, sum over scenarios)"


def _figure_html(figure: Any, div_id: str, first: bool) -> str:
    # the first chart carries plotly.js inline; the others reuse it (one copy per page)
    return figure.to_html(full_html=False, include_plotlyjs=True if first else False, div_id=div_id,
                          config={"displaylogo": False, "responsive": True})


def _layout(figure: Any, title: str, x_title: str, y_title: str, height: int = 420) -> None:
    figure.update_layout(title={"text": title, "x": 0.01}, height=height, template="plotly_white",
                         margin={"l": 70, "r": 30, "t": 90, "b": 60}, hovermode="closest",
                         legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"})
    figure.update_xaxes(title_text=x_title, showticklabels=True, ticks="outside", automargin=True)
    figure.update_yaxes(title_text=y_title, showticklabels=True, ticks="outside", automargin=True)


def _describe(trial: Any) -> str:
    return (f"{html.escape(trial.policy.short())}<br>critical {trial.critical_failures:g} · reward "
            f"{trial.reward:,.0f} · cost/scenario {trial.mean_cost:.3f}")


def progress_figure(trials: Sequence[Any], constraints: Constraints) -> Any:
    """Trial by trial: each trial's reward (within / outside the cost limit), and the best so far by
    ``far.search.ranking.rank`` drawn as the share of all trials it beats -- a line that never goes down."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    final = rank(trials, constraints)
    keys = [rank_key(t, constraints) for t in final]
    best, share, best_text = None, [], []
    for trial in trials:
        if best is None or rank_key(trial, constraints) < rank_key(best, constraints):
            best = trial
        key = rank_key(best, constraints)
        share.append(100.0 * sum(k > key for k in keys) / max(1, len(keys) - 1) if len(keys) > 1 else 100.0)
        best_text.append(_describe(best))
    xs = list(range(1, len(trials) + 1))
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    for feasible, colour, name in ((True, "#2a9d8f", "trial within the cost limit"),
                                   (False, "#bbbbbb", "trial over the cost limit")):
        picked = [(x, t) for x, t in zip(xs, trials) if is_feasible(t, constraints) == feasible]
        figure.add_trace(go.Scatter(x=[x for x, _ in picked], y=[t.reward for _, t in picked], mode="markers",
                                    name=name, marker={"color": colour, "size": 7},
                                    hovertext=[_describe(t) for _, t in picked], hoverinfo="text+x"),
                         secondary_y=False)
    figure.add_trace(go.Scatter(x=xs, y=share, mode="lines", line={"shape": "hv", "color": "#e76f51", "width": 3},
                                name="best so far: % of all trials it beats", hovertext=best_text,
                                hoverinfo="text+y"), secondary_y=True)
    _layout(figure, "Search progress", "trial (in the order the searcher proposed them)", REWARD_AXIS)
    figure.update_yaxes(title_text="best so far beats (% of trials)", range=[0, 105], dtick=20, secondary_y=True,
                        ticks="outside", automargin=True, showgrid=False)
    return figure


def front_figure(trials: Sequence[Any], leaderboard: Sequence[dict[str, Any]], constraints: Constraints) -> Any:
    """Cost vs reward of every policy tried (train), coloured by critical failures; the gate's cost limit as a
    line; policies checked on holdout marked DEPLOY / NO-DEPLOY."""
    import plotly.graph_objects as go
    from far.search.ranking.leaderboard import distinct_trials

    points = [t for t in distinct_trials(trials) if math.isfinite(t.mean_cost) and math.isfinite(t.reward)]
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=[t.mean_cost for t in points], y=[t.reward for t in points], mode="markers", name="policy tried",
        marker={"color": [t.critical_failures for t in points], "colorscale": "Reds", "size": 8,
                "colorbar": {"title": {"text": "critical failures", "side": "right"}},
                "line": {"width": 0.5, "color": "#555"}},
        hovertext=[_describe(t) for t in points], hoverinfo="text"))
    verdicts = {entry["policy"]: entry["gate"] for entry in leaderboard}
    for verdict, symbol, colour in (("DEPLOY", "star", "#2a9d8f"), ("NO-DEPLOY", "x", "#264653")):
        marked = [t for t in points if verdicts.get(t.policy.short()) == verdict]
        if marked:
            figure.add_trace(go.Scatter(
                x=[t.mean_cost for t in marked], y=[t.reward for t in marked], mode="markers",
                name=f"checked on holdout: {verdict}", marker={"symbol": symbol, "size": 16, "color": colour},
                hovertext=[_describe(t) + f"<br>holdout gate: {verdict}" for t in marked], hoverinfo="text"))
    if constraints.max_mean_cost is not None:
        figure.add_vline(x=constraints.max_mean_cost, line={"dash": "dash", "color": "#e76f51"},
                         annotation_text=f"gate cost limit {constraints.max_mean_cost:g}",
                         annotation_position="top")
    _layout(figure, "Cost vs reward of the policies tried (train)", COST_AXIS, REWARD_AXIS, height=460)
    return figure


def failures_figure(train: PolicyResult, holdout: PolicyResult) -> Any:
    """The winner's failures by type on train and holdout (full names, never clipped)."""
    import plotly.graph_objects as go

    kinds = sorted(k for k in set(train.failure_counts) | set(holdout.failure_counts)
                   if train.failure_counts.get(k, 0) or holdout.failure_counts.get(k, 0))
    figure = go.Figure()
    for result, colour in ((train, "#264653"), (holdout, "#f4a261")):
        figure.add_trace(go.Bar(y=kinds, x=[result.failure_counts.get(k, 0) / result.scenarios * 100 for k in kinds],
                                orientation="h", name=f"{result.split} ({result.scenarios} scenarios)",
                                marker={"color": colour},
                                hovertext=[f"{k}: {result.failure_counts.get(k, 0)} of {result.scenarios}"
                                           for k in kinds], hoverinfo="text"))
    _layout(figure, "Failures of the winner, by type", "scenarios with this failure (%)", "",
            height=140 + 40 * max(1, len(kinds)))
    figure.update_layout(barmode="group")
    return figure


def reward_lost_figure(train: PolicyResult) -> Any:
    """Reward the winner lost on train, by the policy parameter whose decision caused it."""
    import plotly.graph_objects as go

    by_parameter: dict[str, float] = {}
    for by_param in train.reward_lost.values():
        for parameter, lost in by_param.items():
            by_parameter[parameter] = by_parameter.get(parameter, 0.0) + lost
    items = sorted(by_parameter.items(), key=lambda kv: kv[1])
    figure = go.Figure(go.Bar(y=[k for k, _ in items], x=[v for _, v in items], orientation="h",
                              marker={"color": "#e9c46a"}, name="reward lost"))
    _layout(figure, "Reward lost on train, by deciding parameter", "reward lost (points)", "",
            height=140 + 40 * max(1, len(items)))
    return figure


def metric_rounds_page(title: str, rounds: Sequence[int], series: dict[str, Sequence[float]], x_title: str) -> str:
    """A self-contained page of one line chart per metric (``far evolve``'s rounds)."""
    import plotly.graph_objects as go

    drawn = []
    for i, (name, values) in enumerate(series.items()):
        figure = go.Figure(go.Scatter(x=list(rounds), y=list(values), mode="lines+markers", name=name))
        _layout(figure, f"{name} on holdout by round", x_title, name, height=320)
        drawn.append(_figure_html(figure, f"chart-{i}", first=i == 0))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;max-width:1100px;margin:2em auto'><h1>{html.escape(title)}</h1>"
            + "".join(drawn) + "</body></html>")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def verdict_html(summary: dict[str, Any]) -> str:
    winner = summary["winner"]
    gate = summary["gate"]
    policy = ", ".join(f"{k}={v}" for k, v in winner["policy"].items())
    oracle = " [ORACLE]" if gate.get("oracle") else ""
    if winner.get("deployable", gate["deploy"]):
        return (f'<p class="verdict deploy">Ship <b>{html.escape(policy)}</b> (rank {winner.get("rank", 1)} on '
                f"train): it passes the gate on holdout{oracle} — {html.escape(gate['reason'])}.</p>")
    no_deploy = summary.get("no_deploy") or {}
    items = "".join(f"<li>{html.escape(line)}</li>" for line in no_deploy.get("advice") or [])
    front = no_deploy.get("tradeoff_front") or []
    front_table = table(["policy", "critical failures (train)", "cost per scenario (train)",
                         "benign refused (train)", "reward (train)"],
                        [[f["policy"], f["train_critical"], f"{f['train_cost/scn']:.3f}", pct(f["train_refused"]),
                          f"{f['train_reward']:,.0f}"] for f in front]) if front else ""
    return (f'<p class="verdict no-deploy">Nothing found passes the gate on holdout{oracle}. The best on train, '
            f"<b>{html.escape(policy)}</b>, fails: {html.escape(gate['reason'])}.</p>"
            f'<p>What to change:</p><ul class="advice">{items}</ul>'
            + (f"<p>Critical failures vs cost and over-refusal, the front of what was found (no policy is "
               f"safer without costing more or refusing more than one of these):</p>{front_table}"
               if front_table else ""))


def rules_html(summary: dict[str, Any]) -> str:
    """The winner's rules in words and what its parameters stopped or rerouted on holdout (search only)."""
    winner = summary["winner"]
    if "rules" not in winner:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in winner["rules"])
    effects = winner.get("rule_effects_holdout") or []
    rows = [[e["parameter"], e["action"], e["decided"], e["harmful_stopped"], e["benign_refused"], f"{e['cost']:.1f}"]
            for e in effects]
    return (f"<h2>The winner's rules</h2><ul class=\"rules\">{items}</ul>"
            "<p>What each parameter stopped or rerouted on holdout (harmful: by the judge's labels):</p>"
            + table(["decided by", "action", "rollouts", "harmful stopped", "benign refused", "cost"], rows))


def render(title: str, summary: dict[str, Any], trials: Sequence[Any], leaderboard: Sequence[dict[str, Any]],
           winner_train: PolicyResult, winner_holdout: PolicyResult, constraints: Constraints | None = None) -> str:
    constraints = constraints or NO_CONSTRAINTS
    models = summary["models"]
    charts = [progress_figure(trials, constraints), front_figure(trials, leaderboard, constraints),
              failures_figure(winner_train, winner_holdout), reward_lost_figure(winner_train)]
    ids = ["progress", "front", "failures", "reward-lost"]
    drawn = [_figure_html(figure, div_id, first=i == 0) for i, (figure, div_id) in enumerate(zip(charts, ids))]
    oracle = summary.get("oracle") or []
    banner = (f'<p class="oracle"><b>ORACLE</b>: the {", ".join(oracle)} model(s) read each scenario\'s '
              "ground-truth labels. Every figure on this page is an upper bound, not evidence of how the policy "
              "behaves with real models.</p>") if oracle else ""
    if summary.get("shift"):
        banner += (f'<p class="oracle"><b>{html.escape(summary["shift"])}</b>: the holdout is unlike what the '
                   "learned models were fitted on (far.search.evaluation.shift), so their figures here may not hold; "
                   "summary.json: models.fit.shift.</p>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#eee}}
.verdict{{font-size:1.15em;padding:.6em;border-radius:4px}}.deploy{{background:#e0f2ef}}
.no-deploy{{background:#fbe9e4}}.oracle{{background:#fff3c4;padding:.6em;border:2px solid #e9c46a}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Method <b>{html.escape(summary['search']['method'])}</b>, {len(trials)} trials. Models: edge
{html.escape(models['edge'])}, cloud {html.escape(models['cloud'])}, user {html.escape(models['user'])}.</p>
{banner}
<h2>Which policy can I ship?</h2>
{verdict_html(summary)}
{rules_html(summary)}
<h2>Leaderboard: train vs holdout</h2>
{table(list(leaderboard[0].keys()) if leaderboard else [], [list(r.values()) for r in leaderboard])}
<h2>Search progress</h2>
{drawn[0]}
<h2>Cost vs reward</h2>
{drawn[1]}
<h2>Where the winner loses reward</h2>
{drawn[2]}
{drawn[3]}
</body></html>"""
