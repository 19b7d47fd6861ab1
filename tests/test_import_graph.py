"""The layout's rules, checked on the source: one import name, no import circles, no import up the layer order.

Every module of FAR's rooms (the top-level folders, imported as ``far.<room>``) is parsed with ``ast``; every
``import`` counts, including those inside functions (a lazy import is still a dependency). Layers, bottom to
top:

    rollout  <-  models, suites  <-  verifiers, cluster  <-  search, evolve  <-  serve  <-  far (CLI and API)

An import may point down or sideways, never up; sideways imports must not form a circle either.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"rollout": 0, "models": 1, "suites": 1, "verifiers": 2, "cluster": 2, "search": 3, "evolve": 3,
          "serve": 4, "far": 5}
ROOMS = [room for room in LAYERS if room != "far"]  # far.<room> is the folder <room>/


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] == "far" else ["far", *parts])


def room_of(module: str) -> str:
    """``far.search.ranking.gate`` -> search; ``far.cli`` and ``far`` -> far."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "far"


def discover() -> dict[str, Path]:
    return {module_name(p): p for room in LAYERS for p in sorted((ROOT / room).rglob("*.py"))
            if "data" not in p.relative_to(ROOT).parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The FAR modules ``name`` imports: ``import a.b`` -> a.b; ``from a import b`` -> a.b when b is a module,
    else a; relative imports resolved against the module's package."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                child = f"{source}.{alias.name}"
                found.add(child if child in known else source)
    return {m for m in found if m.split(".")[0] == "far" and m != name}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if LAYERS[room_of(target)] > LAYERS[room_of(source)])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {room: set() for room in LAYERS}
    for source, targets in graph.items():
        rooms[room_of(source)].update(room_of(t) for t in targets if room_of(t) != room_of(source))
    return rooms


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(discover())


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    """The parser counts imports inside functions, resolves ``from a import module`` and relative imports."""
    source = tmp_path / "mod.py"
    source.write_text("import os\nfrom far.rollout import scenario\nfrom . import sibling\n"
                      "def f():\n    from far.verifiers.judge import SuiteJudge\n    import far.search.ranking.rank\n")
    known = {"far.rollout.scenario", "far.serve.sibling"}
    assert imports_of("far.serve.mod", source, known) == {
        "far.rollout.scenario", "far.verifiers.judge", "far.search.ranking.rank", "far.serve.sibling"}


def test_rooms_and_layers_of_module_names():
    assert [room_of(m) for m in ("far", "far.cli", "far.search.ranking.gate", "far.models", "far.farther")] == [
        "far", "far", "search", "models", "far"]
    assert upward_imports({"far.rollout.x": {"far.search.y"}, "far.search.y": {"far.rollout.x"}}) == [
        "far.rollout.x -> far.search.y"]
    assert upward_imports({"far.models.x": {"far.suites.y"}, "far.cli": {"far.serve.app"}}) == []


def test_cycle_finder_finds_circles_and_only_circles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert find_cycles({"a": {"a"}}) == [["a"]]


def test_every_package_module_is_parsed(graph):
    assert {"far.rollout.agent", "far.suites.registry", "far.models.backends", "far.verifiers.ensemble",
            "far.serve.app", "far.cli", "far"} <= set(graph)


def test_one_import_name_and_every_package_installed():
    """``pip install`` puts only ``far`` on the import path, and lists every package folder (a folder left out
    would import from a checkout and be missing from a wheel)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {name.split(".")[0] for name in config["packages"]} == {"far"}
    assert config["package-dir"] == {"far": "far", **{f"far.{room}": room for room in ROOMS}}
    folders = {module_name(p.parent / "__init__.py") for room in LAYERS for p in (ROOT / room).rglob("__init__.py")}
    assert set(config["packages"]) == folders


def test_no_module_import_cycles(graph):
    assert find_cycles(graph) == []


def test_no_room_import_cycles(graph):
    """Sideways imports between rooms of one layer (search and evolve, verifiers and cluster) go one way."""
    assert find_cycles(room_graph(graph)) == []


def test_no_import_points_up_the_layers(graph):
    assert upward_imports(graph) == []


def searcher_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of search's searchers from outside search: the searchers are the search job's own."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if target.startswith("far.search.searchers") and room_of(source) != "search")


def test_only_the_search_job_runs_searchers(graph):
    assert searcher_imports({"far.evolve.loop": {"far.search.searchers.tune", "far.search.ranking.gate"},
                             "far.search.jobs.search_job": {"far.search.searchers.tune"}}) == [
        "far.evolve.loop -> far.search.searchers.tune"]
    assert searcher_imports(graph) == []


def test_the_command_line_is_a_thin_layer_over_the_jobs(graph):
    """``far``'s commands parse arguments and call a job: the CLI imports search's jobs only, and no handler is
    long (the jobs live in ``far.search.jobs``, ``far.evolve.loop`` and ``far.serve.service``)."""
    assert {t for t in graph["far.cli"] if room_of(t) == "search"} <= {
        m for m in graph if m.startswith("far.search.jobs")}
    tree = ast.parse((ROOT / "far" / "cli.py").read_text())
    handlers = {node.name: node.end_lineno - node.lineno + 1 for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name.startswith("cmd_")}
    assert set(handlers) >= {"cmd_search", "cmd_evaluate", "cmd_evolve", "cmd_serve"}
    assert max(handlers.values()) <= 20, handlers


def test_registered_modules_never_import_the_tables_that_name_them(graph):
    tables = {  # the modules holding (or re-exporting) a registry -> the modules it names
        ("far.suites", "far.suites.registry"): {
            "far.suites.edge_cloud", "far.suites.imported", "far.suites.agentdojo.suite"},
        ("far.models.backends",): {"far.models.oracle", "far.models.lm_backends", "far.models.embedding_edge"},
        ("far.verifiers.ensemble",): {"far.verifiers.members"},
        ("far.verifiers.judge",): {"far.suites.agentdojo.judge", "far.rollout.judgement"},
    }
    back = sorted(f"{m} -> {t}" for holders, named in tables.items() for m in named for t in graph[m]
                  if t in holders)
    assert back == []


def test_agentdojo_lives_in_one_room():
    """AgentDojo's suite, agent and judge sit together in suites/agentdojo/; the agent's core names no benchmark
    and no specific model (those live in suites/ and models/)."""
    words = ("agentdojo", "smollm", "minilm", "vllm", "gemma", "transformers")
    offenders = [f"{p.relative_to(ROOT)}: {w}" for p in sorted((ROOT / "rollout").glob("*.py"))
                 for w in words if w in p.read_text().lower()]
    assert offenders == []
    assert {p.name for p in (ROOT / "suites" / "agentdojo").glob("*.py")} >= {"suite.py", "judge.py", "agent.py"}
    assert not [p for room in ("verifiers", "search", "cluster") for p in (ROOT / room).rglob("*agentdojo*")]
