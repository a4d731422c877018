"""The kernel library, built once per test session through `opforge build`."""

from __future__ import annotations

import pytest

from opforge.abi import KernelLibrary, library_path
from tests.test_build import copy_project, opforge


def _built_library(tmp_path_factory, profile: str) -> KernelLibrary:
    project = copy_project(tmp_path_factory.mktemp(f"kernels-{profile}"))
    result = opforge(project, "build", "kernels", "--profile", profile, "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    return KernelLibrary(library_path(project, profile))


@pytest.fixture(scope="session")
def cpu_library(tmp_path_factory) -> KernelLibrary:
    """The CPU build of libopforge_kernels, loaded through opforge.abi."""
    library = _built_library(tmp_path_factory, "cpu")
    assert not library.has_cuda
    return library


@pytest.fixture(scope="session")
def gpu_library(tmp_path_factory) -> KernelLibrary:
    """The GPU build (CUDA + cuDNN) of libopforge_kernels, loaded through opforge.abi."""
    library = _built_library(tmp_path_factory, "gpu")
    assert library.has_cuda and library.has_cudnn
    return library
