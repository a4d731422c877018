"""The helpers behave as the torch calls they replace: defaults, broadcasting, Python numbers,
type promotion, ``dim=None``, ``dtype=``, in-place running statistics — on every device."""

from __future__ import annotations

import numpy as np
import pytest

from tests.torch_adapter.compile_backend import COMPILE_BACKEND

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def same(ours: torch.Tensor, native: torch.Tensor, **tolerance) -> None:
    assert ours.dtype == native.dtype and ours.shape == native.shape
    torch.testing.assert_close(ours, native, **tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_argmax_without_dim_flattens(device):
    x = torch.tensor([[1.0, 5.0], [7.0, 2.0]], device=device)
    same(ot.argmax(x), torch.argmax(x))
    assert int(ot.argmax(x)) == 2
    same(ot.argmax(x, keepdim=True), torch.argmax(x, keepdim=True))
    y = torch.randn(3, 4, 5, device=device).transpose(0, 2)
    for dim in (None, 0, 1, -1):
        for keepdim in (False, True):
            same(ot.argmax(y, dim, keepdim), torch.argmax(y, dim, keepdim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((10, 1, 5), (1, 10, 5)), ((4, 3), (3,)), ((3,), (4, 3)), ((2, 3), ())]
)
def test_add_broadcasts(device, a_shape, b_shape):
    a, b = torch.randn(a_shape, device=device), torch.randn(b_shape, device=device)
    same(ot.add(a, b), torch.add(a, b))
    same(ot.add(a, b, alpha=-1.5), torch.add(a, b, alpha=-1.5))


@pytest.mark.parametrize("device", DEVICES)
def test_add_takes_python_numbers_and_promotes(device):
    x = torch.randn(4, device=device)
    same(ot.add(x, 2.0), torch.add(x, 2.0))
    same(ot.add(x, 2), torch.add(x, 2))
    same(ot.add(2.0, x), torch.add(2.0, x))
    h = x.half()
    same(ot.add(h, 2.5), torch.add(h, 2.5))
    same(ot.add(h, x), torch.add(h, x))  # float16 + float32 -> float32
    ints = torch.arange(4, device=device)
    same(ot.add(ints, 0.5), torch.add(ints, 0.5))  # int64 + float -> float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_scalar_operand_of_a_2_byte_result_is_rounded_or_not_as_torch_does(device, op, dtype):
    # torch's CUDA kernels read a Python number or a 0-d CPU tensor unrounded (in float32), in
    # either position; its CPU kernels round it to the dtype first, except mul's second operand.
    # Values that the dtype turns into 0, a subnormal or inf tell the two apart; a normal
    # number that torch reads unrounded is rounded here (the op then runs in the dtype), one
    # rounding off at most, hence rtol of the dtype's eps.
    ours, native = getattr(ot, op), getattr(torch, op)
    big = 7e4 if dtype == torch.float16 else 1e39
    h = torch.tensor([1e-4, -1.0, 1000.0, -6e4, 3.0], device=device, dtype=dtype)
    numbers = [1e-8, -7e-8, 7e4, 1e5, big, 1.0009765625, 100003, 1e-39]
    zero_dim = [
        torch.tensor(v, dtype=d, device=where)
        for v in (7e4, 1.0009765625, 1e-10)
        for d in (torch.float32, torch.float64)
        for where in {"cpu", device}
    ] + [torch.tensor(100000), torch.tensor(3, device=device)]
    for other in numbers + zero_dim:
        for a, b in ((h, other), (other, h)):
            expected = native(a, b)
            got = ours(a, b)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(
                got, expected, rtol=torch.finfo(dtype).eps, atol=0, equal_nan=True, msg=str(b)
            )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_a_number_past_float32_is_inf_as_in_torch(device, op):
    x = torch.tensor([1.0, -2.0], device=device)
    for number in (1e39, -1e300):
        same(getattr(ot, op)(x, number), getattr(torch, op)(x, number))
        same(getattr(ot, op)(number, x.half()), getattr(torch, op)(number, x.half()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_2_byte_tensor_times_a_number_is_torchs_bit_for_bit(device, dtype):
    # torch reads the number in float32 and rounds the product once (CPU and CUDA alike, for
    # the second operand): mul's scale does, with no float32 copies. Rounding a number the
    # dtype cannot hold first was an ulp off in 20-60% of the elements, and 70000 in float16
    # made every product inf.
    x = (torch.randn(10000, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    x = x.to(device).requires_grad_()
    for number in (0.1, 0.3, -1 / 3, 1e-3, 70000.0, 70000, 1.0009765625, 3e-6):
        ours, theirs = ot.mul(x, number), torch.mul(x, number)
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs), number
        g = torch.randn(10000, generator=torch.Generator().manual_seed(1)).to(dtype).to(device)
        mine, reference = (torch.autograd.grad(y, x, g)[0] for y in (ours, theirs))
        assert torch.equal(mine, reference), number


def _times(t, number):
    return ot.mul(t, number)


def _plus(t, number):
    return ot.add(t, number)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_number_given_to_a_compiled_2_byte_add_or_mul_is_read_as_torch_reads_it(device, dynamic):
    # With dynamic shapes Dynamo passes a float input as a symbol: the checks of whether the
    # dtype holds it recursed without end inside Dynamo (mul on CPU, add on CUDA). Dynamo's
    # caches are emptied first: each parametrisation compiles the same two functions again, and
    # recompiles past its limit (8) fail a fullgraph compile.
    torch._dynamo.reset()
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(2)) * 3).half().to(device)
    for helper, reference in ((_times, torch.mul), (_plus, torch.add)):
        compiled = torch.compile(helper, fullgraph=True, dynamic=dynamic, backend=COMPILE_BACKEND)
        for number in (0.3, 1e-3, 2.5):
            assert torch.equal(compiled(x, number), reference(x, number)), (helper, number)


@pytest.mark.parametrize("default", [torch.float16, torch.bfloat16])
def test_two_numbers_under_a_2_byte_default_dtype_are_torchs(default):
    # mul crashed (AttributeError: 'float' object has no attribute 'to') folding the second
    # number while the first was no tensor.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        for a, b in ((0.1, 0.1), (2, 0.5), (True, 0.5), (0.3, 3), (0.1, 0.2)):
            for ours, theirs in ((ot.mul, torch.mul), (ot.add, torch.add)):
                same(ours(a, b), theirs(a, b), rtol=0, atol=0)
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("device", DEVICES)
def test_a_0_d_tensor_alpha_past_the_dtype_is_refused_as_a_number_is(device):
    # It was never range-checked: rounded to float16 on CPU it became inf, silently.
    h = torch.tensor([1.0, -2.0, 0.5], device=device, dtype=torch.half)
    # torch's CUDA kernel takes alpha in float32, its CPU one in the dtype.
    alphas = [torch.tensor(1e40, dtype=torch.float64)]
    if device == "cpu":
        alphas.append(torch.tensor(70000.0))
    for alpha in alphas:
        with pytest.raises(RuntimeError):
            torch.add(h, h, alpha=alpha)
        with pytest.raises(RuntimeError, match=r"^opforge\.torch\.add: alpha .* does not fit"):
            ot.add(h, h, alpha=alpha)
    same(ot.add(h, h, alpha=torch.tensor(2.0)), torch.add(h, h, alpha=torch.tensor(2.0)))


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_refuses_a_dtype_argument_it_cannot_compute_naming_it(device):
    # The refusal named x's dtype as if the caller's float32 input were float64.
    x = torch.randn(3, device=device)
    for dtype in (torch.float64, torch.int32):
        with pytest.raises(
            NotImplementedError,
            match=rf"^opforge\.torch\.softmax: dtype={str(dtype)[6:]} is not supported: pass",
        ):
            ot.softmax(x, 0, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs_with_a_huge_other_dim_cost_nothing(device):
    # The CPU reference laid out an offset per element of a row even with no rows: a (0, 2^40)
    # layer_norm never finished, a (0, 2^24) one took half a second and gigabytes.
    n = 2**40
    for ours, theirs in (
        (lambda t: ot.layer_norm(t, (n,)), lambda t: torch.nn.functional.layer_norm(t, (n,))),
        (lambda t: ot.rms_norm(t, (n,)), lambda t: torch.nn.functional.rms_norm(t, (n,))),
    ):
        x = torch.empty(0, n, device=device)
        same(ours(x), theirs(x))
    x = torch.empty(0, 2**20, device=device, requires_grad=True)
    w = torch.ones(2**20, device=device, requires_grad=True)
    ot.layer_norm(x, (2**20,), w).sum().backward()
    assert w.grad is not None and not w.grad.any(), "a sum over no rows is 0"
    wide = torch.empty(2**40, 0, device=device)
    empty = torch.empty(0, device=device)
    for training in (True, False):
        same(
            ot.batch_norm(wide, empty, empty, training=training),
            torch.nn.functional.batch_norm(wide, empty, empty, training=training),
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 3, 2, 2, 2), (2, 0, 2, 2, 2), (2, 3, 0, 2, 2)])
def test_training_batch_norm_of_an_empty_5_d_input_is_torchs(device, shape):
    x = torch.empty(shape, device=device)
    same(
        ot.batch_norm(x, None, None, training=True),
        torch.nn.functional.batch_norm(x, None, None, training=True),
    )
    one = torch.randn(1, 3, 1, 1, 1, device=device)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        torch.nn.functional.batch_norm(one, None, None, training=True)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        ot.batch_norm(one, None, None, training=True)


@pytest.mark.parametrize("device", DEVICES)
def test_a_parameter_of_a_dtype_the_stable_abi_lacks_is_refused_naming_it(device):
    # bits16 weights failed in LibTorch ("Not yet supported ScalarType 22", a header's path),
    # float8 ones as "unsupported (DLPack code 3)".
    x = torch.randn(2, 3, device=device)
    for weight in (
        torch.zeros(3, dtype=torch.uint16, device=device).view(torch.bits16),
        torch.zeros(3, device=device).to(torch.float8_e4m3fn),
    ):
        name = str(weight.dtype).removeprefix("torch.")
        for call, args in (
            (ot.layer_norm, (x, (3,), weight)),
            (ot.rms_norm, (x, (3,), weight)),
            (ot.batch_norm, (x, None, None, weight, None, True)),
        ):
            with pytest.raises(RuntimeError, match=rf"^opforge::\w+: weight must be .*got {name}$"):
                call(*args)


def test_a_float32_add_takes_alpha_in_float32_bit_for_bit():
    # alpha went to the CPU kernel as a double: 1-ulp differences in about a fifth of the
    # elements. (The CUDA kernel has always cast it to float32.) The answer is torch's
    # vectorised one, a + float32(alpha) * b rounded once; torch's scalar loop, which takes
    # the last few elements of each thread's chunk, rounds twice, so torch's own answer moves
    # by an ulp there with the thread count (one element of these on a 16-core machine).
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(100_000, generator=g) for _ in range(2))
    for alpha in (0.7, 1 / 3, 0.1, -2.5e-3):
        alpha32 = torch.tensor(alpha, dtype=torch.float32).double()
        for other, other32 in ((b, b), (0.1, torch.tensor(0.1, dtype=torch.float32))):
            rounded_once = (a.double() + alpha32 * other32.double()).float()
            ours = ot.add(a, other, alpha=alpha)
            same(ours, rounded_once, rtol=0, atol=0)
            same(ours, torch.add(a, other, alpha=alpha), rtol=2**-23, atol=0)


