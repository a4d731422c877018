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


def _add_and_mul_numbers(m, t):
    return m.add(t, 2.5), m.mul(t, 3)


def test_bfloat16_takes_python_numbers_in_both_modes(mode):
    # GRAPH mode's ScalarToTensor has no bfloat16.
    x = f32(4).astype(mstype.bfloat16)
    for o, n in zip(*both(mode, _add_and_mul_numbers, x), strict=True):
        same(o, n)


def _numpy_scalars(m, t, i):
    return (
        m.mul(t, np.float32(2.5)),
        m.add(np.float16(0.5), t),
        m.mul(t, np.int64(3)),
        m.add(t, np.bool_(True)),
        m.mul(i, np.float32(2.5)),
    )


def test_numpy_scalars_promote_as_the_python_numbers_they_hold(mode):
    # They were refused as if they were arrays; MindSpore's ops take them as numbers.
    x, ints = f32(4).astype(mstype.float16), Tensor(np.arange(4, dtype=np.int32))
    for o, n in zip(*both(mode, _numpy_scalars, x, ints), strict=True):
        same(o, n)


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


@pytest.mark.parametrize(
    ("momentum", "eps", "refused"),
    [
        (0.1, 2.0, "eps"),
        (0.1, 0.0, "eps"),
        (0.1, float("nan"), "eps"),
        (1.5, 1e-5, "momentum"),
        (-0.1, 1e-5, "momentum"),
        (0.0, 1e-5, None),
        (1.0, 1.0, None),
    ],
)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_takes_the_ranges_mindspore_takes(mode, momentum, eps, refused, training):
    x = f32(8, 3)

    def step(fn):
        def run(t, rm, rv, w, b):
            return fn(t, rm, rv, w, b, training, momentum, eps)

        def on_fresh_statistics(t):
            zeros, ones = np.zeros(3, np.float32), np.ones(3, np.float32)
            return call(run, mode)(t, Tensor(zeros), Tensor(ones), Tensor(ones), Tensor(zeros))

        return on_fresh_statistics

    if refused is None:
        same(step(ofm.batch_norm)(x), step(ops.batch_norm)(x), 1e-5, 1e-5)
        return
    with pytest.raises(ValueError, match=f"{refused} must be in"):
        step(ops.batch_norm)(x)
    interval = "(0, 1]" if refused == "eps" else "[0, 1]"
    with pytest.raises(ValueError) as caught:
        step(ofm.batch_norm)(x)
    message = str(caught.value).splitlines()[0]
    assert message.startswith(f"opforge.mindspore.batch_norm: {refused} must be in {interval}")


