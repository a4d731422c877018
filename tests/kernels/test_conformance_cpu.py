"""The conformance cases through the C ABI on the CPU (ctypes + numpy), against float64."""

from __future__ import annotations

import pytest

from tests.conformance.runner import HostMemory, all_cases, run_case

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.id)
def test_case(cpu_library, case):
    for check in run_case(cpu_library, case, HostMemory(case.layout)):
        check.assert_close(case)
