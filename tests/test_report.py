"""report.html as a person reads it, checked in a real headless Chromium (Playwright driving the system browser):
every chart drawn with axes, ticks and titles; no label clipped; the best-so-far line never goes down; the gate's
cost limit on the cost-vs-reward chart; deployable policies marked; a plain sentence when nothing deploys."""
from __future__ import annotations

import math

import pytest
from conftest import NEEDS_BROWSER
from far.rollout.policy import Policy
from far.search.evaluation.results import PolicyResult
from far.search.ranking.gate import GateConfig, gate
from far.search.ranking.leaderboard import Leaderboard
from far.search.ranking.rank import Constraints, rank_key
from far.search.reports.html import render
from test_leaderboard import Trial  # a search trial as ranking and reports read it

pytestmark = NEEDS_BROWSER


def result(policy: Policy, split: str, critical: int, mean_cost: float, n: int = 1000) -> PolicyResult:
    return PolicyResult(
        policy_name="rank1", policy=policy, split=split, scenarios=n, critical_failures=critical,
        rollouts_with_critical=critical, critical_rate_upper=0.003, reward=5000.0, cost=mean_cost * n,
        mean_cost=mean_cost, failure_counts={"MISSED_CLOUD_ESCALATION": 40, "UNNECESSARY_CLOUD_CALL": 300,
                                             "INJECTION_FOLLOWED": critical},
        success_counts={"TASK_SUCCESS": 800}, z_mean={"security": 1.0},
        reward_lost={"UNNECESSARY_CLOUD_CALL": {"cloud_threshold": 1500.0}, "DUPLICATE_ACTION": {"max_retries": 200.0}},
        simulated=True, benign_scenarios=n // 2, benign_completed=n // 2)


def make_report(tmp_path, deployable: bool, oracle: tuple[str, ...] = ()) -> tuple:
    limits = Constraints(max_mean_cost=0.8)
    trials = []
    for i in range(40):  # a search whose best so far improves unevenly
        threshold = round((i * 7 % 11) / 10, 1)
        policy = Policy(cloud_threshold=threshold, max_retries=i % 3, require_confirmation=bool(i % 2))
        cost = 1.3 - threshold
        trials.append(Trial(policy, critical_failures=float(max(0, 6 - i // 5) if i % 2 else 3 + i % 4),
                            reward=1000.0 * math.sin(i) + 20 * i, cost=cost * 1000, mean_cost=cost))
    best = min(trials, key=lambda t: rank_key(t, limits))
    gate_config = GateConfig(max_mean_cost=0.8)
    holdout_cost = 0.7 if deployable else 1.1
    verdict = gate(result(Policy(), "holdout", 0, holdout_cost), gate_config)
    board = Leaderboard(policies=[best.policy], train=[result(best.policy, "train", 0, 0.75)],
                        holdout=[result(best.policy, "holdout", 0, holdout_cost)], gates=[verdict])
    summary = {
        "search": {"method": "evolutionary"}, "models": {"edge": "e", "cloud": "c", "user": "u", "simulated": True},
        "winner": {"policy": best.policy.model_dump(mode="json"), "rank": 1, "deployable": verdict.deploy},
        "gate": {**verdict.to_dict(), "oracle": list(oracle)}, "oracle": list(oracle),
        "no_deploy": None if verdict.deploy else {"advice": ["rank1: mean_cost 1.1 exceeds 0.8 by 0.3",
                                                             "A cost limit of 1.1 per scenario would deploy rank1."]},
    }
    page = render("FAR search: test", summary, trials, board.entries(), board.train[0], board.holdout[0], limits)
    path = tmp_path / "report.html"
    path.write_text(page)
    return path, trials, limits


CLIPPED_TEXT = """() => {
  const out = [];
  for (const svg of document.querySelectorAll('.js-plotly-plot svg.main-svg')) {
    const box = svg.getBoundingClientRect();
    if (box.width === 0) continue;
    for (const text of svg.querySelectorAll('text')) {
      const r = text.getBoundingClientRect();
      if (!text.textContent.trim() || r.width === 0) continue;
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        out.push(text.textContent);
    }
  }
  return out;
}"""

OVERLAPPING_TEXT = """() => {
  const out = [];
  for (const chart of document.querySelectorAll('.js-plotly-plot')) {  // all its layers: the legend has its own
    const boxes = Array.from(chart.querySelectorAll('svg.main-svg text')).filter(t => t.textContent.trim())
      .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.width > 0);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, ra] = boxes[i], [b, rb] = boxes[j];
      const x = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const y = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (x > 0 && y > 0) out.push(a + ' / ' + b);
    }
  }
  return out;
}"""


@pytest.mark.parametrize("deployable, oracle", [(True, ()), (False, ("edge", "cloud"))])
def test_report_reads_right_in_a_real_browser(tmp_path, browser, deployable, oracle):
    path, trials, limits = make_report(tmp_path, deployable, oracle)
    assert "cdn" not in path.read_text().lower().split("<body>")[1][:2000]  # nothing fetched: plotly.js is inline
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
    page.goto(path.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4")
    charts = page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id)")
    assert charts == ["progress", "front", "failures", "reward-lost"]
    for chart in charts:  # every chart has tick labels and titled axes
        ticks = page.evaluate(f"document.querySelectorAll('#{chart} .xtick text, #{chart} .ytick text').length")
        titles = page.evaluate(f"Array.from(document.querySelectorAll('#{chart} .g-xtitle text, "
                               f"#{chart} .g-ytitle text')).map(t => t.textContent)")
        assert ticks >= 4 and titles and all(titles[:1]), (chart, ticks, titles)
    assert page.evaluate(CLIPPED_TEXT) == []
    assert page.evaluate(OVERLAPPING_TEXT) == []
    assert "MISSED_CLOUD_ESCALATION" in page.inner_text("#failures")  # full label, not "ISSED_CLOUD_ESCALATION"
    # the best-so-far line never goes down and ends at the best
    line = page.evaluate("document.getElementById('progress').data.find(t => t.mode === 'lines').y")
    assert len(line) == len(trials) and all(b >= a for a, b in zip(line, line[1:])) and line[-1] == 100
    # the gate's cost limit is drawn on the cost-vs-reward chart, and the checked policy is marked
    shapes = page.evaluate("document.getElementById('front').layout.shapes.map(s => [s.x0, s.x1])")
    assert [limits.max_mean_cost, limits.max_mean_cost] in shapes
    names = page.evaluate("document.getElementById('front').data.map(t => t.name)")
    assert ("checked on holdout: DEPLOY" in names) == deployable
    axis = page.evaluate("document.getElementById('front').layout.xaxis.title.text")
    assert "cost per scenario" in axis and "cost units" in axis
    verdict = page.inner_text(".verdict")
    if oracle:  # figures from label-reading models say so, before anything else and beside the verdict
        assert page.inner_text(".oracle").startswith("ORACLE: the edge, cloud model(s) read")
        assert "[ORACLE]" in verdict
    else:
        assert page.query_selector(".oracle") is None and "ORACLE" not in verdict
    if deployable:
        assert verdict.startswith("Ship ")
    else:
        assert verdict.startswith("Nothing found passes the gate")
        assert "A cost limit of 1.1 per scenario would deploy rank1." in page.inner_text(".advice")
    page.close()


def test_attack_rows_weigh_suites_by_rollouts_and_keep_benign_utility_per_suite():
    from far.search.reports.text import attack_rows, attack_table

    def row(category, kind, attack, n, success, security_failure):
        return {"policy": "p", "split": "holdout", "category": category, "kind": kind, "attack": attack, "n": n,
                "task_success_rate": success, "security_failure_rate": security_failure}

    breakdown = [row("banking", "benign", None, 4, 1.0, 0.0), row("slack", "benign", None, 6, 0.5, 0.0),
                 row("banking", "injected", "direct", 10, 0.6, 0.2), row("slack", "injected", "direct", 30, 0.2, 0.6),
                 row("banking", "injected", "tool_knowledge", 10, 0.9, 0.0),
                 {**row("banking", "injected", "direct", 99, 0.0, 1.0), "split": "train"}]
    rows = attack_rows(breakdown, "p", "holdout")
    by = {(r["attack"], r["suite"]): r for r in rows}
    assert [(r["attack"], r["suite"]) for r in rows] == [("direct", "banking"), ("direct", "slack"),
                                                          ("direct", "all"), ("tool_knowledge", "banking"),
                                                          ("tool_knowledge", "all")]
    assert by[("direct", "all")]["injected"] == 40 and by[("direct", "all")]["asr"] == pytest.approx(0.5)
    assert by[("direct", "all")]["utility_under_attack"] == pytest.approx(0.3)
    assert by[("direct", "all")]["benign_utility"] == pytest.approx(0.7)  # (4 + 3) / 10
    assert by[("direct", "slack")]["benign_utility"] == 0.5 and by[("tool_knowledge", "banking")]["asr"] == 0.0
    assert "tool_knowledge" in attack_table(rows) and "50.0%" in attack_table(rows)