def test_batch_norm_training_with_a_view_updates_nothing_before_refusing():
    # MindSpore (PYNATIVE) refuses an in-place assign to a view of another tensor: with
    # running_var such a view, running_mean must not have been updated when that comes.
    x = f32(8, 3)
    running_mean = Tensor(np.zeros(3, np.float32))
    running_var = Tensor(np.ones(4, np.float32))[:3]
    with pytest.raises(RuntimeError, match="view"):
        ofm.batch_norm(x, running_mean, running_var, None, None, True, 0.1, 1e-5)
    np.testing.assert_array_equal(running_mean.asnumpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(running_var.asnumpy(), np.ones(3, np.float32))


def test_batch_norm_in_inference_leaves_views_of_statistics_alone(mode):
    # Nothing is updated in inference: MindSpore refuses an in-place assign to a view.
    x = f32(8, 3)
    stats = Tensor(np.stack([np.full(3, 0.5), np.full(3, 2.0)]).astype(np.float32))
    w, b = Tensor(np.full(3, 1.5, np.float32)), Tensor(np.full(3, 0.25, np.float32))

    def infer(fn):
        def run(t):
            return fn(t, stats[0], stats[1], w, b, False, 0.1, 1e-5)

        return run

    same(call(infer(ofm.batch_norm), mode)(x), call(infer(ops.batch_norm), mode)(x), 1e-5, 1e-5)
    np.testing.assert_array_equal(stats.asnumpy()[1], np.full(3, 2.0, np.float32))


def _mul_grads(fn, mode, a, b):
    def loss(u, v):
        return fn(u, v).astype(mstype.float32).sum()

    return call(ops.grad(loss, grad_position=(0, 1)), mode)(a, b)


def _bf16_mul(u, v):
    return ofm.mul(u, v)


def _bf16_add(u, v):
    return ofm.add(u, v, alpha=2.0)


@pytest.mark.parametrize("b_shape", [(1, 3), (3,), ()], ids=str)
@pytest.mark.parametrize("op", [_bf16_mul, _bf16_add], ids=["mul", "add"])
def test_bfloat16_gradients_sum_over_broadcast_dims(mode, op, b_shape):
    # The sum over the broadcast dims was a bfloat16 ReduceSum, which MindSpore's CPU lacks;
    # where it drops dims, the reshape after it must not be bfloat16 either (GRAPH mode's CPU
    # Reshape has no bfloat16 kernel).
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).astype(mstype.bfloat16)
    b32 = np.broadcast_to(np.array([1.0, 2.0, 4.0], np.float32), (1, 3))[..., : 3 if b_shape else 1]
    b = Tensor(np.ascontiguousarray(b32).reshape(b_shape)).astype(mstype.bfloat16)
    da, db = _mul_grads(op, mode, a, b)
    assert (da.dtype, db.dtype, db.shape) == (mstype.bfloat16, mstype.bfloat16, b_shape)
    a32, b32 = a.astype(mstype.float32).asnumpy(), b.astype(mstype.float32).asnumpy()
    reduce = tuple(range(2 - len(b_shape))) + tuple(
        i + 2 - len(b_shape) for i, d in enumerate(b_shape) if d == 1
    )
    if op is _bf16_mul:
        expected = (np.broadcast_to(b32, (2, 3)), a32.sum(axis=reduce).reshape(b_shape))
    else:
        expected = (np.ones((2, 3)), np.full(b_shape, 2.0 * 6 / max(1, int(np.prod(b_shape)))))
    for got, want in zip((da, db), expected, strict=True):
        np.testing.assert_allclose(got.astype(mstype.float32).asnumpy(), want, rtol=1e-2)


def _bf16_times_number(u):
    return ofm.mul(u, 1.5).astype(mstype.float32).sum()


def test_bfloat16_gradient_beside_a_python_number(mode):
    a = Tensor(np.ones((2, 3), np.float32)).astype(mstype.bfloat16)
    da = call(ops.grad(_bf16_times_number), mode)(a)
    np.testing.assert_allclose(da.astype(mstype.float32).asnumpy(), np.full((2, 3), 1.5))


def _mul(m, u, v):
    return m.mul(u, v)


def _mul_number(m, t):
    return m.mul(t, 2.5)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((10, 1, 5), (1, 10, 5)), ((4, 3), (3,)), ((2, 3), ())]
)
def test_mul_broadcasts_and_takes_numbers(mode, a_shape, b_shape):
    a, b = f32(*a_shape), f32(*b_shape, seed=1)
    same(*both(mode, _mul, a, b))
    same(*both(mode, _mul_number, a))
    # A float32 operand with dims makes the product float32; a 0-d one leaves it float16,
    # computed in float32 and rounded once, as MindSpore's.
    same(*both(mode, _mul, a.astype(mstype.float16), b), rtol=2e-3, atol=1e-4)


def _mul_large(m, t):
    return m.mul(t, 100000.0)


def _mul_tiny(m, t):
    return m.mul(1e-6, t)


def test_mul_reads_a_number_half_cannot_hold_in_float32_as_mindspore(mode):
    # ops.mul reads a float number, and a 0-d float32 or float64 tensor, beside a float16
    # tensor in float32 and rounds the product once: 1e5 rounded to float16 first is inf (and
    # so was every product, where MindSpore's are finite), 1e-6 a subnormal.
    x = Tensor(np.array([-0.607, 0.5, 0.1, 3.0, 1e-3, 0.0], np.float16))
    for fn in (_mul_large, _mul_tiny):
        ours, native = both(mode, fn, x)
        assert ours.dtype == native.dtype == mstype.float16
        np.testing.assert_array_equal(ours.asnumpy(), native.asnumpy())
    for s in (np.float32(1e5), np.float32(0.1), np.float64(3e-6)):
        ours, native = both(mode, _mul, x, Tensor(s))
        assert ours.dtype == native.dtype == mstype.float16
        np.testing.assert_array_equal(ours.asnumpy(), native.asnumpy())


