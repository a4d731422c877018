"""The opforge.mindspore functions behave as the MindSpore ops they mirror — compared with
MindSpore's own ops on the same inputs, in PYNATIVE and GRAPH mode."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
ofm = pytest.importorskip("opforge.mindspore")

from mindspore import Parameter, Tensor, ops  # noqa: E402
from mindspore import dtype as mstype  # noqa: E402

from tests.mindspore_adapter.harness import call  # noqa: E402


def f32(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def same(ours: Tensor, native: Tensor, rtol=1e-6, atol=1e-6) -> None:
    assert ours.dtype == native.dtype, (ours.dtype, native.dtype)
    assert ours.shape == native.shape, (ours.shape, native.shape)
    a, b = ours, native
    if a.dtype == mstype.bfloat16:
        a, b = a.astype(mstype.float32), b.astype(mstype.float32)
    np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=rtol, atol=atol)


def both(mode, fn, *args):
    """``fn(module, *args)`` with opforge.mindspore and with mindspore.ops, in ``mode``.

    GRAPH mode compiles named functions only (no inline lambdas).
    """

    def ours(*values):
        return fn(ofm, *values)

    def native(*values):
        return fn(ops, *values)

    return call(ours, mode)(*args), call(native, mode)(*args)


def _flat(m, t):
    return m.argmax(t)


def _flat_keepdim(m, t):
    return m.argmax(t, keepdim=True)


def test_argmax_without_dim_flattens(mode):
    x = Tensor(np.array([[1.0, 5.0], [7.0, 2.0]], np.float32))
    ours, native = both(mode, _flat, x)
    same(ours, native)
    assert int(ours.asnumpy()) == 2
    same(*both(mode, _flat_keepdim, x))
    y = f32(3, 4, 5)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            same(ofm.argmax(y, dim, keepdim), ops.argmax(y, dim, keepdim))


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((10, 1, 5), (1, 10, 5)), ((4, 3), (3,)), ((3,), (4, 3)), ((2, 3), ())]
)
def test_add_broadcasts(mode, a_shape, b_shape):
    a, b = f32(*a_shape), f32(*b_shape, seed=1)
    same(*both(mode, _add, a, b))


def _add(m, u, v):
    return m.add(u, v)


def _add_float(m, t):
    return m.add(t, 4.0)


def _add_int_first(m, t):
    return m.add(2, t)


def _add_half(m, t):
    return m.add(t, 2.5)


def test_add_takes_python_numbers_and_promotes(mode):
    x = f32(4)
    same(*both(mode, _add_float, x))
    same(*both(mode, _add_int_first, x))
    h = x.astype(mstype.float16)
    same(*both(mode, _add_half, h))
    same(*both(mode, _add, h, x))


def test_add_refuses_non_floating_results_naming_the_function():
    ints = Tensor(np.arange(4, dtype=np.int32))
    with pytest.raises(
        TypeError, match=r"opforge.mindspore.add: the result would not be a floating"
    ):
        ofm.add(ints, ints)
    with pytest.raises(TypeError, match=r"opforge.mindspore.add: operands are mindspore.Tensor or"):
        ofm.add(np.ones(3, np.float32), f32(3))


def _softmax_upcast(m, t):
    return m.softmax(t, dtype=mstype.float32)


def _softmax_axis0(m, t):
    return m.softmax(t, axis=0)


def test_softmax_axis_and_dtype(mode):
    same(*both(mode, _softmax_upcast, f32(4, 7).astype(mstype.float16)), rtol=1e-5, atol=1e-6)
    same(*both(mode, _softmax_axis0, f32(4, 7)), rtol=1e-5)


@pytest.mark.parametrize("momentum", [0.1, 0.9])
def test_batch_norm_matches_mindspore_ops_batch_norm(mode, momentum):
    x = f32(8, 3)
    w = Tensor(np.full(3, 1.5, np.float32))
    b = Tensor(np.full(3, 0.25, np.float32))
    start_mean, start_var = np.full(3, 0.5, np.float32), np.full(3, 2.0, np.float32)

    def run(fn, statistics):
        rm, rv = statistics(start_mean.copy()), statistics(start_var.copy())

        def step(t, m, v):
            return fn(t, m, v, w, b, True, momentum, 1e-5)

        y = call(step, mode)(x, rm, rv)
        return y, rm, rv

    for statistics in (Tensor, lambda v: Parameter(Tensor(v))):
        ours = run(ofm.batch_norm, statistics)
        native = run(ops.batch_norm, statistics)
        for o, n in zip(ours, native, strict=True):
            same(o, n, rtol=1e-5, atol=1e-5)
