"""The conformance table through the C ABI on the CPU (ctypes + numpy), against float64."""

from __future__ import annotations

import zlib

import pytest

from tests.conformance.cases import CASES
from tests.conformance.runner import HostMemory, run_case

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(cpu_library, case):
    for check in run_case(
        cpu_library, case, HostMemory(case.layout), seed=zlib.crc32(case.id.encode())
    ):
        check.assert_close(case)
