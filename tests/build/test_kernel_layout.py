"""kernels/README.md states the kernel families (one name in every folder) and what each folder may
include; this checks both against the tree: every source is in the table once, under a family
whose name it starts with (or among the shared helpers), and no include crosses a folder's rule.
Reads files only: no compiler needed.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"
FOLDERS = ["core", "cuda", "tf", "tf_gpu"]
SOURCE = re.compile(r".*\.(h|cc|cu|cuh)$")


def readme_table():
    """{family: {folder: [file names]}} from the README's table."""
    table = {}
    for line in (KERNELS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 + len(FOLDERS) or not cells[0] or set(cells[0]) <= {"-"}:
            continue
        if cells[0] == "family":  # the header names the folders in this order
            assert [c.split()[0] for c in cells[2:]] == [f"`{f}/`" for f in FOLDERS], cells
            continue
        family = cells[0].strip("`")
        table[family] = {f: re.findall(r"`([^`]+)`", c) for f, c in zip(FOLDERS, cells[2:])}
    return table


def test_readme_lists_every_kernel_file_once_under_its_family():
    table = readme_table()
    assert {"hash_table", "lookup", "exchange", "optimizer", "row_init", "shared"} <= set(table)
    for folder in FOLDERS:
        on_disk = sorted(p.name for p in (KERNELS / folder).iterdir() if SOURCE.match(p.name))
        listed = [name for family in table.values() for name in family[folder]]
        assert sorted(listed) == on_disk, folder
        for family, files in table.items():
            for name in files[folder]:
                stem = name.split(".")[0]
                if family == "shared":  # a shared helper must not look like a family's file
                    assert not any(stem.startswith(f) for f in table if f != "shared"), name
                    continue
                assert stem == family or stem.startswith(family + "_"), (folder, name)
                assert folder != "tf_gpu" or stem.endswith("_gpu"), name


# TensorFlow's headers and those it ships (Abseil, Eigen), for tf/ and tf_gpu/.
TENSORFLOW = ("tensorflow/", "absl/", "Eigen/", "unsupported/Eigen/", "third_party/")


def allowed(folder: str, include: str) -> bool:
    if folder == "core":
        return include.startswith("kernels/core/")
    if folder == "cuda":
        return include.startswith("kernels/cuda/") or include in (
            "kernels/core/cpu_gpu_rules.h",
            "kernels/core/half_rows.h",
        )
    if include.startswith(TENSORFLOW):
        return True
    if folder == "tf":
        return include.startswith(("kernels/core/", "kernels/tf/"))
    return include.startswith(("kernels/core/", "kernels/tf/", "kernels/tf_gpu/")) or include in (
        "kernels/cuda/sok_lite_cuda.h",
    )


# No TF or CUDA through angle brackets either.
BANNED_SYSTEM_HEADERS = {
    "core": ("tensorflow/", "absl/", "cuda", "cub/", "thrust/"),
    "cuda": ("tensorflow/", "absl/"),
    "tf": ("cuda", "cub/", "thrust/"),
}


def test_includes_follow_the_folder_rules():
    quoted = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    angled = re.compile(r"^\s*#\s*include\s+<([^>]+)>", re.M)
    broken = []
    for folder in FOLDERS:
        for path in sorted((KERNELS / folder).iterdir()):
            if not SOURCE.match(path.name):
                continue
            text = path.read_text()
            for include in quoted.findall(text):
                if not allowed(folder, include):
                    broken.append(f"{folder}/{path.name}: {include}")
                elif include.startswith("kernels/") and not (ROOT / include).exists():
                    broken.append(f"{folder}/{path.name}: {include} (no such file)")
            for include in angled.findall(text):
                if include.startswith(BANNED_SYSTEM_HEADERS.get(folder, ())):
                    broken.append(f"{folder}/{path.name}: <{include}>")
    assert not broken, "\n".join(broken)
