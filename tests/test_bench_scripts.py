"""bench/ holds benchmarks only: each script imports FAR (installed, never by patching ``sys.path``) and the shared
harness ``far.harness``, never another script; its entry point goes through ``far.harness.run`` (bad input: one
line, exit 2); result files are written by the harness, not by hand; and no function is longer than 60 lines (a
long one is split into stages)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "bench").rglob("*.py"))
LONGEST = 60


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 20 and not (ROOT / "bench" / "__init__.py").exists()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports_no_other_script(script: Path) -> None:
    siblings = {p.stem for p in SCRIPTS}
    names = imported(parsed(script))
    assert not {n for n in names if n.split(".")[0] in {"bench", *siblings} or n.startswith(".")}
    assert "far.harness" in names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_patches_no_import_path_and_writes_no_result_by_hand(script: Path) -> None:
    tree = parsed(script)
    calls = [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert not [c for c in calls if c.startswith("sys.path.")]
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
        "write_text") and "json.dumps" in ast.unparse(node)]
    assert "write_json_atomic" not in script.read_text()  # results go through far.harness.write_result
    entry = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    assert [ast.unparse(statement) for node in entry for statement in node.body] == ["run(main)"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_function_is_longer_than_60_lines(script: Path) -> None:
    long = {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(parsed(script))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= LONGEST}
    assert long == {}


def test_every_script_imports_from_the_installed_package_alone(tmp_path) -> None:
    """Each script's module level runs in a process whose import path holds neither the checkout nor bench/."""
    checkout = {str(ROOT), str(ROOT / "bench")}
    check = ("import os, runpy, sys\n"
             f"assert not {checkout!r} & {{os.path.abspath(p) for p in sys.path}}, sys.path\n"
             f"for path in {[str(p) for p in SCRIPTS]!r}:\n"
             "    runpy.run_path(path, run_name='bench_import_check')\n")
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
