"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs in a fresh Python process (cwd: a temporary directory, PYTHONPATH: the
repository root), with a timeout. An HTML comment on the line(s) just above a fence changes
how its block runs:

- `<!-- doc-test: continues -->`: the block continues the previous ```python block of the same
  file. It runs in the same process, after that block (and whatever that one continues), so
  a page can build one example over several blocks. The block's first line is a comment
  saying what it continues, for readers.
- `<!-- doc-test: horovod -np 2 -->`: the block (and the blocks continuing it) runs on 2
  ranks under `horovodrun -np 2 -H localhost:2 --gloo` with this Python; skipped where
  Horovod is not installed.
- `<!-- doc-test: fragment -->`: the block is not run (a signature listing, or a piece of a
  function shown out of context). Keep these rare.

Directives can be combined in one comment, separated by commas. Blocks of other languages
(```sh, ```python-console, ...) are not run here: docs/api.md's ```python-console examples are
the docstrings' doctests, which `pytest --doctest-modules sok_lite` runs.
"""

import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from tests.distributed.launcher import JOB_MARKER, horovodrun, tracked_job, wait_until_gone

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CHAIN_TIMEOUT_S = 240

FENCE_OPEN = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^\s`]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<directives>.*?)\s*-->\s*$")
HOROVOD = re.compile(r"^horovod -np (?P<np>\d+)$")


@dataclasses.dataclass
class Block:
    file: str  # relative to the repository root
    line: int  # line of the block's first code line (after the fence)
    code: str
    continues: bool = False
    fragment: bool = False
    horovod_np: int | None = None
    errors: list = dataclasses.field(default_factory=list)  # malformed markers

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def parse_blocks(path: pathlib.Path) -> list[Block]:
    """The ```python blocks of a Markdown file, with their doc-test directives."""
    rel = path.relative_to(REPO).as_posix()
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, lang = opened.group("indent"), opened.group("lang")
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if lang == "python":
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[i + 1 : end]
            ]
            block = Block(rel, i + 2, "\n".join(body) + "\n")
            apply_markers(block, lines, i)
            blocks.append(block)
        i = end + 1
    return blocks


def apply_markers(block: Block, lines: list[str], fence: int) -> None:
    """Reads the doc-test comments on the lines just above the fence (blank lines between
    them and the fence are allowed)."""
    k = fence - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    while k >= 0 and (marker := MARKER.match(lines[k])):
        for directive in (d.strip() for d in marker.group("directives").split(",")):
            if directive == "continues":
                block.continues = True
            elif directive == "fragment":
                block.fragment = True
            elif horovod := HOROVOD.match(directive):
                block.horovod_np = int(horovod.group("np"))
            else:
                block.errors.append(f"unknown doc-test directive {directive!r}")
        k -= 1


@dataclasses.dataclass
class Chain:
    """Blocks that run one after the other in one process (or one job of ranks)."""

    blocks: list[Block]

    @property
    def id(self) -> str:
        return self.blocks[0].id

    @property
    def horovod_np(self) -> int | None:
        return self.blocks[0].horovod_np


def build_chains() -> tuple[list[Block], dict[str, Chain]]:
    """All blocks, and the chain each runnable block belongs to (by block id)."""
    all_blocks, chain_of = [], {}
    for path in DOC_FILES:
        current = None
        for block in parse_blocks(path):
            all_blocks.append(block)
            if block.fragment:
                if block.continues or block.horovod_np:
                    block.errors.append("a fragment is not run: it cannot continue or launch")
                continue
            if block.continues:
                if current is None:
                    block.errors.append("continues, but no earlier runnable block in this file")
                    continue
                if block.horovod_np not in (None, current.horovod_np):
                    block.errors.append("a continuation runs on the launcher of its chain")
                current.blocks.append(block)
            else:
                current = Chain([block])
            chain_of[block.id] = current
    return all_blocks, chain_of


ALL_BLOCKS, CHAIN_OF = build_chains()

DRIVER = """\
import json, sys
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for index, (filename, line, code) in enumerate(blocks):
    print(f"\\n@@doc-block-start {index}@@", flush=True)
    exec(compile("\\n" * (line - 1) + code, filename, "exec"), namespace)
    print(f"\\n@@doc-block-ok {index}@@", flush=True)
"""


@dataclasses.dataclass
class ChainResult:
    returncode: int | None  # None: timed out
    output: str
    ranks: int

    def ok(self, index: int) -> bool:
        return self.output.count(f"@@doc-block-ok {index}@@") >= self.ranks

    def started(self, index: int) -> bool:
        return f"@@doc-block-start {index}@@" in self.output


_results: dict[str, ChainResult] = {}


def run_chain(chain: Chain, workdir: pathlib.Path) -> ChainResult:
    workdir.mkdir(parents=True, exist_ok=True)
    blocks = [[str(REPO / b.file), b.line, b.code] for b in chain.blocks]
    (workdir / "_blocks.json").write_text(json.dumps(blocks))
    (workdir / "_driver.py").write_text(DRIVER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH")] if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, "_driver.py", "_blocks.json"]
    ranks = 1
    if chain.horovod_np:
        ranks = chain.horovod_np
        env.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", "60")
        command = [horovodrun(), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo", *command]
    with tracked_job() as marker:
        env[JOB_MARKER] = marker
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=CHAIN_TIMEOUT_S)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            returncode = None
        wait_until_gone(marker, seconds=5)
    return ChainResult(returncode, output, ranks)


def chain_result(chain: Chain, tmp_path_factory) -> ChainResult:
    if chain.id not in _results:
        if chain.horovod_np:
            try:
                horovodrun()
            except RuntimeError as err:
                pytest.skip(str(err))
        name = re.sub(r"[^A-Za-z0-9]+", "_", chain.id)
        _results[chain.id] = run_chain(chain, tmp_path_factory.mktemp(name))
    return _results[chain.id]


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_doc_block_runs(block, tmp_path_factory):
    assert not block.errors, f"{block.id}: " + "; ".join(block.errors)
    if block.fragment:
        pytest.skip("marked <!-- doc-test: fragment -->")
    chain = CHAIN_OF[block.id]
    result = chain_result(chain, tmp_path_factory)
    index = chain.blocks.index(block)
    if result.ok(index):
        return
    tail = result.output[-6000:]
    if result.returncode is None:
        pytest.fail(f"{chain.id} and its continuations ran past {CHAIN_TIMEOUT_S} s:\n{tail}")
    if not result.started(index):
        earlier = next(b for i, b in enumerate(chain.blocks) if not result.ok(i))
        pytest.fail(f"not run: the block it continues, {earlier.id}, failed")
    pytest.fail(f"{block.id} failed (exit code {result.returncode}):\n{tail}")


def test_blocks_are_found():
    files = {b.file for b in ALL_BLOCKS}
    assert {"README.md", "docs/user_guide.md", "docs/getting_started.md"} <= files
    assert len(ALL_BLOCKS) > 20


def test_continuations_say_what_they_continue():
    silent = [b.id for b in ALL_BLOCKS if b.continues and not b.code.startswith("# continues")]
    assert silent == [], "start a continuing block with a '# continues ...' comment"


def test_fragments_are_rare():
    fragments = [b.id for b in ALL_BLOCKS if b.fragment]
    assert len(fragments) <= 3, fragments


def test_python_blocks_use_the_python_fence():
    """A Python block under another name (```py, ```python3) would escape this test; only
    docs/api.md's generated doctests use ```python-console."""
    wrong = []
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            opened = FENCE_OPEN.match(line)
            if not opened:
                continue
            lang = opened.group("lang")
            allowed = lang == "python" or not lang.startswith("py")
            if lang == "python-console":
                allowed = path.name == "api.md"
            if not allowed:
                wrong.append(f"{path.relative_to(REPO)}:{number} ```{lang}")
    assert wrong == []
