"""Writes docs/api.md, the API reference, from the docstrings of sok_lite's public names.

    python scripts/gen_api_docs.py           # rewrite docs/api.md
    python scripts/gen_api_docs.py --check   # exit 1 if docs/api.md is out of date

The public names are those of `sok_lite.__all__`, `sok_lite.keras.__all__`,
`sok_lite.optimizers.__all__` and `sok_lite.sok_v1.__all__`. A class also lists the public
methods and properties that sok_lite defines on it and documents (framework overrides without
a docstring of their own, such as a layer's `call`, are left out). Google-style docstrings
become Markdown: sections (Args, Returns, Raises, ...) become bullet lists and doctests become
code blocks.
"""

import argparse
import dataclasses
import inspect
import os
import pathlib
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import sok_lite  # noqa: E402
from sok_lite.tables.table_kind import TableKind  # noqa: E402

OUTPUT = REPO / "docs" / "api.md"
COMMAND = "python scripts/gen_api_docs.py"
# Sections whose entries are "name: description".
ENTRY_SECTIONS = ("Args", "Arguments", "Attributes", "Call args", "Raises")
TEXT_SECTIONS = ("Returns", "Yields", "Note", "Notes", "Example", "Examples")
# Not formatted by ruff (which reformats `pycon` blocks), so doctests stay as written.
DOCTEST_FENCE = "```python-console"


@dataclasses.dataclass(frozen=True)
class Section:
    """One module of the public API, the path users import it by, and the names it exports."""

    name: str  # sok_lite.optimizers, not the module's own sok_lite.optim.optimizers
    module: object
    names: list


def public_sections() -> list[Section]:
    """The modules of the public API, each with its exported names, in reading order."""
    documented_elsewhere = {"keras", "optimizers", "__version__"}
    return [
        Section(
            "sok_lite", sok_lite, [n for n in sok_lite.__all__ if n not in documented_elsewhere]
        ),
        Section("sok_lite.optimizers", sok_lite.optimizers, list(sok_lite.optimizers.__all__)),
        Section("sok_lite.keras", sok_lite.keras, list(sok_lite.keras.__all__)),
        Section("sok_lite.sok_v1", sok_lite.sok_v1, list(sok_lite.sok_v1.__all__)),
    ]


def public_objects():
    """(qualified name, object) of every exported name, re-exports included."""
    for section in public_sections():
        for name in section.names:
            yield f"{section.name}.{name}", getattr(section.module, name)


def own_members(cls) -> list[tuple[str, object]]:
    """Public methods and properties that sok_lite classes of cls's MRO define (those only
    inherited from TF or Keras are theirs to document), by name."""
    # The TableKind interface is described once, in docs/design.md, not under each table.
    interface = set(vars(TableKind)) if issubclass(cls, TableKind) else set()
    members = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("sok_lite"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in interface:
                continue
            if isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(
                value
            ):
                members[name] = value
    return sorted(members.items())


def undocumented_names() -> list[str]:
    """Exported names without a docstring of their own."""
    return [name for name, obj in public_objects() if not (getattr(obj, "__doc__", "") or "")]


# --- signatures ---------------------------------------------------------------------------


def _short_paths(text: str) -> str:
    """`keras.src.initializers.initializer.Initializer` -> `Initializer`: module paths of
    annotations are implementation details (and change between releases)."""
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Z]\w*)", r"\1", text)


class _Annotation:
    """A postponed annotation (a string) shown as written, without the quotes of its repr."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _unquoted(annotation):
    return _Annotation(annotation) if isinstance(annotation, str) else annotation


def signature(obj, name: str) -> str | None:
    """`name(parameters) -> return`, or None when there is none to show."""
    target = obj
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return None
        # TF variables have a metaclass whose __call__ hides __init__'s parameters.
        target = obj.__init__
    elif isinstance(obj, property):
        return None
    elif isinstance(obj, (classmethod, staticmethod)):
        target = obj.__func__
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    params = [p.replace(annotation=_unquoted(p.annotation)) for p in params]
    sig = sig.replace(parameters=params, return_annotation=_unquoted(sig.return_annotation))
    if inspect.isclass(obj):
        sig = sig.replace(return_annotation=inspect.Signature.empty)
    return name + _short_paths(str(sig))


# --- docstrings to Markdown ---------------------------------------------------------------


def _escape(text: str) -> str:
    """Escapes what Markdown would take for HTML tags (`<name`), outside inline code."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", parts[i])
    return "`".join(parts)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _section_entries(lines: list[str]) -> list[str]:
    """The indented body of an entry section as one bullet per entry."""
    base = min(_indent(line) for line in lines if line.strip())
    entries: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        if _indent(line) == base:
            name, sep, rest = line.strip().partition(":")
            entries.append(f"- `{name}`:{_escape(rest)}" if sep else f"- {_escape(name)}")
        else:
            entries[-1] += " " + _escape(line.strip())
    return entries


def _section_text(lines: list[str]) -> list[str]:
    """The indented body of a text section, as one paragraph per block of lines."""
    paragraphs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(_escape(" ".join(current)))
            current = []
    return paragraphs