def _mul_tenth(m, t):
    return m.mul(t, 0.1)


def _mul_third(m, t):
    return m.mul(t, -1 / 3)


def _mul_int(m, t):
    return m.mul(t, 70000)


def _mul_tenth_first(m, t):
    return m.mul(0.1, t)


def test_a_float16_tensor_times_a_number_is_mindsporess_bit_for_bit(mode):
    # ops.mul reads a float number in float32 and rounds the product once: mul's scale does,
    # without float32 copies (rounding 0.1 to float16 first was an ulp off in a third of the
    # elements). An int it rounds to float16 first (70000 is inf), as opforge does.
    x = Tensor((np.random.default_rng(0).standard_normal(4096) * 3).astype(np.float16))
    for fn in (_mul_tenth, _mul_third, _mul_int, _mul_tenth_first):
        ours, native = both(mode, fn, x)
        assert ours.dtype == native.dtype == mstype.float16
        np.testing.assert_array_equal(ours.asnumpy(), native.asnumpy(), err_msg=fn.__name__)


def _tenth_loss_ours(t):
    return (ofm.mul(t, 0.1) * 3).sum()


def _tenth_loss_native(t):
    return (ops.mul(t, 0.1) * 3).sum()


def test_the_gradient_of_a_float16_tensor_times_a_number_is_mindspores(mode):
    x = Tensor((np.random.default_rng(1).standard_normal(512) * 3).astype(np.float16))
    ours, native = (call(ops.grad(f), mode)(x) for f in (_tenth_loss_ours, _tenth_loss_native))
    np.testing.assert_array_equal(ours.asnumpy(), native.asnumpy())


def _gelu(m, t):
    return m.gelu(t)


def _gelu_tanh(m, t):
    return m.gelu(t, approximate="tanh")


def test_gelu_matches_mindspore_ops_gelu(mode):
    x = f32(6, 9)
    same(*both(mode, _gelu, x), rtol=1e-6, atol=1e-6)
    same(*both(mode, _gelu_tanh, x), rtol=1e-6, atol=1e-6)


def _grads(fn, mode, *args):
    def loss(*values):
        outputs = fn(*values)
        y = outputs[0] if isinstance(outputs, tuple) else outputs
        return (y * y).sum()

    return call(ops.grad(loss, grad_position=tuple(range(len(args)))), mode)(*args)


@pytest.mark.parametrize(
    ("begin_norm_axis", "shape"), [(1, (4, 3, 6)), (-1, (5, 7)), (2, (2, 3, 4, 5))]
)
def test_layer_norm_stats_matches_the_layernorm_primitive_with_gradients(
    mode, begin_norm_axis, shape
):
    x = f32(*shape)
    params = shape[begin_norm_axis:]
    gamma, beta = f32(*params, seed=1), f32(*params, seed=2)

    def ours(t, g, b):
        return ofm.layer_norm_stats(t, g, b, begin_norm_axis, begin_norm_axis, 1e-5)

    def native(t, g, b):
        return ops.LayerNorm(begin_norm_axis, begin_norm_axis, 1e-5)(t, g, b)

    for o, n in zip(
        call(ours, mode)(x, gamma, beta), call(native, mode)(x, gamma, beta), strict=True
    ):
        same(o, n, rtol=1e-5, atol=1e-5)
    for o, n in zip(
        _grads(ours, mode, x, gamma, beta), _grads(native, mode, x, gamma, beta), strict=True
    ):
        same(o, n, rtol=1e-4, atol=1e-4)


def _stats_of(eps):
    def stats(t, g, b):
        return ofm.layer_norm_stats(t, g, b, -1, -1, eps)

    return stats


def _layernorm_of(eps):
    def stats(t, g, b):
        return ops.LayerNorm(-1, -1, eps)(t, g, b)

    return stats


