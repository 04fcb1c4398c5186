"""ember_np's packages form layers, and every import goes down (or stays level).

The unit is a package of ember_np (``nn``, ``dqn``, ``training``, ...) or a top-level
module (``checkpoint``, ``tune``, ...); the root ``ember_np/__init__.py``, the public
facade, is the unit ``ember_np``. :data:`LAYERS` is the one place the order is written,
lowest first: a unit may import from its own layer or any layer below it, never above,
and no two units import each other, directly or around a loop.

The package-level graph is ``tests/test_imports.py``'s module graph (from the source,
with ``ast``) with each module replaced by its unit. So it counts every ``import``
statement: at the top of a module, inside functions (a function-local import hides a
dependency from Python at load time, not from a reader), and under ``if
TYPE_CHECKING:`` (a type-only import is still a dependency of the code's meaning; none
goes up today). Not counted: ``from ember_np import __version__`` (package metadata
defined in ``__init__`` before anything is imported: no layer is reached through it),
and the module names the root facade keeps as strings for its lazy ``__getattr__``
(the facade is the top library layer anyway).
"""

from __future__ import annotations

import ast

from test_imports import GRAPH, MODULES, cycles

#: The layers, lowest first (see the module docstring). A new package or top-level
#: module must be placed here (test_every_unit_has_a_layer).
# fmt: off
LAYERS: list[tuple[str, set[str]]] = [
    # helpers every layer uses: jit options, boundary checks, the RNG, the shared
    # types and encoders, statistics, the checkpoint container (no algorithm's keys), and
    # what every algorithm's config dataclass does alike
    ("foundation", {"_jit", "_precompile", "_arrays", "_masks", "_memory", "_validate", "_npz",
                    "_registration", "_files", "_config", "rng", "types", "encoding",
                    "stats", "checkpoint"}),
    ("nn", {"nn"}),  # network kernels no algorithm owns
    ("envs", {"envs"}),  # native envs
    # the algorithm registry: below every algorithm (each registers in it), which it
    # imports only by name, when a command asks for one
    ("registry", {"algorithms"}),
    ("algorithms", {"dqn", "ppo", "policy", "presets"}),  # an algorithm, its deploy path, presets
    ("training", {"training", "export", "report"}),  # loops, runs, seeds; what reads runs
    ("tune", {"tune"}),
    ("dashboard", {"dashboard"}),
    ("api", {"ember_np"}),  # the public facade, ember_np/__init__.py
    ("cli", {"cli", "__main__"}),  # the command line: nothing imports it
]
# fmt: on

#: Upward module imports tolerated for now, each with its reason, as (importer, imported).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def unit(module: str) -> str:
    """``ember_np.dqn.heads.head`` -> ``dqn``; ``ember_np.tune`` -> ``tune``; the root
    package ``ember_np`` -> ``ember_np``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


LAYER_OF = {u: i for i, (_, units) in enumerate(LAYERS) for u in units}


def metadata_only(module: str) -> bool:
    """Whether every import of the root package in ``module`` takes dunder names only
    (``from ember_np import __version__``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "ember_np" for a in node.names):
            return False
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "ember_np":
            if not all(a.name.startswith("__") and a.name.endswith("__") for a in node.names):
                return False
    return True


def module_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every (importer, imported) module pair between two different units."""
    return {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if unit(m) != unit(t) and not (t == "ember_np" and metadata_only(m))
    }


def unit_graph(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for m, t in edges:
        graph.setdefault(unit(m), set()).add(unit(t))
        graph.setdefault(unit(t), set())
    return graph


def upward(edges: set[tuple[str, str]], layer_of: dict[str, int]) -> list[str]:
    """Each edge into a higher layer, as ``importer -> imported (layer -> layer)``."""
    names = [name for name, _ in LAYERS]
    return sorted(
        f"{m} -> {t} ({names[layer_of[unit(m)]]} -> {names[layer_of[unit(t)]]})"
        for m, t in edges
        if layer_of[unit(t)] > layer_of[unit(m)]
    )


EDGES = module_edges(GRAPH)


def test_every_unit_has_a_layer():
    units = {unit(m) for m in MODULES}
    missing = sorted(units - set(LAYER_OF))
    assert not missing, f"place these in LAYERS (tests/test_layers.py): {missing}"
    twice = [u for u in LAYER_OF if sum(u in us for _, us in LAYERS) > 1]
    assert not twice, twice


def test_no_import_goes_up_a_layer():
    found = upward(EDGES - set(ALLOWED_UPWARD), LAYER_OF)
    assert not found, "upward imports (see LAYERS in tests/test_layers.py): " + "; ".join(found)


def test_the_allowed_upward_imports_still_exist():
    """An entry whose import is gone hides nothing: delete it."""
    stale = sorted(set(ALLOWED_UPWARD) - EDGES)
    assert not stale, f"stale ALLOWED_UPWARD entries: {stale}"


def test_no_cycle_between_packages():
    found = cycles(unit_graph(EDGES - set(ALLOWED_UPWARD)))
    assert not found, "package import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_library_never_imports_the_command_line():
    bad = sorted(f"{m} -> {t}" for m, t in EDGES
                 if unit(t) == "cli" and unit(m) not in {"cli", "__main__"})  # fmt: skip
    assert not bad, bad


def test_the_generic_kernels_import_no_algorithm():
    """``nn`` (a second algorithm reuses it) imports nothing above the foundation."""
    bad = sorted(f"{m} -> {t}" for m, t in EDGES
                 if unit(m) == "nn" and LAYER_OF[unit(t)] > 0)  # fmt: skip
    assert not bad, bad


def test_the_checks_see_real_edges_and_catch_bad_ones():
    """Not vacuous: the graph has the edges the code has, and each rule fires on a
    made-up graph breaking it."""
    assert ("ember_np.dqn.learner.learn", "ember_np.nn.optim") in EDGES
    assert ("ember_np.dqn.checkpoint_format", "ember_np.checkpoint") in EDGES
    assert "dqn" in unit_graph(EDGES)["training"]  # training builds DQN agents
    fake = {("ember_np.nn.mlp", "ember_np.dqn.heads.head"), ("ember_np.dqn.x", "ember_np.nn.y")}
    assert upward(fake, LAYER_OF) == [
        "ember_np.nn.mlp -> ember_np.dqn.heads.head (nn -> algorithms)"
    ]
    assert cycles(unit_graph(fake)) == [["dqn", "nn", "dqn"]]
    assert metadata_only("ember_np.export")  # from ember_np import __version__
    assert not metadata_only("ember_np.cli.training")  # from ember_np import DqnAgent, ...
