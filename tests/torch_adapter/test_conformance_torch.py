"""The conformance cases through opforge.torch: values and gradients against float64."""

from __future__ import annotations

import pytest

from tests.conformance.runner import all_cases

pytest.importorskip("torch")
pytest.importorskip("opforge.torch")
harness = pytest.importorskip("tests.torch_adapter.harness")

# torch has no negative strides: the reversed layout stays with the C ABI tests.
TORCH_CASES = [c for c in all_cases() if c.layout != "reversed"]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_case_cpu(case):
    for check in harness.checks(case):
        check.assert_close(case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_case_cuda(case):
    for check in harness.checks(case, "cuda"):
        check.assert_close(case)
