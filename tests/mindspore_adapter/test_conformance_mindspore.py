"""The conformance cases through opforge.mindspore, PYNATIVE and GRAPH: values and gradients."""

from __future__ import annotations

import pytest

from tests.conformance.runner import all_cases

pytest.importorskip("mindspore")
harness = pytest.importorskip("tests.mindspore_adapter.harness")

# MindSpore tensors have no negative strides: the reversed layout stays with the C ABI tests.
MINDSPORE_CASES = [c for c in all_cases() if c.layout != "reversed"]


@pytest.mark.parametrize("case", MINDSPORE_CASES, ids=lambda c: c.id)
def test_case(case, mode):
    for check in harness.checks(case, mode):
        check.assert_close(case)
