"""Progress lines for long work (``far.rollout.progress``)."""
from far.rollout.progress import rate_reporter


def test_progress_lines_are_throttled_and_the_last_always_printed(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 12.0, 13.0, 14.0])  # started, then one reading per report
    monkeypatch.setattr("far.rollout.progress.time.perf_counter", lambda: next(clock))
    lines = []
    report = rate_reporter(lines.append, "encoding", every_s=10.0)
    for done in (10, 20, 120, 130, 200):
        report(done, 200)
    assert lines == ["encoding: 120/200 (10.0/s, about 0 min left)", "encoding: 200/200 (14.3/s)"]