@pytest.mark.parametrize("eps", [10.0, 0.5, 1e-5])
def test_layer_norm_stats_variance_holds_where_eps_dominates(mode, eps):
    # Taken back from rstd = 1 / sqrt(variance + eps), it was 1.9e-6 for 1.25e-6 at eps = 10.
    x = Tensor(np.array([[0, 1e-3, 2e-3, 3e-3], [5, 5, 5, 5], [1, -2, 3, 0.5]], np.float32))
    g, b = Tensor(np.ones(4, np.float32)), Tensor(np.zeros(4, np.float32))
    ours = call(_stats_of(eps), mode)(x, g, b)
    native = call(_layernorm_of(eps), mode)(x, g, b)
    same(ours[2], native[2], rtol=1e-5, atol=0)
    assert ours[2].asnumpy()[1, 0] == 0.0
    # Through y as MindSpore's; through the variance none, as none flows through MindSpore's.
    for o, n in zip(
        _grads(_stats_of(eps), mode, x, g, b),
        _grads(_layernorm_of(eps), mode, x, g, b),
        strict=True,
    ):
        same(o, n, rtol=1e-4, atol=1e-4)
    for o, n in zip(
        _grads(_variance(_stats_of(eps)), mode, x, g, b),
        _grads(_variance(_layernorm_of(eps)), mode, x, g, b),
        strict=True,
    ):
        same(o, n, rtol=1e-4, atol=1e-4)


def _variance(stats):
    def variance(t, g, b):
        return stats(t, g, b)[2]

    return variance


def test_layer_norm_stats_variance_of_constant_rows_is_zero(mode):
    x = Tensor(np.ones((3, 8), np.float32))
    ones, zeros = Tensor(np.ones(8, np.float32)), Tensor(np.zeros(8, np.float32))

    def variance_of(eps):
        def variance(t, g, b):
            return ofm.layer_norm_stats(t, g, b, 1, 1, eps)[2]

        return variance

    for eps in (0.1, 1e-5, 0.3):
        got = call(variance_of(eps), mode)(x, ones, zeros).asnumpy()
        assert (got == 0).all(), got


