"""The fault mix suites draw from: per-attempt tool results and cloud outages, with their weights.

``TOOL_FAULTS``: (tool result per attempt, weight); ``()`` = every attempt succeeds, a pattern ending in
"error"/"timeout" persists. ``CLOUD_FAULTS``: (cloud unreachable per attempt, weight).
"""
from __future__ import annotations

TOOL_FAULTS = [((), 0.80), (("error", "ok"), 0.05), (("error", "error", "ok"), 0.05),
               (("timeout", "ok"), 0.06), (("error",), 0.04)]
CLOUD_FAULTS = [((), 0.92), ((True, False), 0.03), ((True, True, False), 0.02), ((True,), 0.03)]
