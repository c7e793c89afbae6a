"""The strict modules of the mypy configuration keep their escapes few: at most ESCAPE_BUDGET
`# type: ignore[...]`, explicit `Any` and `typing.cast` in all, each with a reason comment on
its line or the line above (docs/design.md, "Types")."""

import ast
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
ESCAPE_BUDGET = 10


def strict_modules() -> list[pathlib.Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    (strict,) = [o for o in config if o.get("disallow_untyped_defs")]
    paths = []
    for name in strict["module"]:
        base = ROOT / name.removesuffix(".*").replace(".", "/")
        if name.endswith(".*"):
            paths += sorted(base.rglob("*.py"))
        elif base.is_dir():
            paths.append(base / "__init__.py")
        else:
            paths.append(base.with_suffix(".py"))
    return paths


def escapes(path: pathlib.Path) -> list[int]:
    """Lines of `path` with an escape: a type: ignore comment, a use of the name Any, a cast()."""
    source = path.read_text()
    lines = {n for n, line in enumerate(source.splitlines(), 1) if "# type: ignore" in line}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "Any":
            lines.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "cast":
                lines.add(node.lineno)
    return sorted(lines)


def has_reason(lines: list[str], n: int) -> bool:
    here, above = lines[n - 1], lines[n - 2] if n > 1 else ""
    own_comment = re.sub(r"# type: ignore\[[\w-]+\]", "", here).partition("#")[2].strip()
    return bool(own_comment) or above.strip().startswith("#")


def test_the_strict_modules_exist():
    missing = [str(p.relative_to(ROOT)) for p in strict_modules() if not p.is_file()]
    assert not missing, f"strict modules named in pyproject.toml that do not exist: {missing}"


def test_escapes_stay_within_the_budget_and_each_says_why():
    found, unexplained = [], []
    for path in strict_modules():
        lines = path.read_text().splitlines()
        for n in escapes(path):
            where = f"{path.relative_to(ROOT)}:{n}"
            found.append(where)
            if not has_reason(lines, n):
                unexplained.append(where)
    assert len(found) <= ESCAPE_BUDGET, f"{len(found)} type escapes: {found}"
    assert not unexplained, f"type escapes without a reason comment: {unexplained}"
