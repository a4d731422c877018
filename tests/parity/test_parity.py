"""Parity: every conformance case through opforge.torch and opforge.mindspore gives the same
values, element for element within the dtype's tolerance (forward, gradients, statistics).

Both adapters wrap the same kernels, so a difference here is an adapter bug (argument order,
dim normalisation, an attribute lost on the way) even where both happen to be near the reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance.runner import all_cases

pytest.importorskip("torch", reason="parity needs torch and the opforge.torch wheel")
pytest.importorskip("opforge.torch", reason="parity needs the opforge.torch wheel")
pytest.importorskip("mindspore", reason="parity needs MindSpore and the opforge.mindspore wheel")
pytest.importorskip("opforge.mindspore", reason="parity needs the opforge.mindspore wheel")

from tests.mindspore_adapter import harness as ms_harness
from tests.torch_adapter import harness as torch_harness

PARITY_CASES = [c for c in all_cases() if c.layout != "reversed"]


@pytest.fixture(autouse=True)
def _pynative(tmp_path, monkeypatch):
    import mindspore as ms

    monkeypatch.chdir(tmp_path)
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.mindspore
@pytest.mark.parametrize("case", PARITY_CASES, ids=lambda c: c.id)
def test_torch_and_mindspore_agree(case):
    from_torch = {c.name: c for c in torch_harness.checks(case)}
    from_mindspore = {c.name: c for c in ms_harness.checks(case, "pynative")}
    # The forward outputs exist on both sides; gradient names differ only where one side
    # computes no gradient for the case.
    shared = sorted(set(from_torch) & set(from_mindspore))
    assert shared, (sorted(from_torch), sorted(from_mindspore))
    for name in shared:
        t, m = from_torch[name], from_mindspore[name]
        assert m.actual.shape == t.actual.shape, (name, m.actual.shape, t.actual.shape)
        np.testing.assert_allclose(
            m.actual, t.actual, rtol=t.rtol, atol=t.atol, equal_nan=True, err_msg=name
        )
