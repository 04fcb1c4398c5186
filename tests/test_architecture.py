"""Static rules that keep the architecture's seams (issue 12), checked on the source.

1. No function or kernel in ``ember_np/`` takes more than 12 parameters: what
   travels together goes as one NamedTuple (NetState, ReplayState, ...).
2. No code reads or writes an underscore attribute of another module's
   instances. The rule, statically: an attribute access ``x._name`` (load,
   store or delete) in module M is allowed only when

   * ``x`` is ``self``, ``cls`` or ``type(self)``; or
   * ``_name`` is an attribute that a class defined in M sets on its instances
     (``self._name = ...``) or defines in its body, i.e. M accesses its own
     class's private state on another instance (``other.params`` in
     QNetwork.copy_from); or
   * ``x`` names a module M imported (or a name assigned such a module) and
     ``_name`` is one of that module's top-level names (a private kernel
     (rule 3 then reports it), or one of a NamedTuple's public ``_fields``,
     ``_replace``, ``_asdict``, ``_make``.

   Only attributes that some ember_np class defines are checked: the rule
   guards the boundaries between ember_np's own classes. (A third-party
   object's private member, such as Optuna's ``study._storage`` in tune.py,
   is a fragility against upstream releases, not a seam of this design.)

   So ``agent._net`` in trainer.py fails: ``_net`` is DqnAgent's, trainer.py
   defines no class with a ``_net`` attribute, and ``agent`` is not a module. The rule cannot see
   types: ``y._x`` passes in a module whose own class has an ``_x``, whatever
   ``y`` is. It is a guard against the trainer-reads-the-agent's-internals
   kind of coupling, not a type checker.
3. A leading underscore means private to its module: no ``from ember_np.x
   import _name`` and no ``module._name`` of another ember_np module (a private
   module such as ``ember_np._jit`` may be imported, its public names used).
4. No module is over 700 lines, and none is kept under it by a mixin: a class
   that a class of another module inherits is complete on its own (every
   attribute its methods read from ``self`` it, or its own bases, sets or
   defines). A class split across files to fit the cap (methods in one
   module reading state that a subclass in another sets up) is split by
   responsibility instead: a collaborator object the class holds.
5. Tests use the public API: no test reads another object's underscore
   attribute (``agent._counters``), imports an underscore name (``from
   ember_np.tune import _objective``) or names one in ``getattr``-like calls,
   except for the short, reasoned :data:`PRIVATE_READS_ALLOWED`. A kernel test
   may import a private module (``ember_np.nn._blas``, ``ember_np.envs._dispatch``)
   and use its public names.

The import graph (no cycle anywhere, imports inside functions included; the
library never imports the command line) is checked in ``tests/test_imports.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ember_np"
SOURCES = sorted(ROOT.rglob("*.py"))
MAX_PARAMETERS = 12
NAMEDTUPLE_API = {"_fields", "_replace", "_asdict", "_make", "_field_defaults"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> int:
    a = fn.args
    return (
        len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
        + (a.vararg is not None) + (a.kwarg is not None)
    )  # fmt: skip


def test_sources_found():
    names = {p.name for p in SOURCES}
    assert {"network.py", "agent.py", "trainer.py", "_fused.py"} <= names


def is_c_function(node: ast.AST) -> bool:
    """A ``@numba.cfunc``: its parameters are a C ABI's (nn/skinny's loops take
    ``cblas_sgemm``'s 14), not an API this project chose."""
    for dec in getattr(node, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute | ast.Name) and ast.unparse(target).endswith("cfunc"):
            return True
    return False


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_takes_more_than_12_parameters(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    too_many = [
        f"{getattr(node, 'name', 'lambda')} (line {node.lineno}): {parameter_count(node)}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        and parameter_count(node) > MAX_PARAMETERS
        and not is_c_function(node)
    ]
    assert not too_many, f"more than {MAX_PARAMETERS} parameters: {too_many}"


def own_private_attributes(tree: ast.Module) -> set[str]:
    """Underscore attributes the module's classes set on ``self`` or define in their body."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(stmt.name)
            elif isinstance(stmt, ast.Assign):
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.add(stmt.target.id)
    return {n for n in names if n.startswith("_")}


def imported_modules(tree: ast.Module, package: str) -> dict[str, types.ModuleType]:
    """Local names bound to modules by any import statement in the file."""
    found: dict[str, types.ModuleType] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = importlib.import_module(alias.name)
                else:
                    top = alias.name.split(".")[0]
                    found[top] = importlib.import_module(top)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            for alias in node.names:
                try:
                    module = importlib.import_module(f"{base}.{alias.name}")
                except ImportError:
                    continue
                found[alias.asname or alias.name] = module
    # A name assigned an imported module (``_kernels = network``, a lazy import
    # kept in a global) names that module too.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            if node.value.id in found:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = found[node.value.id]
    return found


def is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
        and is_self(node.args[0])
    )


def ember_np_private_attributes() -> set[str]:
    """Every underscore attribute some ember_np class defines."""
    names: set[str] = set()
    for source in SOURCES:
        names |= own_private_attributes(ast.parse(source.read_text(encoding="utf-8")))
    return names


EMBER_NP_PRIVATE = ember_np_private_attributes()


def foreign_private_accesses(path: Path, name: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own = own_private_attributes(tree)
    modules = imported_modules(tree, package)
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        if is_self(node.value) or attr in own or attr in NAMEDTUPLE_API:
            continue
        if attr not in EMBER_NP_PRIVATE:  # not an ember_np class's member
            continue
        if isinstance(node.value, ast.Name) and node.value.id in modules:
            if hasattr(modules[node.value.id], attr):
                continue
        bad.append(f"line {node.lineno}: {ast.unparse(node)}")
    return bad


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_underscore_attribute_of_another_modules_instances(path):
    bad = foreign_private_accesses(path)
    assert not bad, f"{module_name(path)} reaches into other objects' private state: {bad}"


def test_the_rule_catches_a_trainer_reading_agent_internals(tmp_path):
    """The rule is not vacuous: the coupling it exists for is reported."""
    source = (ROOT / "training" / "trainer.py").read_text(encoding="utf-8")
    bad = tmp_path / "trainer.py"
    bad.write_text(source + "\n\ndef peek(agent):\n    return agent._net, agent._counters[0]\n")
    assert {"_net", "_counters"} <= EMBER_NP_PRIVATE  # DqnAgent's
    found = foreign_private_accesses(bad, "ember_np.training.trainer")
    assert [f.split(": ")[1] for f in found] == ["agent._net", "agent._counters"]


# -- 3. Underscore means private to its module --------------------------------


def _module_of(base: str, name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(f"{base}.{name}")
    except ImportError:
        return None


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"], or None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def cross_module_underscore_names(path: Path, name: str | None = None) -> list[str]:
    """Every ``from ember_np.x import _name`` and ``module._name`` (another ember_np
    module's underscore name) in ``path``. Private modules (``ember_np._jit``,
    ``ember_np.envs._dispatch``) may be imported; only their public names used."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            if base.split(".")[0] != "ember_np":
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and _module_of(base, alias.name) is None:
                    bad.append(f"line {node.lineno}: from {base} import {alias.name}")
    modules = {
        local: module
        for local, module in imported_modules(tree, package).items()
        if module.__name__.split(".")[0] == "ember_np"
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.startswith("__"):
            continue
        chain = _dotted(node.value)
        if chain is None or chain[0] not in modules:
            continue
        obj: object = modules[chain[0]]
        for part in chain[1:]:
            obj = getattr(obj, part, None)
        # ``module._name`` is an offence unless ``_name`` is a private submodule
        if isinstance(obj, types.ModuleType) and _module_of(obj.__name__, attr) is None:
            bad.append(f"line {node.lineno}: {ast.unparse(node)}")
    return bad


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_uses_another_modules_underscore_names(path):
    bad = cross_module_underscore_names(path)
    assert not bad, f"{module_name(path)} uses other modules' private names: {bad}"


def test_the_underscore_rule_catches_imports_and_module_attributes(tmp_path):
    """Not vacuous: both spellings of reaching into another module are reported."""
    source = (ROOT / "training" / "trainer.py").read_text(encoding="utf-8")
    bad = tmp_path / "trainer.py"
    bad.write_text(
        source
        + "\n\nfrom ember_np.dqn.learner.network import _check_positive_float\n"
        + "from ember_np.dqn.learner import network as _nw\nimport ember_np.dqn.replay\n\n\n"
        + "def peek():\n    return _nw._layer_sizes, ember_np.dqn.learner.network._NONE\n"
    )
    found = cross_module_underscore_names(bad, "ember_np.training.trainer")
    assert [f.split(": ")[1] for f in found] == [
        "from ember_np.dqn.learner.network import _check_positive_float",
        "_nw._layer_sizes",
        "ember_np.dqn.learner.network._NONE",
    ]


# -- 4. Modules a reader can hold in mind ------------------------------------------
MAX_MODULE_LINES = 700


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_700_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines: split it by concern "
        f"(at most {MAX_MODULE_LINES})"
    )


def module_classes(paths: list[tuple[str, Path]]) -> dict[type, ast.ClassDef]:
    """Each top-level class of the given (module name, file) pairs, with its source."""
    found: dict[type, ast.ClassDef] = {}
    for name, path in paths:
        if name.endswith("__main__"):  # (running it is the command line)
            continue
        module = importlib.import_module(name)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
            if isinstance(cls, type) and cls.__module__ == name:
                found[cls] = node
    return found


def self_attributes(node: ast.ClassDef, ctx: type[ast.expr_context]) -> set[str]:
    """Attributes the class's code reads (``ast.Load``) or sets (``ast.Store``) on
    ``self`` or ``cls``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ctx)
        and isinstance(n.value, ast.Name)
        and n.value.id in ("self", "cls")
    }


def mixins_across_modules(classes: dict[type, ast.ClassDef]) -> list[str]:
    """Every class inherited by a class of another module that reads attributes from
    ``self`` which neither it nor its bases set or define (so only the subclass can
    provide them: a mixin), as "subclass <- base: attributes"."""
    bad = []
    for cls in classes:
        for base in cls.__mro__[1:]:
            if base not in classes or base.__module__ == cls.__module__:
                continue
            sets = set().union(*(self_attributes(classes[k], ast.Store)
                                 for k in base.__mro__ if k in classes))  # fmt: skip
            missing = sorted(
                attr
                for attr in self_attributes(classes[base], ast.Load)
                if attr not in sets and not hasattr(base, attr)
            )
            if missing:
                where = f"{base.__module__}.{base.__qualname__}"
                bad.append(f"{cls.__module__}.{cls.__qualname__} <- {where}: {missing}")
    return bad


def test_no_class_is_split_across_modules_by_a_mixin():
    classes = module_classes([(module_name(p), p) for p in SOURCES])
    inherited = {
        base.__qualname__
        for cls in classes
        for base in cls.__mro__[1:]
        if base in classes and base.__module__ != cls.__module__
    }
    assert {"CircularBuffer", "Reader", "LoopCallback"} <= inherited  # the rule sees them
    bad = mixins_across_modules(classes)
    assert not bad, (
        f"classes inherit state-reading mixins from other modules: {bad}. Split the class "
        "by responsibility (a collaborator object it holds), not across files"
    )


def test_the_mixin_rule_catches_a_class_split_across_files(tmp_path, monkeypatch):
    """Not vacuous: a QNetwork-style split (methods in one module reading what a
    subclass in another sets) is reported; a complete base class is not."""
    (tmp_path / "probe_io.py").write_text(
        "class StateMethods:\n"
        "    _sizes: tuple\n\n"
        "    def state_dict(self):\n"
        "        return {'sizes': self._sizes, 'w': self.weights, 'n': self.count}\n\n"
        "    @property\n    def count(self):\n        return 1\n\n\n"
        "class Complete:\n"
        "    def __init__(self):\n        self._ready = True\n\n"
        "    def ready(self):\n        return self._ready and self.kind\n\n"
        "    kind = 'complete'\n"
    )
    (tmp_path / "probe_net.py").write_text(
        "from probe_io import Complete, StateMethods\n\n\n"
        "class Net(StateMethods):\n"
        "    def __init__(self):\n        self._sizes, self.weights = (1,), []\n\n\n"
        "class Fine(Complete):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = [(name, tmp_path / f"{name}.py") for name in ("probe_io", "probe_net")]
    assert mixins_across_modules(module_classes(paths)) == [
        "probe_net.Net <- probe_io.StateMethods: ['_sizes', 'weights']"
    ]


# -- 5. Tests use the public API ---------------------------------------------------
TESTS = sorted(Path(__file__).resolve().parent.glob("*.py"))
ATTRIBUTE_CALLS = {"getattr", "hasattr", "setattr", "delattr"}  # also monkeypatch.setattr
#: (test file, underscore name) -> why the test may name it.
PRIVATE_READS_ALLOWED = {
    ("test_docs.py", "_actions"): (
        "argparse's own list of a parser's arguments and subcommands: argparse has no "
        "public way to list them, and the CLI reference test checks each one is on the page"
    ),
    ("test_jit.py", "_cache"): (
        "numba's Dispatcher keeps its disk cache there (a NullCache when caching is off) "
        "and numba has no public way to ask; the attribute is numba's, not ember_np's"
    ),
    ("conftest.py", "_split_scope"): (
        "pytest-xdist's scheduler hook: the scope of a test id, which a scheduler "
        "overrides to group tests; the method is pytest-xdist's, not ember_np's"
    ),
    ("test_agent.py", "_adam_m"): (
        "hasattr asserting that a policy carries no optimiser state: it reads nothing"
    ),
}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def names_a_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def private_reads_in_test(path: Path) -> list[str]:
    """Every underscore name of another object or module that the test file at ``path``
    reads, imports or passes to getattr-like calls (``self._x`` and ``cls._x`` of the
    test's own classes, dunder names, NamedTuple's ``_replace``/``_asdict``/``_fields``/
    ``_make`` and private submodules such as ``ember_np.nn._blas`` excepted)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # local names bound to ember_np modules: ``ember_np.x._y`` may name a private module
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ember_np":
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else "ember_np"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ember_np"):
            for alias in node.names:
                if names_a_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []  # (line, underscore name, the code that names it)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            if is_self(node.value):
                continue
            chain = _dotted(node)
            if chain and chain[0] in modules:
                if names_a_module(".".join([modules[chain[0]], *chain[1:]])):
                    continue  # a private module, such as ember_np._memory
            found.append((node.lineno, node.attr, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if is_private(alias.name) and not names_a_module(f"{node.module}.{alias.name}"):
                    text = f"from {node.module} import {alias.name}"
                    found.append((node.lineno, alias.name, text))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func, key = node.func, node.args[1]
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if (
                called in ATTRIBUTE_CALLS
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and is_private(key.value)
            ):
                found.append((node.lineno, key.value, ast.unparse(node)))
    return [
        f"line {line}: {text}"
        for line, name, text in sorted(found)
        if (path.name, name) not in PRIVATE_READS_ALLOWED
    ]


@pytest.mark.parametrize("path", TESTS, ids=lambda p: p.name)
def test_tests_use_the_public_api(path):
    bad = private_reads_in_test(path)
    assert not bad, (
        f"tests/{path.name} reaches into private state: {bad}. Use the public API "
        "(params, state_dict(), kernel_state, ...); a kernel test may import a private "
        "module and use its public names; else add a reasoned PRIVATE_READS_ALLOWED entry"
    )


def test_the_test_rule_catches_private_reads_and_allows_private_modules(tmp_path):
    """Not vacuous: each spelling of a private read is reported, private modules are not."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import ember_np._memory\nimport ember_np.nn._blas as blas\n"
        "from ember_np.envs import _dispatch\nfrom ember_np.tune import _say\n\n\n"
        "class Local:\n    def f(self):\n        return self._own\n\n\n"
        "def test_peek(agent, monkeypatch):\n"
        "    ember_np._memory.available_memory()\n    blas.gemm\n    _dispatch.env_step\n"
        "    batch._replace(obs=1), agent.__class__\n"
        "    agent._counters, agent.online._params\n"
        "    getattr(agent, '_net'), monkeypatch.setattr(agent, '_out', 0)\n"
    )
    assert [f.split(": ", 1)[1] for f in private_reads_in_test(probe)] == [
        "from ember_np.tune import _say",
        "agent._counters",
        "agent.online._params",
        "getattr(agent, '_net')",
        "monkeypatch.setattr(agent, '_out', 0)",
    ]


def test_docs_architecture_names_every_module():
    """The Architecture page's module table (docs/reference/architecture.md) has a row
    naming each module of ember_np/ (a cell may name several: ``envs/_cartpole.py,
    _acrobot.py``, or ``dashboard/server.py, logs.py``)."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "reference" / "architecture.md").read_text()
    section = page.split("## Where each concept lives", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cell = row.split("|")[1]
        folder = ""
        for name in re.findall(r"`([\w/.]+\.py)`|(?<![\w/])([\w]+\.py)", cell):
            path = name[0] or name[1]
            if "/" in path:
                folder = path.rsplit("/", 1)[0] + "/"
            elif folder:
                path = folder + path
            named.add(path)
    package = root / "ember_np"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    missing = sorted(modules - named)
    assert not missing, f"modules missing from the Architecture page's table: {missing}"
