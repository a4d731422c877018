"""A kernel library built without sm_90 code (CMAKE_CUDA_ARCHITECTURES=80, for A100s) still runs
on a Hopper GPU, from its sm_80 PTX compiled by the driver. That code has no thread-block
clusters, so the kernels that use them (long softmax rows, softmax column tiles, 2-D batch_norm
tiles) must take their one-block paths there rather than trap. Each of those paths' conformance
cases runs against such a build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.runner import CudaMemory, load_library, run_case
from tests.conftest import REPO
from tests.kernels.test_cuda_paths import CONFORMANCE

# The cases whose shapes take clusters on an H100 (test_cuda_paths.CONFORMANCE's comments).
CLUSTER_CASES = [
    c
    for c in CONFORMANCE
    if (c.op.startswith("softmax") and c.shape in ((2, 150001), (8192, 96), (40000, 48)))
    or (c.op.startswith("batch_norm") and c.shape == (3000, 64))
]


def _build_sm80(gpu_library, dest: Path) -> Path:
    """libopforge_kernels.so for sm_80 only (no cuDNN: batch_norm's native kernels are the point),
    with the DLPack header the GPU build installed."""
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.skip(f"an sm_80-only build needs {tool} on PATH")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("an sm_80-only build needs nvcc (on PATH or in /usr/local/cuda/bin)")
    include = gpu_library.path.parent.parent / "include"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    configure = [
        "cmake", "-S", str(REPO / "kernels"), "-B", str(dest), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DOPFORGE_WITH_CUDA=ON", "-DOPFORGE_WITH_CUDNN=OFF",
        "-DCMAKE_CUDA_ARCHITECTURES=80", f"-DOPFORGE_DLPACK_INCLUDE_DIR={include}",
        f"-DPython3_EXECUTABLE={sys.executable}", f"-DCMAKE_CUDA_COMPILER={nvcc}",
    ]  # fmt: skip
    for command in (configure, ["cmake", "--build", str(dest)]):
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return dest / "libopforge_kernels.so"


@pytest.fixture(scope="module")
def sm80_library(gpu_library, tmp_path_factory):
    import torch

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs a Hopper (compute capability 9.0+) GPU: the case is sm_80 code on one")
    return load_library(_build_sm80(gpu_library, tmp_path_factory.mktemp("sm80") / "build"))


def test_the_cases_reach_clusters():
    """Each clustered kernel family keeps its cases here if test_cuda_paths' shapes change."""
    ops = {(c.op, c.shape[-1] if c.op.startswith("softmax") else 0) for c in CLUSTER_CASES}
    assert {o for o, _ in ops} == {
        "softmax",
        "softmax_backward",
        "batch_norm",
        "batch_norm_backward",
    }
    assert ("softmax", 150001) in ops and ("softmax", 96) in ops and ("softmax", 48) in ops


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("case", CLUSTER_CASES, ids=lambda c: c.id)
def test_cluster_paths_of_an_sm80_build_on_hopper(sm80_library, case):
    for check in run_case(sm80_library, case, CudaMemory()):
        check.assert_close(case)
