"""The conformance table through opforge.torch: forward and backward against float64."""

from __future__ import annotations

import pytest

from tests.conformance.cases import CASES

pytest.importorskip("torch")
pytest.importorskip("opforge.torch")
harness = pytest.importorskip("tests.torch_adapter.harness")

# torch has no negative strides: the reversed layout stays with the C ABI tests.
TORCH_CASES = [c for c in CASES if c.layout != "reversed"]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_case_cpu(case):
    for check in harness.checks(case):
        check.assert_close(case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_case_cuda(case):
    for check in harness.checks(case, "cuda"):
        check.assert_close(case)
