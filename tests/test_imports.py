"""ember_np's import graph has no cycle, and its layers import only downward.

The graph is built from the source (AST), not from ``sys.modules``: every
``import`` and ``from ... import`` statement counts, also those inside
functions (a function-level import hides a cycle from Python at load time,
not from a reader), relative imports are resolved against the importing
module, and ``from pkg import name`` is an edge to the module ``pkg.name``
when that is a module, else to ``pkg``. A package's own ``__init__`` running
before its submodule is not an edge: only the module a statement names.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ember_np"


def module_name(path: Path) -> str:
    """``ember_np/training/loop.py`` -> ``ember_np.training.loop`` (a package: its name)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` statement names as X."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str) -> set[str]:
    """The ember_np modules that module ``name`` imports, anywhere in its source."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(name, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # import a.b.c: the deepest module there
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as a cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [one_cycle(graph, c) for c in components]


def one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path a -> b -> ... -> a inside a strongly connected ``component`` (for the message)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first: the shortest cycle through ``start``
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component always has a cycle")


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    # spec.build imports DqnTrainer inside the function, multiseed the Dask path inside
    # _cluster; tune.workers imports tune.storage at the top.
    assert "ember_np.training.trainer" in GRAPH["ember_np.training.spec"]
    assert "ember_np.training.cluster" in GRAPH["ember_np.training.multiseed"]
    assert "ember_np.tune.storage" in GRAPH["ember_np.tune.workers"]
    assert (
        "ember_np.cli.common" in GRAPH["ember_np.cli.training"]
    )  # from ember_np.cli import common


def test_cycle_finder_finds_a_cycle_and_names_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    found = cycles(GRAPH)
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_library_never_imports_the_command_line():
    library = [m for m in GRAPH if not m.startswith("ember_np.cli") and m != "ember_np.__main__"]
    bad = {m: sorted(t for t in GRAPH[m] if t.startswith("ember_np.cli")) for m in library}
    assert not {m: t for m, t in bad.items() if t}, bad