def test_layer_norm_stats_variance_holds_where_the_mean_dwarfs_the_spread(mode):
    # From the float32 mean alone (up to half an ulp of x off), it came out 1.4% and 33% high.
    values = np.random.default_rng(0).standard_normal((2, 8)) * 1e-3 + 1e4
    x = Tensor(values.astype(np.float32))
    g, b = Tensor(np.ones(8, np.float32)), Tensor(np.zeros(8, np.float32))
    ours = call(_stats_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    native = call(_layernorm_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    reference = x.asnumpy().astype(np.float64).var(-1)
    np.testing.assert_allclose(ours, reference, rtol=1e-4)
    np.testing.assert_allclose(ours, native, rtol=1e-4)


def test_layer_norm_stats_variance_of_rows_with_nan_inf_or_huge_values_matches(mode):
    # A NaN or inf in a row once gave variance 0 (MindSpore's CPU maximum(NaN, 0) is 0), and
    # values whose squares overflow float32 gave inf where the variance is 2e38; a row of
    # +-1e-22 has a subnormal variance (5e-45), or 0 where the thread computing it flushes
    # subnormals: GRAPH mode does, and so may a thread whose floating-point state a library
    # loaded earlier in the process set (seen once, running both adapter suites in one process),
    # on either side. So that row is 0 or the subnormal, never anything else, on both.
    rows = [[np.nan, 1, 2, 3], [np.inf, 1, 2, 3], [2e19, -2e19, 0, 0], [1e-22, -1e-22, 0, 0]]
    x = Tensor(np.array(rows, np.float32))
    g, b = Tensor(np.ones(4, np.float32)), Tensor(np.zeros(4, np.float32))
    ours = call(_stats_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    native = call(_layernorm_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    np.testing.assert_array_equal(np.isnan(ours), [True, True, False, False])
    np.testing.assert_allclose(ours[2], native[2], rtol=1e-6)
    np.testing.assert_allclose(ours[2], 2e38, rtol=1e-6)
    for variance in (ours[3], native[3]):
        assert variance == 0 or abs(variance - 5e-45) < 2e-45, variance


def test_layer_norm_stats_variance_of_a_long_row_of_huge_values_does_not_overflow(mode):
    # Each square of 1e18 fits float32, their sum over 4096 values does not: the variance
    # (1e36) once came out inf. Within a float32 sum's rounding of 4096 terms of MindSpore's.
    x = Tensor(np.array([[1e18, -1e18] * 2048], np.float32))
    g, b = Tensor(np.ones(4096, np.float32)), Tensor(np.zeros(4096, np.float32))
    ours = call(_stats_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    native = call(_layernorm_of(1e-7), mode)(x, g, b)[2].asnumpy().ravel()
    np.testing.assert_allclose(ours, native, rtol=1e-5)
    np.testing.assert_allclose(ours, 1e36, rtol=1e-5)


def test_layer_norm_matches_the_primitive_and_takes_an_int_shape(mode):
    x = f32(4, 3, 6)
    gamma, beta = f32(3, 6, seed=1), f32(3, 6, seed=2)

    def ours(t, g, b):
        return ofm.layer_norm(t, (3, 6), g, b, 1e-3)

    def native(t, g, b):
        return ops.LayerNorm(1, 1, 1e-3)(t, g, b)[0]

    same(call(ours, mode)(x, gamma, beta), call(native, mode)(x, gamma, beta), rtol=1e-5, atol=1e-5)

    def int_shape(t):
        return ofm.layer_norm(t, 6)

    def ones(t):
        return ops.LayerNorm(-1, -1, 1e-5)(
            t, ops.ones(6, mstype.float32), ops.zeros(6, mstype.float32)
        )[0]

    same(call(int_shape, mode)(x), call(ones, mode)(x), rtol=1e-5, atol=1e-5)


def _rms_reference(t, g, eps):
    # MindSpore 2.10 has no CPU RmsNorm kernel: its formula in MindSpore's own ops, for autodiff.
    rstd = ops.rsqrt((t * t).mean(-1, keep_dims=True) + eps)
    return t * rstd * g, rstd


def _rms_without_gamma(t):
    return ofm.rms_norm(t, None)


def test_rms_norm_without_gamma_is_refused_naming_it(mode):
    with pytest.raises(
        TypeError, match=r"opforge\.mindspore\.rms_norm: gamma must be a mindspore\.Tensor"
    ):
        call(_rms_without_gamma, mode)(f32(2, 3))


def test_rms_norm_matches_mindspore_rms_norm_formula_with_gradients(mode):
    documented = Tensor(np.array([[1, 2, 3], [1, 2, 3]], np.float32))
    y, rstd = ofm.rms_norm(documented, Tensor(np.ones(3, np.float32)))
    # The example of mindspore.ops.rms_norm's documentation.
    np.testing.assert_allclose(y.asnumpy()[0], [0.46290997, 0.92581993, 1.3887299], rtol=1e-6)
    assert rstd.shape == (2, 1)
    np.testing.assert_allclose(rstd.asnumpy(), [[0.46290997]] * 2, rtol=1e-6)

    x, gamma = f32(5, 8), f32(8, seed=1)

    def ours(t, g):
        return ofm.rms_norm(t, g, 1e-4)

    def native(t, g):
        return _rms_reference(t, g, 1e-4)

    for o, n in zip(call(ours, mode)(x, gamma), call(native, mode)(x, gamma), strict=True):
        same(o, n, rtol=1e-5, atol=1e-5)
    for o, n in zip(_grads(ours, mode, x, gamma), _grads(native, mode, x, gamma), strict=True):
        same(o, n, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("epsilon", "refused"),
    [(1e-6, False), (1.0, False), (0.0, True), (-0.0, True), (2.0, True), (float("nan"), True)],
)
def test_rms_norm_takes_the_epsilons_mindspore_takes(mode, epsilon, refused):
    # ops.rms_norm checks 0 < epsilon <= 1; eps 0 gave NaN for a row of zeros.
    x, gamma = (
        Tensor(np.array([[0.0, 0.0], [1.0, 2.0]], np.float32)),
        Tensor(np.ones(2, np.float32)),
    )

    def run(t, g):
        return ofm.rms_norm(t, g, epsilon)

    if refused:
        with pytest.raises(ValueError) as info:
            call(run, mode)(x, gamma)
        assert str(info.value).startswith(
            "opforge.mindspore.rms_norm: epsilon must be in (0, 1], as in mindspore.ops.rms_norm"
        )
    else:
        y, _ = call(run, mode)(x, gamma)
        assert np.isfinite(y.asnumpy()).all()


@pytest.mark.parametrize(
    ("x_dtype", "gamma_dtype"),
    [
        (mstype.float16, mstype.float32),
        (mstype.bfloat16, mstype.float32),
        (mstype.float32, mstype.float16),
    ],
)
def test_rms_norm_refuses_a_gamma_of_another_dtype_as_mindspore(mode, x_dtype, gamma_dtype):
    # ops.rms_norm's infer requires one dtype; the kernel would take a float32 gamma.
    x, gamma = f32(2, 3).astype(x_dtype), Tensor(np.ones(3, np.float32)).astype(gamma_dtype)
    with pytest.raises(TypeError) as info:
        call(_rms_norm_of, mode)(x, gamma)
    assert str(info.value).startswith(
        "opforge.mindspore.rms_norm: gamma must have the dtype of x, as in mindspore.ops.rms_norm"
    )
    # One dtype is taken, as by MindSpore.
    y, _ = call(_rms_norm_of, mode)(x, gamma.astype(x_dtype))
    assert y.dtype == x_dtype


def _rms_norm_of(t, g):
    return ofm.rms_norm(t, g)


_OPERANDS = {
    "f16[2,3]": ((2, 3), mstype.float16),
    "f32[2,3]": ((2, 3), mstype.float32),
    "i32[2,3]": ((2, 3), mstype.int32),
    "f16[]": ((), mstype.float16),
    "f32[]": ((), mstype.float32),
    "i32[]": ((), mstype.int32),
    "f16[1]": ((1,), mstype.float16),
    "2.5": 2.5,
    "2": 2,
}


def _operand(key):
    spec = _OPERANDS[key]
    if not isinstance(spec, tuple):
        return spec
    return Tensor(np.ones(spec[0], np.float32)).astype(spec[1])


@pytest.mark.parametrize("name", ["add", "mul"])
@pytest.mark.parametrize("b", list(_OPERANDS))
@pytest.mark.parametrize("a", list(_OPERANDS))
def test_type_promotion_is_mindspores_per_function(name, a, b):
    # MindSpore's add and mul promote differently (mul counts a 0-d tensor as a number, and a
    # Python float as float32 beside one); each opforge function follows its own, or refuses.
    # (float16 with bfloat16 is left out: MindSpore's own mul crashes the process on it.)
    x, y = _operand(a), _operand(b)
    try:
        native = getattr(ops, name)(x, y).dtype
    except (TypeError, ValueError, RuntimeError):
        native = None
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        with pytest.raises(
            TypeError, match=rf"^opforge.mindspore.{name}: give at least one tensor"
        ):
            getattr(ofm, name)(x, y)
        return
    if native is None or native not in (mstype.float32, mstype.float16, mstype.bfloat16):
        with pytest.raises(TypeError, match=rf"^opforge.mindspore.{name}: "):
            getattr(ofm, name)(x, y)
        return
    assert getattr(ofm, name)(x, y).dtype == native


def test_an_uninitialized_tensor_is_refused_as_mindspores_ops_refuse_it():
    # PYNATIVE ran the kernels on whatever the tensor's memory held (add gave 1 for 1 + 1).
    from mindspore.common.initializer import One

    ms.set_device("CPU")

    def fresh():
        return Tensor(shape=(2, 3), dtype=mstype.float32, init=One())

    for name, call_it in (
        ("softmax", lambda t: ofm.softmax(t, -1)),
        ("add", lambda t: ofm.add(t, 1.0)),
        ("mul", lambda t: ofm.mul(2.0, t)),
        ("layer_norm", lambda t: ofm.layer_norm(t, 3)),
        ("gelu", ofm.gelu),
    ):
        with pytest.raises(
            RuntimeError,
            match=rf"^opforge\.mindspore\.{name}: (input|other) is uninitialized .*init_data\(\)",
        ):
            call_it(fresh())
    initialized = fresh()
    initialized.init_data()
    same(ofm.add(initialized, 1.0), ops.add(initialized, 1.0))


def _sum_add(m, x):
    return m.add(x, x)


def _softmax_last(m, x):
    return m.softmax(x, -1)


def _gelu(m, x):
    return m.gelu(x)


def _grad_with_sens(fn, module):
    def forward(x):
        return fn(module, x)

    def grad(x, sens):
        return ops.GradOperation(sens_param=True)(forward)(x, sens)

    return grad


def _graph_mode_grad(fn, module, x, sens):
    """``fn``'s gradient at ``x`` for ``sens``, compiled with the context in GRAPH mode (where a
    bprop gets the sens as given), the context set back to PYNATIVE after."""
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        return ms.jit(_grad_with_sens(fn, module))(x, sens)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("fn", [_sum_add, _softmax_last, _gelu])
def test_a_sens_that_broadcasts_to_the_output_is_broadcast_in_graph_mode(fn, tmp_path, monkeypatch):
    # With the context in GRAPH mode a bprop gets the sens as given (PYNATIVE's jit checks its
    # shape first): add's gradient came back (3,) for a (2, 3) input, softmax's and gelu's
    # backward kernels refused it in MindSpore's words.
    monkeypatch.chdir(tmp_path)
    x = f32(2, 3)
    sens = Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    ours = _graph_mode_grad(fn, ofm, x, sens)
    native = _graph_mode_grad(fn, ops, x, ops.broadcast_to(sens, (2, 3)))
    same(ours, native, rtol=1e-5, atol=1e-6)


def _layer_norm(m, x):
    return m.layer_norm(x, 3)


def _rms_norm(m, x):
    return m.rms_norm(x, ops.ones(3, mstype.float32))[0]


def _batch_norm_training(m, x):
    return m.batch_norm(
        x, ops.zeros(3, mstype.float32), ops.ones(3, mstype.float32), None, None, True
    )


@pytest.mark.parametrize("fn", [_layer_norm, _rms_norm, _batch_norm_training])
def test_a_sens_that_broadcasts_reaches_the_norm_ops_broadcast_in_graph_mode(
    fn, tmp_path, monkeypatch
):
    # Their bprops (several outputs) handed the sens on as given: the backward kernels refused
    # it in MindSpore's words. Broadcasting it is passing the whole one.
    monkeypatch.chdir(tmp_path)
    x = f32(4, 3)
    sens = Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    ours = _graph_mode_grad(fn, ofm, x, sens)
    same(ours, _graph_mode_grad(fn, ofm, x, ops.broadcast_to(sens, (4, 3))))


def _softmax_int32(m, x):
    return m.softmax(x, -1, dtype=mstype.int32)


def _softmax_float64(m, x):
    return m.softmax(x, -1, dtype=mstype.float64)


@pytest.mark.parametrize("fn", [_softmax_int32, _softmax_float64])
def test_softmax_refuses_a_dtype_argument_it_cannot_compute_naming_it(mode, fn):
    # The refusal named the input, whose own dtype was float32.
    def ours(x):
        return fn(ofm, x)

    with pytest.raises(
        TypeError, match=r"opforge\.mindspore\.softmax: dtype=(int32|float64) is not"
    ):
        call(ours, mode)(f32(2, 3))


def _layer_norm_weight_of_4(m, x, w):
    return m.layer_norm(x, (3,), w)


def _rms_norm_gamma_of_4(m, x, w):
    return m.rms_norm(x, w)[0]


@pytest.mark.parametrize("fn", [_layer_norm_weight_of_4, _rms_norm_gamma_of_4])
def test_a_weight_that_does_not_fit_raises_runtime_error_as_mindspores_ops(mode, fn):
    # MindSpore's C++ shape inference raises RuntimeError for these; opforge's error is that and
    # a ValueError, naming the function.
    x, w = f32(2, 3), f32(4)

    def ours(*values):
        return fn(ofm, *values)

    def native(*values):
        return fn(ops, *values)

    with pytest.raises(RuntimeError):
        call(native, mode)(x, w).asnumpy()
    with pytest.raises(ofm.InvalidArgumentError, match=r"^opforge\.mindspore\.(layer|rms)_norm: "):
        call(ours, mode)(x, w)
    assert issubclass(ofm.InvalidArgumentError, ValueError)
