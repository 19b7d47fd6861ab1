"""The layout's rules, checked on the source: no import circles, no import up the layer order, and each room of
rollout/ keeps to itself.

Every module of FAR's packages is parsed with ``ast``; every ``import`` counts, including those inside
functions (a lazy import is still a dependency). Layers, bottom to top:

    rollout  <-  verifiers, cluster  <-  search, evolve  <-  serve  <-  far (the command and the Python API)

An import may point down or sideways, never up; sideways imports must not form a circle either. evolve and
serve reach search through its pipeline (``search.pipeline``) only.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"rollout": 0, "verifiers": 1, "cluster": 1, "search": 2, "evolve": 2, "serve": 3, "far": 4}
PIPELINE = "search.pipeline"  # all of search that evolve and serve may import


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def discover() -> dict[str, Path]:
    return {module_name(p): p for package in LAYERS for p in sorted((ROOT / package).rglob("*.py"))}


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
    return {m for m in found if m.split(".")[0] in LAYERS and m != name}


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
                  if LAYERS[target.split(".")[0]] > LAYERS[source.split(".")[0]])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {p: set() for p in LAYERS}
    for source, targets in graph.items():
        packages[source.split(".")[0]].update(t.split(".")[0] for t in targets if t.split(".")[0] != source.split(".")[0])
    return packages


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(discover())


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    """The parser counts imports inside functions, resolves ``from a import module`` and relative imports."""
    source = tmp_path / "mod.py"
    source.write_text("import os\nfrom rollout import scenario\nfrom . import sibling\n"
                      "def f():\n    from verifiers.judge import SuiteJudge\n    import search.rank\n")
    known = {"rollout.scenario", "serve.sibling"}
    assert imports_of("serve.mod", source, known) == {"rollout.scenario", "verifiers.judge", "search.rank",
                                                      "serve.sibling"}


def test_cycle_finder_finds_circles_and_only_circles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert find_cycles({"a": {"a"}}) == [["a"]]
    assert upward_imports({"rollout.x": {"search.y"}, "search.y": {"rollout.x"}}) == ["rollout.x -> search.y"]


def test_every_package_module_is_parsed(graph):
    assert {"rollout.agent", "rollout.suites.registry", "rollout.models.backends", "verifiers.ensemble",
            "serve.app", "far.cli"} <= set(graph)


def test_no_module_import_cycles(graph):
    assert find_cycles(graph) == []


def test_no_package_import_cycles(graph):
    """Sideways imports between packages of one layer (search and evolve, verifiers and cluster) go one way."""
    assert find_cycles(package_graph(graph)) == []


def test_no_import_points_up_the_layers(graph):
    assert upward_imports(graph) == []


def internal_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of search by evolve or serve that go past its pipeline."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if source.split(".")[0] in ("evolve", "serve") and target.split(".")[0] == "search"
                  and target != PIPELINE)


def test_evolve_and_serve_use_the_pipeline_not_search_internals(graph):
    assert internal_imports({"evolve.loop": {"search.config", "search.pipeline"}, "serve.app": {"search"},
                             "far.cli": {"search.config"}}) == ["evolve.loop -> search.config", "serve.app -> search"]
    assert internal_imports(graph) == []
    assert any(PIPELINE in targets for source, targets in graph.items() if source.startswith("evolve."))
    assert any(PIPELINE in targets for source, targets in graph.items() if source.startswith("serve."))


def test_the_command_line_is_a_thin_layer_over_the_pipeline(graph):
    """``far``'s commands parse arguments and call a pipeline function: the CLI imports no search internals,
    and no handler is long (the jobs live in ``search.pipeline``, ``evolve.loop`` and ``serve.service``)."""
    assert {t for t in graph["far.cli"] if t.startswith("search")} <= {PIPELINE}
    tree = ast.parse((ROOT / "far" / "cli.py").read_text())
    handlers = {node.name: node.end_lineno - node.lineno + 1 for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name.startswith("cmd_")}
    assert set(handlers) >= {"cmd_search", "cmd_evaluate", "cmd_evolve", "cmd_serve"}
    assert max(handlers.values()) <= 20, handlers


def test_rollout_rooms_keep_to_themselves(graph):
    """rollout's core never imports its suites or its model backends; suites never import model backends and
    backends never import suites; registered modules never import the tables that name them."""
    def room(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in ("suites", "models") else "core"

    crossings = sorted(f"{s} -> {t}" for s, targets in graph.items() if s.startswith("rollout.")
                       for t in targets if t.startswith("rollout.") and room(s) != room(t) and room(s) != "core"
                       and room(t) != "core")
    core_up = sorted(f"{s} -> {t}" for s, targets in graph.items() if s.startswith("rollout.") and room(s) == "core"
                     for t in targets if t.startswith("rollout.") and room(t) != "core")
    assert crossings == [] and core_up == []
    tables = {  # the modules holding (or re-exporting) a registry -> the modules it names
        ("rollout.suites", "rollout.suites.registry"): {
            "rollout.suites.edge_cloud", "rollout.suites.imported", "rollout.suites.agentdojo.suite"},
        ("rollout.models.backends",): {
            "rollout.models.oracle", "rollout.models.lm_backends", "rollout.models.embedding_edge"},
        ("verifiers.ensemble",): {"verifiers.members"},
        ("verifiers.judge",): {"verifiers.agentdojo_judge", "verifiers.judgement"},
    }
    back = sorted(f"{m} -> {t}" for holders, named in tables.items() for m in named for t in graph[m]
                  if t in holders)
    assert back == []


def test_only_suites_and_models_name_a_benchmark_or_a_model():
    """No module of rollout/ outside suites/ and models/ mentions AgentDojo or a specific model."""
    words = ("agentdojo", "smollm", "minilm", "vllm", "gemma", "transformers")
    offenders = [f"{p.relative_to(ROOT)}: {w}" for p in sorted((ROOT / "rollout").glob("*.py"))
                 for w in words if w in p.read_text().lower()]
    assert offenders == []
