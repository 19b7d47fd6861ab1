"""FAR from Python: docs/python.md's example runs as written, its answers are the files' answers, and the
package's functions check their input like the command does."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "python.md"


def example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/python.md holds one example"
    return blocks[0]


def test_the_docs_example_runs_and_says_what_the_files_say(tmp_path):
    """Run from a copy of the repository's configs, as the page says (from the root): real models, a real
    evaluate and a real search on Ray Tune."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "example.py").write_text(example_code())
    env = dict(os.environ)
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    evaluated = json.loads((tmp_path / "results" / "python-evaluate" / "summary.json").read_text())
    best = evaluated["ranking_train"][0]
    holdout = next(r for r in evaluated["results"] if r["policy_name"] == best and r["split"] == "holdout")
    verdict = "DEPLOY" if evaluated["gate"][best]["deploy"] else "NO-DEPLOY"
    assert (f"best on train: {best}; on holdout {holdout['critical_failures']} critical, cost/scenario "
            f"{holdout['mean_cost']:.3f}, gate: {verdict}") in run.stdout
    searched = json.loads((tmp_path / "results" / "python-search" / "summary.json").read_text())
    assert searched["trials"] == 8 and searched["oracle"] == []  # real models, no label reader
    assert f"deployable: {searched['winner']['deployable']} ({searched['gate']['reason']})" in run.stdout
    assert "Gate on holdout:" in run.stdout  # the report the command prints
    assert (tmp_path / "results" / "python-search" / "report.html").exists()


def test_far_exports_the_pipeline_and_loads_lightly():
    """``import far`` pulls in neither Ray nor torch; the names resolve on first use."""
    code = ("import sys, far; light = not {'ray', 'torch'} & set(sys.modules); "
            "from far.search.jobs.search_job import run_search; print(light, far.run_search is run_search, "
            "sorted(far.__all__) == sorted(set(far.__all__)))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["True", "True", "True"], run.stderr[-2000:]
    import far

    with pytest.raises(AttributeError):
        far.run_everything  # noqa: B018


def test_bad_input_raises_naming_file_and_field_before_any_work(tmp_path):
    import far

    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"suite": {"name": "edge_cloud", "size": 100},
                                      "policies": {"p": {"cloud_threshold": 2.0}}}))
    with pytest.raises(far.FarInputError) as raised:
        far.run_evaluate(config)
    assert raised.value.file is not None and "bad.yaml" in str(raised.value.file)
    assert "cloud_threshold" in str(raised.value)
    config.write_text(yaml.safe_dump({"suite": {"name": "edge_cloud", "size": 100},
                                      "policies": {"p": {"cloud_threshold": 0.5}}}))
    with pytest.raises(far.FarInputError, match="unknown engine 'warp'"):
        far.run_evaluate(config, engine="warp")
