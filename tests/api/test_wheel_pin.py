"""scripts/build_wheel.py's pin(): a wheel renamed for one TensorFlow minor stays a valid wheel
(version, dist-info folder, RECORD hashes and file name agree) and requires that minor. The
whole `make wheel-check` (build, auditwheel, install into a bare venv, smoke subset) is run by
hand and by the version matrix (docs/install.md, "Wheels"): it needs the package registry."""

import base64
import hashlib
import pathlib
import runpy
import zipfile

import pytest

from tests.module_from_file import module_from_file

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def build_wheel():
    return module_from_file(ROOT / "scripts" / "build_wheel.py", "build_wheel")


def _plain_wheel(path: pathlib.Path) -> pathlib.Path:
    wheel = path / "sok_lite-0.1.0-cp311-cp311-linux_x86_64.whl"
    files = {
        "sok_lite/__init__.py": b"x = 1\n",
        "sok_lite-0.1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: sok_lite\nVersion: 0.1.0\nRequires-Dist: numpy\n\n"
            b"# sok_lite\nVersion: 0.1.0 in the description stays as it is.\n"
        ),
        "sok_lite-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n",
        "sok_lite-0.1.0.dist-info/RECORD": b"stale",
    }
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
    return wheel


def test_a_pinned_wheel_names_and_requires_its_tensorflow_minor(build_wheel, tmp_path):
    requirement = runpy.run_path(str(ROOT / "sok_lite" / "_tf_range.py"))["minor_requirement"](
        "tensorflow-cpu", (2, 18)
    )
    assert requirement == "tensorflow-cpu==2.18.*"
    (tmp_path / "out").mkdir()
    pinned = build_wheel.pin(_plain_wheel(tmp_path), "tf2.18", requirement, tmp_path / "out")
    assert pinned.name == "sok_lite-0.1.0+tf2.18-cp311-cp311-linux_x86_64.whl"
    info = "sok_lite-0.1.0+tf2.18.dist-info/"
    with zipfile.ZipFile(pinned) as wheel:
        names = wheel.namelist()
        assert not [n for n in names if n.startswith("sok_lite-0.1.0.dist-info/")], names
        head, _, body = wheel.read(info + "METADATA").decode().partition("\n\n")
        assert "Version: 0.1.0+tf2.18" in head.splitlines()
        assert "Requires-Dist: tensorflow-cpu==2.18.*" in head.splitlines()
        assert "Requires-Dist: numpy" in head.splitlines()
        assert "Version: 0.1.0 in the description" in body
        record = wheel.read(info + "RECORD").decode().splitlines()
        assert sorted(line.split(",")[0] for line in record) == sorted(names)
        for line in record:
            path, digest, size = line.split(",")
            if path == info + "RECORD":
                assert digest == size == ""
                continue
            data = wheel.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == "sha256=" + expected.decode() and int(size) == len(data), path


def test_every_supported_minor_is_listed_once():
    rng = runpy.run_path(str(ROOT / "sok_lite" / "_tf_range.py"))
    minors = rng["minors"]()
    assert minors[0] == rng["TF_MIN"] and minors[-1] == (rng["TF_MAX"][0], rng["TF_MAX"][1] - 1)
    assert rng["TF_DEFAULT"] in minors
    assert len(set(minors)) == len(minors) == rng["TF_MAX"][1] - rng["TF_MIN"][1]


def test_a_scratch_folder_is_emptied_only_when_a_script_made_it(build_wheel, tmp_path):
    """make wheel-check and make test-matrix empty their folders before a run: a folder of the
    user's given by mistake is refused and kept whole."""
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="not deleting it"):
        build_wheel.fresh_dir(users)
    assert (users / "notes.txt").read_text() == "keep me"
    scratch = build_wheel.fresh_dir(tmp_path / "scratch")
    (scratch / "left.txt").write_text("from the last run")
    build_wheel.fresh_dir(scratch)
    assert sorted(p.name for p in scratch.iterdir()) == [build_wheel.SCRATCH_MARK]
