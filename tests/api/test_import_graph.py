"""No two sok_lite modules import each other, directly or through a longer chain.

Every module under sok_lite/ is parsed with `ast`; an edge A -> B is any import of B in A,
at module level or inside a function: `import sok_lite.x`, `from sok_lite.x import y`,
`from sok_lite import x` (an edge to sok_lite.x when x is a submodule, else to the package)
and relative imports. The test fails on any cycle and prints it.

Package `__init__` modules re-export their submodules, so an edge into a package's
`__init__` from a module inside that package would close a cycle through the re-export.
The rule: edges into `sok_lite/__init__.py` and `sok_lite/keras/__init__.py` are ignored,
and a separate test checks that no submodule imports either package root (`import sok_lite`,
`from sok_lite import <name that is not a submodule>`, the same for `sok_lite.keras`), which
makes ignoring them sound. Other packages' `__init__` (sok_lite.comm, sok_lite.ops,
sok_lite.sok_v1) are ordinary nodes.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sok_lite"
ROOTS = ("sok_lite", "sok_lite.keras")  # re-exporting package roots, see the docstring


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