def test_an_alpha_that_is_no_number_torch_takes_is_refused():
    import decimal
    import fractions

    t = torch.ones(2)
    for alpha in (fractions.Fraction(1, 3), decimal.Decimal("0.5")):
        with pytest.raises(TypeError):
            torch.add(t, t, alpha=alpha)
        with pytest.raises(TypeError, match=r"^opforge::add: alpha must be a number, got"):
            ot.add(t, t, alpha=alpha)


@pytest.mark.parametrize("device", DEVICES)
def test_2_byte_running_statistics_are_checked_before_the_kernel_as_float32_ones_are(device):
    # The float32 copies hid overlapping and expanded statistics from the kernels' checks: the
    # variance silently won, or the write-back failed in torch's words after the mean had been
    # updated.
    x = torch.randn(4, 3, device=device).bfloat16()
    shared = torch.zeros(3, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="running_var and running_mean overlap in memory"):
        ot.batch_norm(x, shared, shared, training=True)
    mean = torch.zeros(3, device=device, dtype=torch.bfloat16)
    expanded = torch.ones(1, device=device, dtype=torch.bfloat16).expand(3)
    with pytest.raises(RuntimeError, match="running_var has overlapping elements"):
        ot.batch_norm(x, mean, expanded, training=True)
    assert not mean.any(), "nothing was updated"
    # Read only in inference: one tensor may serve as both.
    same(
        ot.batch_norm(x, shared, shared + 1, training=False),
        torch.nn.functional.batch_norm(x, shared, shared + 1, training=False),
        rtol=0.02,
        atol=0.02,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_2_byte_running_statistics_made_in_inference_mode_are_updated_as_torch_updates_them(
    device,
):
    x = torch.randn(4, 3, device=device).bfloat16()
    stats = []
    for _ in range(2):
        with torch.inference_mode():
            stats.append(
                (
                    torch.zeros(3, device=device, dtype=torch.bfloat16),
                    torch.ones(3, device=device, dtype=torch.bfloat16),
                )
            )
    ot.batch_norm(x, *stats[0], training=True)
    torch.nn.functional.batch_norm(x, *stats[1], training=True)
    for ours, theirs in zip(stats[0], stats[1], strict=True):
        same(ours, theirs, rtol=0.01, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_2_byte_batch_norm_refuses_parameters_of_mixed_dtypes_as_torch(device):
    x = torch.randn(4, 3, device=device).bfloat16()

    def vector(dtype, value=0.0):
        return torch.full((3,), value, device=device, dtype=dtype)

    half, full = torch.bfloat16, torch.float32
    for mean, var, weight in ((full, full, half), (half, full, None), (half, half, full)):
        args = (x, vector(mean), vector(var, 1.0), None if weight is None else vector(weight, 1.0))
        if device == "cpu":
            with pytest.raises(RuntimeError):
                torch.nn.functional.batch_norm(*args, training=True)
        with pytest.raises(RuntimeError, match="must all be float32 or all the input's dtype"):
            ot.batch_norm(*args, training=True)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_a_2_byte_mul_by_a_number_is_torchs(device):
    for number in (1e-8, 7e4, 0.1):
        grads = []
        for op in (ot.mul, torch.mul):
            x = torch.tensor([1.0, -3.0], device=device, dtype=torch.float16, requires_grad=True)
            grads += torch.autograd.grad(op(x, number).sum(), x)
        same(*grads)


def test_result_dtype_is_torch_result_type():
    from opforge.torch._runtime import result_dtype

    tensors = [
        torch.ones(2, dtype=d) if dim else torch.tensor(1, dtype=d)
        for d in (
            torch.float32,
            torch.float16,
            torch.bfloat16,
            torch.int64,
            torch.int32,
            torch.bool,
            torch.float64,
            torch.complex64,
            torch.complex128,
        )
        for dim in (0, 1)
    ]
    values = [*tensors, True, 3, 2.5]
    for a in values:
        for b in values:
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
                assert result_dtype(a, b) == torch.result_type(a, b), (a, b)


@pytest.mark.parametrize("op", [ot.add, ot.mul])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_a_complex_zero_dim_operand_is_refused_not_made_real(op, dtype):
    """torch's result beside a 0-d complex tensor is complex (complex32 for float16): opforge
    refuses it, in either position, rather than dropping the imaginary part."""
    x = torch.ones(2, dtype=dtype)
    z = torch.tensor(1 + 2j)
    expected = torch.result_type(x, z)
    for a, b in ((x, z), (z, x)):
        with pytest.raises(NotImplementedError, match=rf"the result dtype would be {expected}"):
            op(a, b)


def test_a_float8_tensor_beside_a_complex_one_is_refused_in_one_line():
    with pytest.raises(
        NotImplementedError, match=r"opforge\.torch\.mul: the result dtype would be"
    ):
        ot.mul(torch.zeros(2).to(torch.float8_e4m3fn), torch.tensor(1 + 2j))


@pytest.mark.parametrize("device", DEVICES)
def test_add_refuses_results_opforge_does_not_compute(device):
    ints = torch.arange(4, device=device)
    with pytest.raises(RuntimeError, match="opforge::add: a has dtype int64"):
        ot.add(ints, ints)
    with pytest.raises(
        NotImplementedError, match=r"opforge.torch.add: the result dtype would be torch.int64"
    ):
        ot.add(ints, 2)
    with pytest.raises(
        NotImplementedError, match=r"opforge.torch.add: the result dtype would be torch.float64"
    ):
        ot.add(torch.ones(3, device=device, dtype=torch.float64), 1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_add_gradients_sum_over_broadcast_dims(device):
    a = torch.randn(4, 3, device=device, requires_grad=True)
    b = torch.randn(3, device=device, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    ot.add(a, b, alpha=2.0).pow(2).sum().backward()
    torch.add(a2, b2, alpha=2.0).pow(2).sum().backward()
    same(a.grad, a2.grad)
    same(b.grad, b2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_dtype_casts_first(device):
    x = torch.randn(4, 7, device=device, dtype=torch.float16, requires_grad=True)
    ours = ot.softmax(x, -1, dtype=torch.float32)
    native = torch.softmax(x, -1, dtype=torch.float32)
    same(ours, native)
    (ours * 2).sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax_gives_masked_logits_no_probability(device, dtype):
    lowest = torch.finfo(dtype).min
    x = torch.tensor([[0.0, -100.0, -1e4, lowest, float("-inf")]] * 3, device=device)
    x = torch.cat([x, torch.randn(3, 40, device=device)], 1).to(dtype)
    for dim in (-1, 0):  # over dim 0 the all -inf column is NaN, as torch's
        same(ot.softmax(x, dim), torch.softmax(x, dim), equal_nan=True)
    ours = ot.softmax(x, -1)
    assert (ours[:, 2:5] == 0).all()  # exactly, as torch: no mass on masked positions
    if dtype == torch.float32:  # differences overflowing to -inf get none either
        far = ot.softmax(torch.tensor([3e38, -3e38, 3e38], device=device), 0)
        assert far[1] == 0 and far[0] == far[2] == 0.5


def test_softmax_needs_dim_as_torch_softmax():
    with pytest.raises(TypeError):
        ot.softmax(torch.randn(3))  # torch.softmax(x) raises too


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_matches_functional_batch_norm(device):
    x = torch.randn(8, 3, 5, device=device)
    w, b = torch.rand(3, device=device) + 0.5, torch.randn(3, device=device)
    for training in (True, False):
        rm, rv = torch.randn(3, device=device), torch.rand(3, device=device) + 0.5
        rm2, rv2 = rm.clone(), rv.clone()
        ours = ot.batch_norm(x, rm, rv, w, b, training, 0.3, 1e-3)
        native = torch.nn.functional.batch_norm(x, rm2, rv2, w, b, training, 0.3, 1e-3)
        same(ours, native, rtol=1e-5, atol=1e-5)
        same(rm, rm2, rtol=1e-5, atol=1e-6)  # updated in place, PyTorch's momentum
        same(rv, rv2, rtol=1e-5, atol=1e-6)
    same(
        ot.batch_norm(x, None, None, training=True),
        torch.nn.functional.batch_norm(x, None, None, training=True),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("shape", "channels_last"),
    [((4, 3, 5, 6, 7), False), ((4, 3, 5, 6, 7), True), ((2, 3, 2, 3, 2, 2), False)],
    ids=["5d", "5d-channels_last_3d", "6d"],
)
def test_batch_norm_over_more_than_four_dims_as_torch(device, shape, channels_last):
    # BatchNorm3d's N x C x D x H x W: the dims after C go to the kernels as one. torch's CPU
    # kernel is the reference on every device: its CUDA one (cuDNN) refuses more than 5 dims.
    x = torch.randn(*shape, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last_3d)
    x.requires_grad_()
    w = torch.rand(3, device=device, requires_grad=True)
    b = torch.randn(3, device=device, requires_grad=True)
    cpu = [t.detach().cpu().requires_grad_() for t in (x, w, b)]
    for training in (True, False):
        rm, rv = torch.randn(3, device=device), torch.rand(3, device=device) + 0.5
        rm2, rv2 = rm.cpu(), rv.cpu()
        ours = ot.batch_norm(x, rm, rv, w, b, training, 0.3, 1e-3)
        native = torch.nn.functional.batch_norm(
            cpu[0], rm2, rv2, cpu[1], cpu[2], training, 0.3, 1e-3
        )
        same(ours.cpu(), native, rtol=1e-5, atol=1e-5)
        same(rm.cpu(), rm2, rtol=1e-5, atol=1e-6)
        same(rv.cpu(), rv2, rtol=1e-5, atol=1e-6)
        g = torch.randn_like(native)
        for mine, theirs in zip(
            torch.autograd.grad(ours, (x, w, b), g.to(device)),
            torch.autograd.grad(native, cpu, g),
            strict=True,
        ):
            same(mine.cpu(), theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 2, 3)])
def test_batch_norm_takes_parameters_in_the_input_dtype_as_torch(device, dtype, shape):
    # OpInfo's float16/bfloat16 samples give weight, bias and running statistics in the input's
    # dtype, as torch's CPU call takes them: computed in float32, the running statistics rounded
    # back in place, the gradients in the parameters' dtype. torch's CPU call is the reference.
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=gen).to(dtype)
    w, b = torch.rand(3, generator=gen).to(dtype) + 0.5, torch.randn(3, generator=gen).to(dtype)
    g = torch.randn(*shape, generator=gen).to(dtype)
    tolerance = (
        {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 2e-3, "atol": 2e-3}
    )
    for training in (True, False):
        rm = torch.randn(3, generator=gen).to(dtype)
        rv = (torch.rand(3, generator=gen) + 0.5).to(dtype)
        ours_in = [t.to(device).requires_grad_() for t in (x, w, b)]
        theirs_in = [t.clone().requires_grad_() for t in (x, w, b)]
        rm_ours, rv_ours = rm.to(device), rv.to(device)
        rm_theirs, rv_theirs = rm.clone(), rv.clone()
        ours = ot.batch_norm(ours_in[0], rm_ours, rv_ours, *ours_in[1:], training, 0.3, 1e-3)
        theirs = torch.nn.functional.batch_norm(
            theirs_in[0], rm_theirs, rv_theirs, *theirs_in[1:], training, 0.3, 1e-3
        )
        same(ours.cpu(), theirs, **tolerance)
        # One rounding of the same float32 update: at most one step of the dtype apart.
        same(rm_ours.cpu(), rm_theirs, rtol=8e-3, atol=1e-3)
        same(rv_ours.cpu(), rv_theirs, rtol=8e-3, atol=1e-3)
        for mine, reference in zip(
            torch.autograd.grad(ours, ours_in, g.to(device)),
            torch.autograd.grad(theirs, theirs_in, g),
            strict=True,
        ):
            same(mine.cpu(), reference, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_batch_norm_with_2_byte_statistics_compiles_and_exports_as_torch(dtype):
    """The statistics' checks that read addresses are eager only: torch.compile (fullgraph) and
    torch.export trace with fake tensors, and both update the statistics as eager opforge does;
    one tensor, or two views of one, as the statistics is refused there (fake tensors cannot
    tell whether views overlap)."""
    x = torch.arange(20.0).reshape(5, 4).to(dtype)

    def stats():
        return torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)

    rm, rv = stats()
    torch.nn.functional.batch_norm(x, rm, rv, None, None, True, 0.3)
    eager_m, eager_v = stats()
    ot.batch_norm(x, eager_m, eager_v, None, None, True, 0.3)
    ours_m, ours_v = stats()
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda t: ot.batch_norm(t, ours_m, ours_v, None, None, True, 0.3),
        fullgraph=True,
        backend="aot_eager",
    )
    same(compiled(x), torch.nn.functional.batch_norm(x, *stats(), None, None, True, 0.3))
    assert torch.equal(ours_m, eager_m) and torch.equal(ours_v, eager_v)
    # One rounding of the same float32 update: at most one step of the dtype from torch's.
    same(ours_m, rm, rtol=8e-3, atol=1e-3)
    same(ours_v, rv, rtol=8e-3, atol=1e-3)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("rm", torch.zeros(4, dtype=dtype))
            self.register_buffer("rv", torch.ones(4, dtype=dtype))

        def forward(self, t):
            return ot.batch_norm(t, self.rm, self.rv, None, None, True, 0.3)

    exported = torch.export.export(Model(), (x,)).module()
    model = Model()
    same(exported(x), model(x))
    assert torch.equal(exported.rm, model.rm) and torch.equal(exported.rv, model.rv)
    assert torch.equal(model.rm, eager_m) and torch.equal(model.rv, eager_v)

    whole = torch.ones(8, dtype=dtype)
    for rm_, rv_ in ((whole[:4], whole[:4]), (whole[:4], whole[2:6]), (whole[:4], whole[4:])):
        torch._dynamo.reset()
        aliased = torch.compile(
            lambda t, m=rm_, v=rv_: ot.batch_norm(t, m, v, None, None, True, 0.3),
            fullgraph=True,
            backend="aot_eager",
        )
        with pytest.raises(Exception, match="running_var and running_mean are views of one"):
            aliased(x)


def test_batch_norm_refuses_parameters_torch_refuses():
    # A float32 input with 2-byte parameters, or a parameter of a third dtype: torch's CPU call
    # refuses it, and so does opforge, naming the parameter.
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match=r"^opforge::batch_norm: weight must be float32"):
        ot.batch_norm(x, None, None, torch.ones(3).half(), training=True)
    with pytest.raises(RuntimeError, match=r"^opforge::batch_norm: running_mean must be float32"):
        ot.batch_norm(x.half(), torch.zeros(3).bfloat16(), torch.ones(3), training=True)


