"""The kernel library, built once per test session through `opforge build`."""

from __future__ import annotations

import pytest

from opforge.abi import KernelLibrary, library_path
from tests.test_build import copy_project, opforge


@pytest.fixture(scope="session")
def cpu_library(tmp_path_factory) -> KernelLibrary:
    """The CPU build of libopforge_kernels, loaded through opforge.abi."""
    project = copy_project(tmp_path_factory.mktemp("kernels-cpu"))
    result = opforge(project, "build", "kernels", "--profile", "cpu", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    library = KernelLibrary(library_path(project, "cpu"))
    assert not library.has_cuda
    return library


@pytest.fixture(scope="session")
def gpu_library(tmp_path_factory) -> KernelLibrary:
    """The GPU build (CUDA + cuDNN) of libopforge_kernels, loaded through opforge.abi."""
    project = copy_project(tmp_path_factory.mktemp("kernels-gpu"))
    result = opforge(project, "build", "kernels", "--profile", "gpu", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    library = KernelLibrary(library_path(project, "gpu"))
    assert library.has_cuda and library.has_cudnn
    return library
