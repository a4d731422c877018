"""The conformance table through the C ABI on a CUDA device (device memory from torch)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from opforge.abi import KDL_CUDA, KernelError, Tensor
from tests.conformance.cases import CASES
from tests.conformance.runner import CudaMemory, run_case

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

CONTIGUOUS = [c for c in CASES if c.layout == "contiguous"]


@pytest.fixture(scope="module")
def memory():
    return CudaMemory()


@pytest.mark.parametrize("case", CONTIGUOUS, ids=lambda c: c.id)
def test_case(gpu_library, memory, case):
    for check in run_case(gpu_library, case, memory, seed=zlib.crc32(case.id.encode())):
        check.assert_close(case)


def test_strided_cuda_input_is_refused_not_miscomputed(gpu_library, memory):
    import torch

    x = torch.randn(8, 6, device="cuda").t()
    y = torch.empty(6, 8, device="cuda")
    desc = Tensor.from_pointer(x.data_ptr(), x.shape, x.stride(), "float32", KDL_CUDA, 0)
    out = Tensor.from_pointer(y.data_ptr(), y.shape, y.stride(), "float32", KDL_CUDA, 0)
    with pytest.raises(KernelError) as info:
        gpu_library.softmax_forward(desc, -1, out, memory.stream)
    assert info.value.status_name == "UNSUPPORTED"
    assert "x is not contiguous (strides [1, 6])" in info.value.message


def test_large_rows_use_every_path(gpu_library, memory):
    """Rows that fit a warp, a block, a 512-thread block, or need the two-pass kernel."""
    import torch

    for length in (33, 1000, 8192, 16384, 16388, 100003):
        x = torch.randn(3, length, device="cuda") * 5
        y = torch.empty_like(x)
        gpu_library.softmax_forward(
            Tensor.from_pointer(x.data_ptr(), x.shape, x.stride(), "float32", KDL_CUDA, 0),
            -1,
            Tensor.from_pointer(y.data_ptr(), y.shape, y.stride(), "float32", KDL_CUDA, 0),
            memory.stream,
        )
        torch.cuda.synchronize()
        expected = torch.softmax(x.double(), -1)
        assert torch.allclose(y.double(), expected, rtol=1e-4, atol=1e-7), length
        assert np.isfinite(y.cpu().numpy()).all()