def test_batch_norm_names_the_input_it_was_given():
    # Not the N x C x L view the kernels get, nor their 2-to-4-dims rule.
    with pytest.raises(
        ValueError, match=r"1 value per channel, got input of shape \[1, 3, 1, 1, 1\]$"
    ):
        ot.batch_norm(torch.randn(1, 3, 1, 1, 1), None, None, training=True)
    for x in (torch.randn(3), torch.tensor(1.0)):
        with pytest.raises(
            RuntimeError, match=r"^opforge.torch.batch_norm: input must have a batch"
        ):
            ot.batch_norm(x, None, None, training=True)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_refuses_eps_zero_in_training_as_torch(device):
    x = torch.ones(4, 3, device=device)  # a constant channel: 1 / sqrt(0 + eps)
    with pytest.raises(
        ValueError,
        match=r"^opforge.torch.batch_norm: eps must be positive during training, got 0\.0$",
    ):
        ot.batch_norm(x, None, None, training=True, eps=0.0)
    # torch's own words vary by release (2.11: "eps must be positive, but got 0.0").
    with pytest.raises(ValueError, match=r"eps must be positive.* but got 0\.0"):
        torch.nn.functional.batch_norm(x, None, None, training=True, eps=0.0)
    # Inference divides by the running variance, which eps=0 leaves well defined: torch 2.13
    # takes it (2.11 refused it too), and so does opforge, with the formula's result.
    mean, var = torch.full((3,), 0.5, device=device), torch.full((3,), 4.0, device=device)
    same(ot.batch_norm(x, mean, var, training=False, eps=0.0), torch.full_like(x, 0.25))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((10, 1, 5), (1, 10, 5)), ((4, 3), (3,)), ((2, 3), ())]
)
def test_mul_broadcasts_takes_numbers_and_sums_gradients(device, a_shape, b_shape):
    a = torch.randn(a_shape, device=device, requires_grad=True)
    b = torch.randn(b_shape, device=device, requires_grad=True)
    ours, native = ot.mul(a, b), torch.mul(a, b)
    same(ours, native)
    dy = torch.randn_like(native)
    same_grads = torch.autograd.grad(ours, (a, b), dy), torch.autograd.grad(native, (a, b), dy)
    for o, n in zip(*same_grads, strict=True):
        same(o, n)
    same(ot.mul(a, 2), torch.mul(a, 2))
    same(ot.mul(3.5, a.half()), torch.mul(3.5, a.half()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_functional_gelu_with_gradients_and_forward_mode(device, approximate):
    x = torch.randn(5, 7, device=device, requires_grad=True)
    ours = ot.gelu(x, approximate=approximate)
    native = torch.nn.functional.gelu(x, approximate=approximate)
    same(ours, native)
    dy = torch.randn_like(native)
    same(torch.autograd.grad(ours, x, dy)[0], torch.autograd.grad(native, x, dy)[0])
    t = torch.randn_like(x)
    _, jvp_ours = torch.func.jvp(lambda v: ot.gelu(v, approximate=approximate), (x.detach(),), (t,))
    _, jvp_native = torch.func.jvp(
        lambda v: torch.nn.functional.gelu(v, approximate=approximate), (x.detach(),), (t,)
    )
    same(jvp_ours, jvp_native)
    same(ot.gelu(x), torch.nn.functional.gelu(x))  # approximate defaults to 'none'


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_matches_functional_layer_norm(device, affine):
    x = torch.randn(4, 3, 6, device=device, requires_grad=True)
    shape = (3, 6)
    w = torch.randn(shape, device=device, requires_grad=True) if affine else None
    b = torch.randn(shape, device=device, requires_grad=True) if affine else None
    ours = ot.layer_norm(x, shape, w, b, eps=1e-3)
    native = torch.nn.functional.layer_norm(x, shape, w, b, eps=1e-3)
    same(ours, native, rtol=1e-5, atol=1e-5)
    inputs = [t for t in (x, w, b) if t is not None]
    dy = torch.randn_like(native)
    for o, n in zip(
        torch.autograd.grad(ours, inputs, dy), torch.autograd.grad(native, inputs, dy), strict=True
    ):
        same(o, n, rtol=1e-4, atol=1e-4)
    same(
        ot.layer_norm(x, torch.Size([6])),
        torch.nn.functional.layer_norm(x, [6]),
        rtol=1e-5,
        atol=1e-5,
    )


def test_layer_norm_refuses_an_int_shape_as_torch_does():
    x = torch.randn(2, 4)
    with pytest.raises(TypeError, match=r"torch.nn.functional|normalized_shape"):
        torch.nn.functional.layer_norm(x, 4)
    with pytest.raises(
        TypeError, match=r"^opforge.torch.layer_norm: normalized_shape must be a tuple"
    ):
        ot.layer_norm(x, 4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_default_eps_is_float32_epsilon_as_torch(device, dtype):
    # Small values make eps matter: torch takes float32's epsilon for every input dtype.
    x = (torch.randn(3, 8, device=device) * 1e-3).to(dtype).requires_grad_()
    w = torch.randn(8, device=device, dtype=dtype, requires_grad=True)
    ours, native = ot.rms_norm(x, (8,), w), torch.nn.functional.rms_norm(x, (8,), w)
    tolerance = (
        {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    )
    same(ours, native, **tolerance)
    dy = torch.randn_like(native)
    for o, n in zip(
        torch.autograd.grad(ours, (x, w), dy), torch.autograd.grad(native, (x, w), dy), strict=True
    ):
        same(o, n, **({"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else tolerance))
    same(ot.rms_norm(x, (8,), eps=0.5), torch.nn.functional.rms_norm(x, (8,), eps=0.5), **tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_norms_refuse_forward_mode_naming_the_op(device):
    x = torch.randn(2, 4, device=device)
    for fn in (lambda v: ot.layer_norm(v, (4,)), lambda v: ot.rms_norm(v, (4,))):
        with pytest.raises(RuntimeError, match="opforge"):
            torch.func.jvp(fn, (x,), (torch.ones_like(x),))


@pytest.mark.parametrize("device", DEVICES)
def test_add_with_alpha_gives_the_same_bits_in_any_layout(device):
    # The contiguous CPU path computed in float, the strided one in float64: an ulp apart.
    a, b = torch.randn(1000, 64, device=device), torch.randn(1000, 64, device=device)
    column_major = (a.t().contiguous().t(), b.t().contiguous().t())
    assert torch.equal(ot.add(a, b, alpha=0.1), ot.add(*column_major, alpha=0.1))
    row = b[0]
    assert torch.equal(
        ot.add(a, row, alpha=0.1), ot.add(a, row.expand_as(a).contiguous(), alpha=0.1)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_scalars_and_ints_are_taken_as_torch_takes_them(device):
    x = torch.randn(3, 4, device=device)
    h = x.half()
    for scalar in (np.float32(2.5), np.float16(0.5), np.int64(3), np.bool_(True)):
        same(ot.mul(h, scalar), torch.mul(h, scalar))
        same(ot.add(scalar, x), torch.add(scalar, x))
    for shape in ((np.int64(4),), [torch.tensor(4)]):
        same(ot.layer_norm(x, shape), torch.nn.functional.layer_norm(x, shape))


@pytest.mark.parametrize("device", DEVICES)
def test_a_number_first_seen_under_inference_mode_still_serves_autograd(device):
    # Helpers keep the 0-d tensors of the numbers they are given; one made under inference_mode
    # would be an inference tensor, which autograd refuses to save.
    x = torch.randn(4, device=device, dtype=torch.float16)
    with torch.inference_mode():
        ot.mul(x, 0.3125)
    h = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(ot.mul(h, 0.3125).sum(), h)
    same(grad, torch.full_like(x, 0.3125))


def test_fake_tensor_mode_leaves_nothing_behind_for_eager_calls():
    # A kept 0-d tensor of the number, made under the mode, was once reused by eager calls.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        ot.mul(torch.empty(3), 0.5)
    same(ot.mul(torch.ones(3), 0.5), torch.full((3,), 0.5))


def test_jit_trace_of_a_number_passes_its_own_check():
    class Scaled(torch.nn.Module):
        def forward(self, x):
            return ot.mul(x, 0.7) + ot.add(x, 0.3)

    x = torch.randn(3)
    traced = torch.jit.trace(Scaled(), x)  # check_trace=True re-traces and compares graphs
    same(traced(x), x * 0.7 + (x + 0.3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "call",
    [
        lambda p: ot.mul(p, 0.1),
        lambda p: ot.mul(0.1, p),
        lambda p: ot.add(p, 2.5, alpha=2),
        lambda p: ot.add(p, torch.tensor(0.1)),
    ],
)
@pytest.mark.parametrize(
    ("traced", "run"),
    [
        (torch.float32, torch.float16),
        (torch.float16, torch.float32),
        (torch.float32, torch.bfloat16),
    ],
)
def test_a_trace_run_on_another_dtype_is_refused_not_computed_in_the_traced_one(
    device, call, traced, run
):
    # The trace once converted the input to the traced dtype: a float16 input gave float32.
    x = torch.randn(3, device=device)
    try:
        trace = torch.jit.trace(call, (x.to(traced),), check_trace=False)
    except RuntimeError as exc:
        # A number or 0-d tensor torch reads unrounded beside a float16 one (the operand
        # torch's CUDA kernel takes in float32): computed in float32, refused while tracing.
        assert traced == torch.float16 and device == "cuda", exc
        said = ("opforge.torch.mul: under torch.jit.trace, ", "opforge.torch.add: under torch.jit.")
        assert str(exc).startswith(said), exc
        return
    same(trace(x.to(traced)), call(x.to(traced)))
    with pytest.raises(RuntimeError, match=r"opforge::(mul|add): dtype mismatch"):
        trace(x.to(run))


@pytest.mark.parametrize("device", DEVICES)
def test_a_trace_of_operands_computed_in_float32_and_cast_back_is_refused(device):
    h = torch.randn(3, device=device, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=r"^opforge\.torch\.mul: under torch\.jit\.trace, "):
        torch.jit.trace(lambda p: ot.mul(p, torch.tensor(0.1)), (h,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("alpha", [1e-8, 1e-45, 1e-6, 3.3, -0.1, np.float64(1e-8)])
def test_an_alpha_the_dtype_rounds_is_rounded_where_torch_rounds_it(device, dtype, alpha):
    # torch's CPU kernel converts alpha to the dtype (1e-8 is 0 in float16, and 0 * inf is NaN);
    # its CUDA kernel computes in float32.
    a = torch.tensor([0.0, 1.0, 0.0, 2.0], dtype=dtype, device=device)
    b = torch.tensor([1000.0, float("inf"), 0.0, 3.0], dtype=dtype, device=device)
    same(ot.add(a, b, alpha=alpha), torch.add(a, b, alpha=alpha), equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_symbolic_alpha_is_taken_unrounded_as_compiled_torch_takes_it(device, dtype):
    # With dynamic shapes a float argument is symbolic while the graph is traced: no value to
    # round or check. Compiled torch.add takes it unrounded; so does opforge (it crashed tracing).
    torch._dynamo.reset()
    a = torch.randn(4, 5, device=device).to(dtype)
    b = torch.randn(4, 5, device=device).to(dtype)
    compiled = torch.compile(
        lambda x, y, s: ot.add(x, y, alpha=s), dynamic=True, fullgraph=True, backend=COMPILE_BACKEND
    )
    for alpha in (3.0, 0.1, 7e4, 2):
        # alpha as given, the sum rounded once: what the CPU kernel computes for 2-byte dtypes
        # exactly (in float64); on CUDA and for float32 within one rounding.
        expected = (a.double() + alpha * b.double()).to(dtype)
        exact = device == "cpu" and dtype != torch.float32
        same(compiled(a, b, alpha), expected, **({"rtol": 0, "atol": 0} if exact else {}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("alpha", [None, "0.1", [0.1]])
def test_an_alpha_that_is_not_a_number_is_refused_naming_it(device, alpha):
    h = torch.ones(2, device=device, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"^opforge::add: alpha must be a number, got"):
        ot.add(h, h, alpha=alpha)


def test_bool_operands_are_refused_for_their_dtype_whatever_the_alpha():
    b = torch.tensor([True, False])
    for alpha in (True, 2, 0.5):
        with pytest.raises(NotImplementedError, match=r"^opforge::add: a has dtype bool"):
            ot.add(b, b, alpha=alpha)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("eps", [-0.5, -0.1, float("inf"), float("nan"), 0.0])
def test_norms_take_any_eps_as_torch(device, eps):
    # torch computes 1/sqrt(var + eps) whatever eps is (OpInfo's samples include eps=-0.5): rows
    # whose variance is under -eps are NaN, an infinite eps gives rstd 0. A row whose variance
    # lies just above -eps magnifies a last-bit difference in it (var / (var + eps) times: an
    # unseeded run once drew a row of variance 0.52 for eps -0.5), hence the seed and rtol 1e-4.
    gen = torch.Generator().manual_seed(7)
    scale = torch.linspace(0.3, 2.0, 6)[:, None]
    x = (torch.randn(6, 8, generator=gen) * scale).to(device).requires_grad_()
    w = torch.rand(8, generator=gen).to(device).requires_grad_()
    for ours, native in (
        (ot.layer_norm(x, [8], w, None, eps), torch.nn.functional.layer_norm(x, [8], w, None, eps)),
        (ot.rms_norm(x, [8], w, eps), torch.nn.functional.rms_norm(x, [8], w, eps)),
    ):
        same(ours, native, equal_nan=True, rtol=1e-4, atol=1e-5)
        g = torch.randn_like(native)
        for mine, theirs in zip(
            torch.autograd.grad(ours, (x, w), g),
            torch.autograd.grad(native, (x, w), g),
            strict=True,
        ):
            same(mine, theirs, equal_nan=True, rtol=1e-4, atol=1e-5)


def test_two_numbers_are_added_and_multiplied_as_torch():
    # torch makes 0-d tensors of the default dtype of them (OpInfo's add and mul samples).
    for a, b in ((2.0, 3.0), (2, 3.5), (True, 2.5), (-8.5, -1.7)):
        same(ot.add(a, b), torch.add(a, b))
        same(ot.mul(a, b), torch.mul(a, b))
    same(ot.add(2.0, 3.0, alpha=2), torch.add(2.0, 3.0, alpha=2))
    with pytest.raises(NotImplementedError, match=r"^opforge.torch.add: the result dtype would be"):
        ot.add(2, 3)  # int64, which torch computes


@pytest.mark.parametrize("device", DEVICES)
def test_alpha_of_any_number_type_is_taken_and_refused_as_torch(device):
    h = torch.ones(2, device=device, dtype=torch.float16)
    for alpha in (np.int64(65535), np.int32(70000)):
        # torch converts alpha to the dtype on CPU (refusing these) and to float32 on CUDA.
        try:
            expected = torch.add(h, h, alpha=alpha)
        except RuntimeError:
            with pytest.raises(RuntimeError, match=r"^opforge.torch.add: alpha \S+ does not fit"):
                ot.add(h, h, alpha=alpha)
        else:
            same(ot.add(h, h, alpha=alpha), expected)
    for number in (70000.0, 0.1, 1e-8):
        for alpha in (np.float16(1.0), torch.tensor(2.0), 3):
            same(ot.add(h, number, alpha=alpha), torch.add(h, number, alpha=alpha))


def test_a_cpu_scalar_tensor_goes_beside_meta_tensors_as_in_torch():
    meta = torch.empty(3, device="meta")
    for ours, native in (
        (ot.add(meta, torch.tensor(1.0)), torch.add(meta, torch.tensor(1.0))),
        (ot.mul(torch.tensor(2.0), meta), torch.mul(torch.tensor(2.0), meta)),
    ):
        assert (ours.shape, ours.dtype, ours.device) == (native.shape, native.dtype, native.device)


def test_autograds_zero_tensors_take_the_dispatcher():
    zeros = torch._efficientzerotensor(3)
    same(ot.add(zeros, torch.ones(3)), torch.ones(3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("x_dtype", "w_dtype"),
    [
        (torch.float32, torch.float16),
        (torch.float32, torch.bfloat16),
        (torch.float32, torch.float64),
        (torch.float16, torch.bfloat16),
        (torch.bfloat16, torch.float64),
    ],
)
def test_rms_norm_takes_a_weight_of_any_floating_dtype_as_torch(device, x_dtype, w_dtype):
    # torch applies it in float32 and returns the input's dtype; its gradient is the weight's.
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=device, dtype=x_dtype, requires_grad=True)
    w = torch.randn(8, device=device, dtype=w_dtype, requires_grad=True)
    ours = ot.rms_norm(x, (8,), w)
    native = torch.nn.functional.rms_norm(x, (8,), w)
    loose = {"rtol": 1e-2, "atol": 1e-2} if x_dtype != torch.float32 else {}
    same(ours, native, **loose)
    grad = torch.randn_like(native)
    ours_grads = torch.autograd.grad(ours, (x, w), grad)
    native_grads = torch.autograd.grad(native, (x, w), grad)
    for a, b in zip(ours_grads, native_grads, strict=True):
        same(a, b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape", [(3, 0), (2, 0, 3), (0, 4), (4, 3, 0, 2)], ids=lambda s: "x".join(map(str, s))
)
def test_empty_results_have_torchs_contiguous_strides(device, shape):
    x = torch.empty(shape, device=device)
    pairs = [
        (ot.gelu(x), torch.nn.functional.gelu(x)),
        (ot.softmax(x, -1), torch.softmax(x, -1)),
        (ot.add(x, x), torch.add(x, x)),
        (ot.layer_norm(x, x.shape[-1:]), torch.nn.functional.layer_norm(x, x.shape[-1:])),
    ]
    for ours, native in pairs:
        assert ours.shape == native.shape and ours.stride() == native.stride()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("transform", ["grad", "vmap"])
def test_training_with_2_byte_statistics_under_torch_func_is_refused_naming_opforge(
    device, transform
):
    # opforge updates float32 copies and writes them back; torch.func refuses that write in
    # words naming neither opforge nor the op.
    x = torch.randn(3, 4, 2, device=device, dtype=torch.float16)
    mean = torch.zeros(2, device=device, dtype=torch.float16)
    var = torch.ones(2, device=device, dtype=torch.float16)

    def train(t):
        return ot.batch_norm(t, mean, var, training=True).float().sum()

    run = torch.func.grad(train) if transform == "grad" else torch.func.vmap(train)
    with pytest.raises(NotImplementedError, match=r"^opforge\.torch\.batch_norm: training with "):
        run(x)
    assert torch.equal(mean, torch.zeros_like(mean)) and torch.equal(var, torch.ones_like(var))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("number", [7e4, 1e-7, 1e-5, 0.1, 3.0])
def test_cpu_2_byte_gradients_take_the_number_as_given_as_torch(dtype, number):
    # torch's CPU forward rounds add's alpha and a number before mul's tensor to the dtype (7e4
    # is inf in float16), while its backward multiplies by them as given; opforge's backward
    # took the rounded number (inf, or 19% off at 1e-7).
    x = torch.tensor([0.1, -0.6, 2.0], dtype=dtype, requires_grad=True)
    y = torch.tensor([3.0, -5.0, 0.25], dtype=dtype, requires_grad=True)
    g = torch.tensor([1000.0, 3000.0, -0.5], dtype=dtype)
    cases = [
        (lambda a, b: ot.add(a, b, alpha=number), lambda a, b: torch.add(a, b, alpha=number)),
        (lambda a, b: ot.mul(number, a) + b, lambda a, b: torch.mul(number, a) + b),
        (
            lambda a, b: ot.mul(torch.tensor(number), a) + b,
            lambda a, b: torch.mul(torch.tensor(number), a) + b,
        ),
    ]
    for ours_call, torch_call in cases:
        try:
            native = torch_call(x, y)
        except RuntimeError:  # an alpha past float16's range, refused by both
            with pytest.raises(RuntimeError, match=r"^opforge"):
                ours_call(x, y)
            continue
        ours = ours_call(x, y)
        torch.testing.assert_close(ours, native, rtol=0, atol=0, equal_nan=True)
        ours_grads = torch.autograd.grad(ours, (x, y), g)
        native_grads = torch.autograd.grad(native, (x, y), g)
        for a, b in zip(ours_grads, native_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_a_dual_0_d_tensor_before_mul_s_float16_tensor_keeps_its_tangent():
    # It needs no gradient, so it was read as a number and its tangent dropped.
    import torch.autograd.forward_ad as fwad

    x = torch.tensor([0.1, -0.6, 2.0], dtype=torch.float16)
    with fwad.dual_level():
        ours = fwad.unpack_dual(ot.mul(fwad.make_dual(torch.tensor(2.0), torch.tensor(1.0)), x))
        native = fwad.unpack_dual(
            torch.mul(fwad.make_dual(torch.tensor(2.0), torch.tensor(1.0)), x)
        )
    torch.testing.assert_close(ours.primal, native.primal, rtol=0, atol=0)
    torch.testing.assert_close(ours.tangent, native.tangent, rtol=0, atol=0)


def test_a_trace_whose_gradient_would_take_a_rounded_number_is_refused():
    # The trace records the number rounded to float16 (7e4 is inf), and its backward took it.
    x = torch.tensor([0.1, -0.6], dtype=torch.float16, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^opforge\.torch\.mul: under torch\.jit\.trace"):
        torch.jit.trace(lambda t: ot.mul(7e4, t), (x,), check_trace=False)
    with pytest.raises(RuntimeError, match=r"^opforge\.torch\.add: under torch\.jit\.trace"):
        torch.jit.trace(lambda t: ot.add(t, t, alpha=1e-7), (x,), check_trace=False)
    frozen = torch.jit.trace(lambda t: ot.mul(7e4, t), (x.detach(),), check_trace=False)
    assert torch.equal(frozen(x.detach()), torch.mul(7e4, x.detach()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_trace_of_a_number_the_dtype_holds_exactly_is_taken_with_its_gradient(dtype):
    # Only a number that rounds is refused: 0.5 is the same as given and as rounded.
    x = torch.tensor([0.1, -0.6, 3.0], dtype=dtype, requires_grad=True)
    traced = torch.jit.trace(lambda t: ot.mul(0.5, t), (x,), check_trace=False)
    ours = traced(x)
    ours.sum().backward()
    expected = torch.tensor([0.1, -0.6, 3.0], dtype=dtype, requires_grad=True)
    native = torch.mul(0.5, expected)
    native.sum().backward()
    assert torch.equal(ours, native) and torch.equal(x.grad, expected.grad)
