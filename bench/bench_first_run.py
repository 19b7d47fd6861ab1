"""A newcomer's first run, timed: a fresh clone of this repository, `make run` (the install included), with no
model cache and no fitted probes (an empty FAR_DATA_DIR and model-call cache), on this machine.

    python bench/bench_first_run.py [--keep DIR]

Prints the install's and the search's seconds (from `make run`'s own steps), the answer line, and writes
bench/out/first_run.json. Package downloads come from pip's cache or the local index, as on a fresh machine of
this kind; nothing is downloaded from a model hub.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from far.harness import run, write_result

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - started, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="clone here and keep it (default: a temp dir, removed)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "first_run.json")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="far-first-run-"))
    try:
        clone = work / "far"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        data = work / "data"  # fitted probes and the model-call cache start empty
        env = {**os.environ, "FAR_DATA_DIR": str(data)}
        install_s, _ = timed(["make", "install-models"], clone, env)
        search_s, output = timed(["make", "run"], clone, env)  # the install is done: make runs the search only
        answer = next((line.strip() for line in output.splitlines() if line.startswith("Gate on holdout:")), "")
        result = {"install_s": round(install_s, 1), "search_s": round(search_s, 1),
                  "total_s": round(install_s + search_s, 1), "answer": answer}
        print(json.dumps(result, indent=2))
        write_result(args.out, result)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run(main)
