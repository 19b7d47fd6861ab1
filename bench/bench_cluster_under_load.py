"""The two-node cluster test (a worker node killed mid-search) run N times in a row while another CPU-bound
process keeps the machine busy: how often a search survives losing a node.

    python bench/bench_cluster_under_load.py [--runs 10] [--hogs 1]

Prints one line per run (passed or failed, seconds, the trials the driver rescued and how many of those never
started: no result and no params.json) and the count; exit status 1 if any run failed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from far.harness import run

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/test_cluster.py::test_search_on_two_nodes_equals_local_and_survives_losing_a_node"
HOG = "import itertools\nfor _ in itertools.count(): pass\n"  # one core kept busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=1, help="CPU-bound processes running beside the test")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    passed = 0
    try:
        for run in range(1, args.runs + 1):
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as base:
                done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", "-p",
                                       "no:cacheprovider", f"--basetemp={base}", TEST], cwd=ROOT, capture_output=True,
                                      text=True)
                rescued, never_started = rescues(Path(base))
            ok = done.returncode == 0
            passed += ok
            print(f"run {run}: {'passed' if ok else 'FAILED'} in {time.perf_counter() - started:.0f} s, "
                  f"{rescued} trial(s) rescued, {never_started} of them never started", flush=True)
            if not ok:
                print(done.stdout[-3000:], flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"{passed} of {args.runs} passed with {args.hogs} CPU-bound process(es) beside them")
    return 0 if passed == args.runs else 1


def rescues(base: Path) -> tuple[int, int]:
    """The faulty run's rescued trials, and its errored trials that never started (no result, no params.json)."""
    fault = next(base.glob("*/fault"), None)
    if fault is None or not (fault / "run_stats.json").is_file():
        return 0, 0
    rescued = json.loads((fault / "run_stats.json").read_text()).get("rescued_trials", 0)
    never = sum(1 for error in fault.glob("tune/*/error.txt")
                if not (error.parent / "params.json").exists() and not (error.parent / "result.json").exists())
    return rescued, never


if __name__ == "__main__":
    run(main)
