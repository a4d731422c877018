"""opforge.mindspore.layer_norm_stats as ops.LayerNorm with its two axes: gamma and beta over
other dims than the normalised ones (MindSpore's own CPU LayerNorm tests use them), and the inputs
ops.LayerNorm refuses, in PYNATIVE and GRAPH mode."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
ofm = pytest.importorskip("opforge.mindspore")

from mindspore import Tensor, ops  # noqa: E402
from mindspore import dtype as mstype  # noqa: E402

from tests.mindspore_adapter.harness import call  # noqa: E402


def normal(*shape, seed=0, dtype=mstype.float32):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).astype(
        dtype
    )


def close(ours: Tensor, native: Tensor, tolerance: float) -> None:
    """Same dtype and shape, and values within ``tolerance`` of the larger of 1 and ``native``'s
    largest magnitude (gradients summed over many rows grow with them)."""
    assert ours.dtype == native.dtype, (ours.dtype, native.dtype)
    assert ours.shape == native.shape, (ours.shape, native.shape)
    a = ours.astype(mstype.float32).asnumpy().astype(np.float64)
    b = native.astype(mstype.float32).asnumpy().astype(np.float64)
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * scale)


# float16: one rounding of a float16 result apart (an ulp is 2**-10 of the value).
TOLERANCE = {mstype.float32: 1e-5, mstype.float16: 2e-3}


def _stats(begin_norm_axis, begin_params_axis):
    def ours(x, gamma, beta):
        return ofm.layer_norm_stats(x, gamma, beta, begin_norm_axis, begin_params_axis, 1e-5)

    def native(x, gamma, beta):
        return ops.LayerNorm(begin_norm_axis, begin_params_axis, 1e-5)(x, gamma, beta)

    return ours, native


def _weighted(stats):
    # A loss through y alone, with random weights, so that every element's gradient differs.
    def loss(x, gamma, beta, weights):
        return (stats(x, gamma, beta)[0].astype(mstype.float32) * weights).sum()

    return loss


@pytest.mark.parametrize("dtype", [mstype.float32, mstype.float16], ids=["float32", "float16"])
@pytest.mark.parametrize(
    ("shape", "begin_norm_axis", "begin_params_axis"),
    [
        # MindSpore's own CPU LayerNorm tests test_layernorm3d_2 and test_layernorm2d_4.
        ((32, 128, 768), -1, 1),
        ((128, 2, 16, 32), 2, 1),
        ((3, 4, 5), 1, -1),
        ((3, 4, 5), 1, 2),
        ((3, 4, 5), 2, 1),
        ((3, 4, 5), 0, 1),
    ],
    ids=["3d_2", "2d_4", "1,-1", "1,2", "2,1", "0,1"],
)
def test_params_over_other_dims_than_the_normalised_ones_match_layernorm(
    mode, shape, begin_norm_axis, begin_params_axis, dtype
):
    x = normal(*shape, dtype=dtype)
    params = shape[begin_params_axis:]
    gamma, beta = normal(*params, seed=1, dtype=dtype), normal(*params, seed=2, dtype=dtype)
    weights = normal(*shape, seed=3)
    ours, native = _stats(begin_norm_axis, begin_params_axis)
    for o, n in zip(
        call(ours, mode)(x, gamma, beta), call(native, mode)(x, gamma, beta), strict=True
    ):
        close(o, n, TOLERANCE[dtype])
    positions = (0, 1, 2)
    ours_grads = call(ms.grad(_weighted(ours), grad_position=positions), mode)(
        x, gamma, beta, weights
    )
    native_grads = call(ms.grad(_weighted(native), grad_position=positions), mode)(
        x, gamma, beta, weights
    )
    for o, n in zip(ours_grads, native_grads, strict=True):
        close(o, n, TOLERANCE[dtype])


def _without_params(x):
    return ofm.layer_norm_stats(x, None, None, 2, 1)


def _with_unit_params(x):
    ones, zeros = ops.ones((4, 5), mstype.float32), ops.zeros((4, 5), mstype.float32)
    return ops.LayerNorm(2, 1)(x, ones, zeros)


def test_absent_params_over_other_dims_are_one_and_zero(mode):
    x = normal(3, 4, 5)
    for o, n in zip(call(_without_params, mode)(x), call(_with_unit_params, mode)(x), strict=True):
        close(o, n, 1e-5)


def _bfloat16_stats(x, gamma, beta):
    return ofm.layer_norm_stats(x, gamma, beta, 2, 1, 1e-5)


def test_bfloat16_params_over_other_dims_match_a_float64_reference(mode):
    # MindSpore 2.10's CPU LayerNorm has no bfloat16 kernel: numpy in float64 instead.
    x, gamma, beta = normal(3, 4, 5), normal(4, 5, seed=1), normal(4, 5, seed=2)
    x, gamma, beta = (t.astype(mstype.bfloat16) for t in (x, gamma, beta))
    y, mean, variance = call(_bfloat16_stats, mode)(x, gamma, beta)
    assert (y.dtype, mean.dtype, variance.dtype) == (
        mstype.bfloat16,
        mstype.float32,
        mstype.float32,
    )
    xs, gs, bs = (t.astype(mstype.float32).asnumpy().astype(np.float64) for t in (x, gamma, beta))
    expected_mean = xs.mean(-1, keepdims=True)
    expected_variance = xs.var(-1, keepdims=True)
    expected = (xs - expected_mean) / np.sqrt(expected_variance + 1e-5) * gs + bs
    # One bfloat16 rounding (2**-8 of the value) of the float32 result.
    np.testing.assert_allclose(
        y.astype(mstype.float32).asnumpy(),
        expected,
        rtol=2**-8,
        atol=2**-8 * np.abs(expected).max(),
    )
    np.testing.assert_allclose(mean.asnumpy(), expected_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variance.asnumpy(), expected_variance, rtol=1e-5, atol=1e-6)


def _stats_of(begin_norm_axis, begin_params_axis):
    def stats(x, gamma, beta):
        return ofm.layer_norm_stats(x, gamma, beta, begin_norm_axis, begin_params_axis)

    return stats


@pytest.mark.parametrize(
    ("x", "gamma", "beta", "axes", "error", "message"),
    [
        # It once raised ZeroDivisionError; ops.LayerNorm refuses a 0-d input with ValueError.
        (
            lambda: Tensor(np.float32(2)),
            lambda: None,
            lambda: None,
            (-1, -1),
            ValueError,
            "input_x must have at least one dim, as in ops.LayerNorm, got a 0-d tensor: reshape "
            "it to (1,)",
        ),
        (
            lambda: normal(2, 3, 4),
            lambda: normal(4),
            lambda: normal(3, 4),
            (2, 1),
            ValueError,
            "gamma must have shape [3, 4] (input_x's dims from begin_params_axis 1, as in "
            "ops.LayerNorm), got [4]",
        ),
        (
            lambda: normal(2, 3, 4),
            lambda: normal(4),
            lambda: normal(3, 4),
            (1, 2),
            ValueError,
            "beta must have shape [4] (input_x's dims from begin_params_axis 2, as in "
            "ops.LayerNorm), got [3, 4]",
        ),
        # The same words where the axes agree (the kernel's named its own weight and bias).
        (
            lambda: normal(2, 3, 4),
            lambda: normal(4),
            lambda: None,
            (1, 1),
            ValueError,
            "gamma must have shape [3, 4] (input_x's dims from begin_params_axis 1, as in "
            "ops.LayerNorm), got [4]",
        ),
        (
            lambda: normal(2, 3, 4),
            lambda: normal(3, 4, dtype=mstype.float16),
            lambda: None,
            (2, 1),
            TypeError,
            "gamma must be float32, got float16",
        ),
        (
            lambda: normal(2, 3, 4, dtype=mstype.float16),
            lambda: None,
            lambda: normal(3, 4, dtype=mstype.bfloat16),
            (2, 1),
            TypeError,
            "beta must be float32 or float16 (input_x's dtype), got bfloat16",
        ),
        # The kernel gets a float32 copy where the axes differ: an int input must not pass.
        (
            lambda: Tensor(np.ones((2, 3, 4), np.int32)),
            lambda: None,
            lambda: None,
            (2, 1),
            TypeError,
            "input_x has dtype int32 (supported: float32, float16, bfloat16)",
        ),
    ],
    ids=[
        "0-d",
        "gamma-shape",
        "beta-shape",
        "gamma-shape-fused",
        "gamma-dtype",
        "beta-dtype",
        "int",
    ],
)
def test_refusals_name_the_parameter(mode, x, gamma, beta, axes, error, message):
    with pytest.raises(error) as raised:
        call(_stats_of(*axes), mode)(x(), gamma(), beta())
    assert str(raised.value).splitlines()[0] == f"opforge.mindspore.layer_norm_stats: {message}"


class _StatsCell(ms.nn.Cell):
    def construct(self, x, gamma, beta):
        return ofm.layer_norm_stats(x, gamma, beta, -1, -1)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        # It once raised "TypeError: object of type 'NoneType' has no len()".
        (None, "input_x has an unknown rank; opforge needs static shapes"),
        (
            [None, 4],
            "input_x has a dynamic shape [None, 4]: opforge's MindSpore ops need static shapes "
            "(give the Cell's inputs fixed shapes)",
        ),
    ],
    ids=["rank", "dims"],
)
def test_graph_inputs_of_unknown_shape_are_refused_as_by_every_op(
    shape, message, tmp_path, monkeypatch
):
    # Only GRAPH mode has inputs of unknown rank or dims (Cell.set_inputs).
    monkeypatch.chdir(tmp_path)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = _StatsCell()
        gamma, beta = normal(4), normal(4, seed=1)
        net.set_inputs(Tensor(shape=shape, dtype=mstype.float32), gamma, beta)
        with pytest.raises(ValueError) as raised:
            net(normal(3, 4), gamma, beta)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert str(raised.value).splitlines()[0] == f"opforge.mindspore.layer_norm_stats: {message}"


class _MutableAxisCell(ms.nn.Cell):
    def construct(self, x, gamma, beta):
        return ofm.layer_norm_stats(x, gamma, beta, ms.mutable(1), 1, 1e-5)[0]


def test_a_graph_axis_known_only_at_run_time_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(TypeError) as raised:
            _MutableAxisCell()(normal(3, 4), normal(4), normal(4, seed=1))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert str(raised.value).splitlines()[0] == (
        "opforge.mindspore.layer_norm_stats: begin_norm_axis must be an int known when the graph "
        "is compiled (a Python int, not mindspore.mutable), got None"
    )