def docstring_markdown(doc: str) -> list[str]:
    """Markdown lines for a Google-style docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        header = line.strip().rstrip(":")
        if (
            line.endswith(":")
            and not line.startswith(" ")
            and header in (ENTRY_SECTIONS + TEXT_SECTIONS)
        ):
            body = []
            i += 1
            # The section runs while lines are indented (blank lines between them included).
            while i < len(lines) and (
                lines[i].startswith(" ")
                or (not lines[i].strip() and i + 1 < len(lines) and lines[i + 1].startswith(" "))
            ):
                body.append(lines[i])
                i += 1
            convert = _section_entries if header in ENTRY_SECTIONS else _section_text
            out += ["", f"**{header}:**", ""] + convert(body) + [""]
            continue
        if line.startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += ["", DOCTEST_FENCE] + block + ["```", ""]
            continue
        out.append(_escape(line) if not line.startswith("    ") else line)
        i += 1
    return _squeeze_blank_lines(out)


def _squeeze_blank_lines(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


# --- the document -------------------------------------------------------------------------


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def heading_anchors(sections: list[Section]) -> dict[str, str]:
    """The anchor GitHub gives each module and name heading: its slug, with -1, -2, ... after
    a slug already taken (sok_lite.init and sok_lite.Init share one)."""
    anchors, taken = {}, {}
    for section in sections:
        module = section.name
        for heading in [module] + [f"{module}.{name}" for name in section.names]:
            slug = _slug(heading)
            anchors[heading] = slug if slug not in taken else f"{slug}-{taken[slug]}"
            taken[slug] = taken.get(slug, 0) + 1
    return anchors


def home_names() -> dict[int, str]:
    """For each exported object, the one name it is described under: that in the public
    module closest to where it is defined (sok_lite.sok_v1.Init rather than sok_lite.Init),
    else the first (filter_variables rather than its alias)."""
    homes: dict[int, tuple[int, str]] = {}
    real = {section.name: section.module.__name__ for section in public_sections()}
    for qualified, obj in public_objects():
        module = real[qualified.rsplit(".", 1)[0]]
        defined_in = getattr(obj, "__module__", "") or ""
        closeness = len(module) if (defined_in + ".").startswith(module + ".") else -1
        if id(obj) not in homes or closeness > homes[id(obj)][0]:
            homes[id(obj)] = (closeness, qualified)
    return {key: qualified for key, (_, qualified) in homes.items()}


def _entry(qualified: str, obj, homes: dict[int, str], anchors: dict[str, str]) -> list[str]:
    """The lines for one exported name."""
    lines = [f"### {qualified}", ""]
    home = homes.get(id(obj), qualified)
    if home != qualified:
        return lines + [f"The same object as [`{home}`](#{anchors[home]}).", ""]
    sig = signature(obj, qualified)
    if sig:
        lines += [f"`{sig}`", ""]
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        base = obj.__mro__[1].__name__
        lines += [f"An exception (subclass of `{base}`).", ""]
    lines += docstring_markdown(obj.__doc__ or "") + [""]
    if inspect.isclass(obj) and issubclass(obj, TableKind):
        lines += [
            "Implements `sok_lite.tables.table_kind.TableKind`, the questions lookups, optimizers, "
            "checkpoints and serving ask of a table: see [Table kinds](design.md#table-kinds).",
            "",
        ]
    if inspect.isclass(obj):
        for name, member in own_members(obj):
            # The member's own docstring: inspect.getdoc would inherit TF's or Keras'.
            doc = getattr(member, "__func__", member).__doc__
            if not doc:
                continue
            kind = "property" if isinstance(member, property) else "method"
            member_sig = signature(member, name) if kind == "method" else name
            lines += [f"#### `{member_sig}` ({kind})", ""] + docstring_markdown(doc) + [""]
    return lines


def render() -> str:
    """The whole of docs/api.md."""
    sections = public_sections()
    anchors = heading_anchors(sections)
    lines = [
        "# API reference",
        "",
        f"<!-- Generated from the docstrings by scripts/gen_api_docs.py: edit the docstrings,"
        f" then run `{COMMAND}`. -->",
        "",
        f"sok_lite {sok_lite.__version__}. `import sok_lite as sok`; the names below are those "
        "of `sok.__all__`, `sok.optimizers`, `sok.keras` and `sok.sok_v1`. Guides: "
        "[getting started](getting_started.md), [user guide](user_guide.md).",
        "",
    ]
    for section in sections:
        module = section.name
        names = ", ".join(f"[`{n}`](#{anchors[f'{module}.{n}']})" for n in section.names)
        lines.append(f"- [`{module}`](#{anchors[module]}): {names}")
    lines.append("")
    homes = home_names()
    for section in sections:
        module = section.name
        lines += [f"## {module}", ""] + docstring_markdown(section.module.__doc__ or "") + [""]
        for name in section.names:
            lines += _entry(f"{module}.{name}", getattr(section.module, name), homes, anchors)
    return "\n".join(_squeeze_blank_lines(lines)) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether it is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.exists() and OUTPUT.read_text() == text
        print(f"{OUTPUT.relative_to(REPO)} is {'up to date' if current else 'out of date'}")
        return 0 if current else 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
