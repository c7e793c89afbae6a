"""No two sok_lite modules import each other, directly or through a longer chain.

Every module under sok_lite/ is parsed with `ast`; an edge A -> B is any import of B in A,
at module level or inside a function: `import sok_lite.x`, `from sok_lite.x import y`,
`from sok_lite import x` (an edge to sok_lite.x when x is a submodule, else to the package)
and relative imports. The test fails on any cycle and prints it.

Package `__init__` modules re-export their submodules, so an edge into a package's
`__init__` from a module inside that package would close a cycle through the re-export.
The rule: edges into `sok_lite/__init__.py` and `sok_lite/keras/__init__.py` are ignored,
and a separate test checks that no submodule imports either package root (`import sok_lite`,
`from sok_lite import <name that is not a submodule>`, the same for `sok_lite.keras` and
`sok_lite.memory`), which makes ignoring them sound. Other packages' `__init__` (sok_lite.comm,
sok_lite.ops, sok_lite.tables, ...) are ordinary nodes.

The layers (docs/design.md, "Package layout"): no module imports a module of a higher layer,
except the edges of ALLOWED_UPWARD.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sok_lite"
ROOTS = ("sok_lite", "sok_lite.keras", "sok_lite.memory")  # re-exporting roots, see the docstring


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_package(name: str, modules: dict) -> bool:
    return modules[name].name == "__init__.py"


def _imports(name: str, modules: dict) -> set[str]:
    """The sok_lite modules that module `name` imports (anywhere in its body)."""
    tree = ast.parse(modules[name].read_text(), str(modules[name]))
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in modules else module)
    edges = set()
    for target in targets:
        # `import sok_lite.a.b` names the innermost sok_lite module that exists.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            edges.add(target)
    return edges


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, modules) for name in modules}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in ROOTS:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_submodules_do_not_import_their_package_root():
    graph = _graph()
    offenders = [
        f"{name} imports {root}"
        for name, targets in graph.items()
        for root in ROOTS
        if root in targets and name.startswith(root + ".")
    ]
    assert not offenders, offenders


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# Bottom to top. A module's layer is that of the longest prefix listed; private helpers at the
# package root (sok_lite._loader, ...) are in the bottom layer, the package root and the module
# paths kept from the flat layout (sok_lite.checkpoint, sok_lite.storage, ...) in the top one.
LAYERS = (
    ("sok_lite.ops", "sok_lite.comm", "sok_lite._"),
    ("sok_lite.tables",),
    ("sok_lite.lookup", "sok_lite.optim"),
    ("sok_lite.io", "sok_lite.memory"),
    ("sok_lite.keras", "sok_lite.compat", "sok_lite"),
)

# Upward edges not removed yet, each named so that it stays visible. None: a table asks what it
# needs of an optimizer through tables.table_kind.optimizer_state, which sok_lite.optim
# registers, and SOK's constructor and names of a hash table come from compat.sok2_dynamic.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _layer(name: str) -> int:
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = name == prefix or name.startswith(prefix + ".")
            if prefix.endswith("_"):
                matches = name.startswith(prefix)
            if matches and len(prefix) > best:
                best, layer = len(prefix), i
    assert layer is not None, f"{name} is in no layer"
    return layer


def _upward_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if target not in ROOTS and _layer(target) > _layer(name)
    }


def test_no_module_imports_a_higher_layer():
    upward = _upward_edges(_graph())
    unexpected = sorted(upward - ALLOWED_UPWARD)
    assert not unexpected, "imports of a higher layer: " + ", ".join(
        f"{a} -> {b}" for a, b in unexpected
    )
    # An allowed edge that is gone comes off the list.
    assert not ALLOWED_UPWARD - upward, sorted(ALLOWED_UPWARD - upward)


def test_tables_import_nothing_that_uses_them():
    """A table knows no lookup, optimizer, checkpoint, serving, planner, Keras or SOK name:
    those register what they need with the tables (tables.table_kind.register_optimizer_state,
    tables.dynamic.register_multi_rank_read) or ask the TableKind interface."""
    users = ("lookup", "optim", "io", "memory", "keras", "compat")
    offenders = sorted(
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if name.startswith("sok_lite.tables.")
        for target in targets
        if target.partition(".")[2].split(".")[0] in users or _layer(target) > _layer(name)
    )
    assert not offenders, offenders


def test_the_layers_are_what_the_design_says():
    assert _layer("sok_lite._loader") == _layer("sok_lite.ops.lookup_ops") == 0
    assert _layer("sok_lite.comm.shards") == 0
    assert _layer("sok_lite.tables.variable") == 1
    assert _layer("sok_lite.lookup.sparse") == _layer("sok_lite.optim.slots") == 2
    assert _layer("sok_lite.io.checkpoint") == _layer("sok_lite.memory.plan") == 3
    assert _layer("sok_lite.keras.layers") == _layer("sok_lite.compat.sok2") == 4
    assert _layer("sok_lite.checkpoint") == _layer("sok_lite") == 4
    assert _upward_edges({"sok_lite.tables.x": {"sok_lite.io.y"}, "sok_lite.io.y": set()}) == {
        ("sok_lite.tables.x", "sok_lite.io.y")
    }


def test_package_size():
    """No module over 500 lines, no folder with more than 12 modules."""
    long = [
        f"{path.relative_to(PACKAGE.parent)}: {n} lines"
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 500
    ]
    assert not long, long
    folders = {}
    for path in PACKAGE.rglob("*.py"):
        folders.setdefault(path.parent, []).append(path)
    crowded = [
        f"{d.relative_to(PACKAGE.parent)}: {len(m)}" for d, m in folders.items() if len(m) > 12
    ]
    assert not crowded, crowded
