"""Progress lines for long work: how far, how fast, and how long is left."""
from __future__ import annotations

import time
from collections.abc import Callable


def rate_reporter(progress: Callable[[str], None], label: str, every_s: float = 10.0) -> Callable[[int, int], None]:
    """``progress(done, total)`` as a line with the rate so far and the time left at that rate: at most one
    line per ``every_s`` seconds, and the last one (fast, cached work prints one line)."""
    started = last = time.perf_counter()

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if done < total and now - last < every_s:
            return
        last = now
        rate = done / max(now - started, 1e-9)
        left = (total - done) / rate if rate > 0 else 0.0
        progress(f"{label}: {done}/{total} ({rate:.1f}/s, about {left / 60:.0f} min left)" if done < total
                 else f"{label}: {done}/{total} ({rate:.1f}/s)")

    return report
