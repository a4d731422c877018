"""The cuDNN lookup (kernels/cmake/FindCUDNN.cmake) on fake trees of every layout (configure only)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("cmake") is None,
        reason="cmake not found: these tests configure CMake projects (a devel environment)",
    ),
]

PROBE = """\
cmake_minimum_required(VERSION 3.24)
project(probe CXX)
list(APPEND CMAKE_MODULE_PATH "{modules}")
find_package(CUDNN REQUIRED)
message(STATUS "PROBE include=${{CUDNN_INCLUDE_DIRS}}")
message(STATUS "PROBE library=${{CUDNN_LIBRARY}}")
message(STATUS "PROBE version=${{CUDNN_VERSION}}")
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${{CUDNN_INCLUDE_DIRS}})
check_cxx_source_compiles("#include <cudnn.h>
#include <cudnn_ops.h>
static_assert(FAKE_CUDNN_OPS == 1, \\"ops header\\");
int main() {{ return FAKE_CUDNN; }}" PROBE_COMPILES)
message(STATUS "PROBE compiles=${{PROBE_COMPILES}}")
"""


def fake_cudnn(
    include: Path, lib: Path, *, version: tuple[int, int, int], versioned: bool, soname_only: bool
) -> None:
    """A fake cuDNN: headers (plain or cudnn_v<N>.h style) and an (empty) library file."""
    major = version[0]
    suffix = f"_v{major}" if versioned else ""
    include.mkdir(parents=True, exist_ok=True)
    lib.mkdir(parents=True, exist_ok=True)
    (include / f"cudnn_version{suffix}.h").write_text(
        f"#define CUDNN_MAJOR {version[0]}\n#define CUDNN_MINOR {version[1]}\n#define CUDNN_PATCHLEVEL {version[2]}\n"
    )
    # Like the real headers: the main header includes the others by their unversioned names.
    (include / f"cudnn{suffix}.h").write_text('#define FAKE_CUDNN 0\n#include "cudnn_version.h"\n')
    (include / f"cudnn_ops{suffix}.h").write_text("#define FAKE_CUDNN_OPS 1\n")
    if soname_only:
        (lib / f"libcudnn.so.{major}").write_bytes(b"")
        (lib / f"libcudnn.so.{major}.{version[1]}.{version[2]}").write_bytes(b"")
    else:
        (lib / "libcudnn.so").write_bytes(b"")


def configure(tmp_path: Path, *defines: str) -> subprocess.CompletedProcess:
    """Configure the probe project; returns the finished process."""
    source = tmp_path / "probe"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROBE.format(modules=REPO / "kernels" / "cmake"))
    return subprocess.run(
        ["cmake", "-S", str(source), "-B", str(tmp_path / "probe-build"), *defines],
        capture_output=True,
        text=True,
        check=False,
    )


def probe(result: subprocess.CompletedProcess) -> dict[str, str]:
    assert result.returncode == 0, result.stdout + result.stderr
    found = {}
    for line in result.stdout.splitlines():
        if "PROBE " in line:
            key, _, value = line.split("PROBE ", 1)[1].partition("=")
            found[key] = value
    return found


def test_cuda_toolkit_layout(tmp_path):
    root = tmp_path / "usr" / "local" / "cuda"
    fake_cudnn(
        root / "include", root / "lib64", version=(9, 1, 0), versioned=False, soname_only=False
    )
    found = probe(configure(tmp_path, f"-DCUDNN_ROOT={root}", "-DCUDNN_SYSTEM_SEARCH=OFF"))
    assert found["library"] == str(root / "lib64" / "libcudnn.so")
    assert found["version"] == "9.1.0"
    assert found["compiles"] == "1"


def test_debian_multiarch_layout_with_versioned_headers_and_soname_only(tmp_path):
    root = tmp_path / "usr"
    include = root / "include" / "x86_64-linux-gnu"
    lib = root / "lib" / "x86_64-linux-gnu"
    fake_cudnn(include, lib, version=(8, 9, 7), versioned=True, soname_only=True)
    found = probe(configure(tmp_path, f"-DCUDNN_ROOT={root}", "-DCUDNN_SYSTEM_SEARCH=OFF"))
    assert found["library"] == str(lib / "libcudnn.so.8"), "the soname, not the full version"
    assert found["version"] == "8.9.7"
    assert str(include) in found["include"]
    assert "cudnn_shim" in found["include"]
    assert found["compiles"] == "1", "<cudnn.h> and <cudnn_ops.h> resolve through the shim"


def test_pip_wheel_layout_found_through_the_python_interpreter(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    cudnn = site / "nvidia" / "cudnn"
    fake_cudnn(
        cudnn / "include", cudnn / "lib", version=(9, 13, 0), versioned=False, soname_only=True
    )
    python = tmp_path / "fake-python"
    python.write_text(f"#!/bin/sh\necho '{site}'\n")
    python.chmod(0o755)
    found = probe(configure(tmp_path, f"-DPython3_EXECUTABLE={python}"))
    assert found["library"] == str(cudnn / "lib" / "libcudnn.so.9")
    assert found["version"] == "9.13.0"
    assert found["compiles"] == "1"


def test_cudnn_root_wins_over_other_places(tmp_path):
    site = tmp_path / "site-packages"
    fake_cudnn(
        site / "nvidia" / "cudnn" / "include",
        site / "nvidia" / "cudnn" / "lib",
        version=(9, 13, 0),
        versioned=False,
        soname_only=True,
    )
    python = tmp_path / "fake-python"
    python.write_text(f"#!/bin/sh\necho '{site}'\n")
    python.chmod(0o755)
    root = tmp_path / "chosen"
    fake_cudnn(
        root / "include", root / "lib", version=(9, 2, 1), versioned=False, soname_only=False
    )
    found = probe(configure(tmp_path, f"-DPython3_EXECUTABLE={python}", f"-DCUDNN_ROOT={root}"))
    assert found["version"] == "9.2.1"


def test_missing_cudnn_names_the_places_searched_and_the_variable(tmp_path):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    result = configure(tmp_path, f"-DCUDNN_ROOT={empty}", "-DCUDNN_SYSTEM_SEARCH=OFF")
    assert result.returncode != 0
    message = result.stderr
    assert "Could NOT find CUDNN" in message
    assert f"{empty}/include" in message and f"{empty}/lib64" in message
    assert "Set CUDNN_ROOT" in message and "OPFORGE_WITH_CUDNN=OFF" in message


@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc not found: cannot configure the kernels with CUDA",
)
def test_kernels_configure_fails_clearly_without_cudnn(tmp_path):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    (tmp_path / "dl" / "dlpack").mkdir(parents=True)
    (tmp_path / "dl" / "dlpack" / "dlpack.h").write_text("")
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO / "kernels"),
            "-B",
            str(tmp_path / "build"),
            "-G",
            "Ninja",
            "-DOPFORGE_WITH_CUDA=ON",
            "-DOPFORGE_WITH_CUDNN=ON",
            f"-DCUDNN_ROOT={empty}",
            "-DCUDNN_SYSTEM_SEARCH=OFF",
            f"-DOPFORGE_DLPACK_INCLUDE_DIR={tmp_path / 'dl'}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "Could NOT find CUDNN" in result.stderr
    assert "Set CUDNN_ROOT" in result.stderr
