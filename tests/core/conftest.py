"""The core C ABI shim (core_capi.cc), built once per session for the modules that bind it."""

import pytest

from tests.core.capi_build import build

# The kernels/core sources core_capi.cc calls into.
CORE_CAPI_SOURCES = ["lookup_unique.cc", "lookup_combine.cc", "row_sum.cc", "optimizer.cc"]
CORE_CAPI_SOURCES += ["huge_pages.cc", "disk_index.cc", "open_index.cc", "hash_table_record.cc"]


@pytest.fixture(scope="session")
def core_capi_library(tmp_path_factory):
    return build(tmp_path_factory.mktemp("core_capi"), "core_capi.cc", CORE_CAPI_SOURCES)


@pytest.fixture(scope="session")
def baseline_core_capi_library(tmp_path_factory):
    """Built without the target clones of the 16-bit row conversions (baseline x86-64 code)."""
    out = tmp_path_factory.mktemp("core_capi_baseline")
    return build(out, "core_capi.cc", CORE_CAPI_SOURCES, ["SOK_LITE_NO_TARGET_CLONES"])
