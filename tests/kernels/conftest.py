"""The kernel library, built once per test session through `opforge build` (or, with
OPFORGE_TEST_DIST=<profile>, the one that profile's build left in dist/: a GPU build serves the
CPU tests too, which is how a matrix cell tests its GPU build in a runtime image without a GPU)."""

from __future__ import annotations

import os

import pytest

from opforge.kernels.abi import KernelLibrary, library_path
from tests.conformance.runner import load_library
from tests.conftest import REPO
from tests.test_build import copy_project, opforge


def _built_library(tmp_path_factory, profile: str) -> KernelLibrary:
    dist = os.environ.get("OPFORGE_TEST_DIST")
    if dist:
        # A runtime image has no compiler: test the library the build left in dist/.
        path = library_path(REPO, dist if dist in ("cpu", "gpu") else profile)
        if not path.exists():
            pytest.fail(f"OPFORGE_TEST_DIST is set but {path} does not exist: build it first")
        return load_library(path)
    project = copy_project(tmp_path_factory.mktemp(f"kernels-{profile}"))
    result = opforge(project, "build", "kernels", "--profile", profile, "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    return load_library(library_path(project, profile))


@pytest.fixture(scope="session")
def cpu_library(tmp_path_factory) -> KernelLibrary:
    """The CPU build of libopforge_kernels, loaded through opforge.kernels.abi."""
    library = _built_library(tmp_path_factory, "cpu")
    assert not library.has_cuda or os.environ.get("OPFORGE_TEST_DIST") == "gpu"
    return library


@pytest.fixture(scope="session")
def gpu_library(tmp_path_factory) -> KernelLibrary:
    """The GPU build (CUDA + cuDNN) of libopforge_kernels, loaded through opforge.kernels.abi."""
    library = _built_library(tmp_path_factory, "gpu")
    assert library.has_cuda and library.has_cudnn
    return library
