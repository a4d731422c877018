"""KernelLibrary.bind: an op's arguments checked and converted once, then run as often as asked,
on whatever the buffers hold at each run."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from opforge.kernels.abi import KernelError, Tensor

pytestmark = pytest.mark.slow


def softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_each_run_reads_the_buffers_as_they_are_then(cpu_library):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    y = np.zeros_like(x)
    run = cpu_library.bind("softmax", x=Tensor.from_numpy(x), dim=-1, y=Tensor.from_numpy(y))
    assert not y.any()  # binding runs nothing
    run()
    np.testing.assert_allclose(y, softmax_rows(x), rtol=1e-6)
    x *= 3
    run()
    np.testing.assert_allclose(y, softmax_rows(x), rtol=1e-6)


def test_the_bound_call_keeps_its_buffers_alive(cpu_library):
    y = np.zeros((2, 4), np.float32)
    values = np.arange(8, dtype=np.float32).reshape(2, 4)
    run = cpu_library.bind(
        "softmax", x=Tensor.from_numpy(values.copy()), dim=1, y=Tensor.from_numpy(y)
    )
    gc.collect()  # the only reference to the copy of x is the bound call's
    run()
    np.testing.assert_allclose(y, softmax_rows(values), rtol=1e-6)


def test_arguments_are_checked_when_bound(cpu_library):
    x = Tensor.from_numpy(np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"^opforge_softmax: dim must be an int, got 0\.5"):
        cpu_library.bind("softmax", x=x, dim=0.5, y=x)
    with pytest.raises(ValueError, match=r"^unknown op 'softmx'"):
        cpu_library.bind("softmx", x=x)


def test_a_refused_call_raises_at_every_run(cpu_library):
    a, b = np.ones((3, 4), np.float32), np.ones((4, 3), np.float32)
    run = cpu_library.bind(
        "add", a=Tensor.from_numpy(a), b=Tensor.from_numpy(b), alpha=1.0, out=Tensor.from_numpy(a)
    )
    for _ in range(2):
        with pytest.raises(KernelError, match="shapes do not broadcast"):
            run()
