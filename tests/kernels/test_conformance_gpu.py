"""The conformance cases through the C ABI on a CUDA device (device memory from torch), in every
layout torch can make (contiguous, transposed, strided): strided CUDA tensors are computed, not
refused."""

from __future__ import annotations

import pytest

from tests.conformance.runner import CudaMemory, all_cases, run_case

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

DEVICE_CASES = [c for c in all_cases() if c.layout != "reversed"]


@pytest.mark.parametrize("case", DEVICE_CASES, ids=lambda c: c.id)
def test_case(gpu_library, case):
    pytest.importorskip("torch", reason="device memory is allocated through torch")
    for check in run_case(gpu_library, case, CudaMemory(case.layout)):
        check.assert_close(case)
