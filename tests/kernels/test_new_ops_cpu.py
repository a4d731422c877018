"""mul, gelu, layer_norm, rms_norm (and their backwards) and broadcasting add through the C ABI
on the CPU, against float64 references (PyTorch's own ops in float64 on the same values).

The CPU implementation is the reference: it computes in float64 and rounds once, so every output
is within one unit in the last place of its dtype of the float64 result, for every layout
(transposed, sliced, reversed and repeated inputs, strided outputs whose gaps stay untouched).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

# The references are PyTorch's own ops in float64; a kernels-only image (a matrix cell without a
# framework) has no torch, and the numpy conformance table covers these ops there.
torch = pytest.importorskip("torch", reason="these references need torch (not installed)")

from opforge.kernels.abi import KernelError, Tensor  # noqa: E402
from tests.kernels.new_ops_support import (  # noqa: E402
    DTYPES,
    INPUT_LAYOUTS,
    LAYOUTS,
    NORM_CASES,
    TORCH_DTYPES,
    NormSpec,
    assert_close,
    binary_case,
    gelu_backward_case,
    gelu_case,
    make_input,
    make_output,
    random_values,
    ref_rms_norm,
    ref_rms_norm_backward,
    unusual_eps_specs,
)

pytestmark = pytest.mark.slow

INVALID, INVALID_DTYPE = 1, 5
# One unit in the last place (relative), and an absolute floor for values near zero (float16's
# smallest subnormal; float64 summation-order differences for the others).
ULP = {"float32": (2.0**-23, 1e-12), "float16": (2.0**-10, 2.0**-24), "bfloat16": (2.0**-7, 1e-12)}
SUMS = (2.0**-23, 1e-9)  # dweight and dbias: float64 sums over rows, rounded to float32


def check(case, lib) -> None:
    """Run ``case`` and compare every output with its float64 expectation."""
    ours = case.run(lib)
    for name, expected in case.expected.items():
        rtol, atol = SUMS if name in ("dweight", "dbias") else ULP[case.outputs[name].dtype]
        assert_close(f"{case.op}.{name}", ours[name], expected, rtol, atol)


BROADCASTS = [
    ((10, 1, 5), (1, 10, 5)),
    ((6, 7), (7,)),
    ((7,), (6, 7)),
    ((2, 3), (2, 1)),
    ((4, 5), ()),
    ((), (4, 5)),
    ((), ()),
    ((1,), (3, 1, 4)),
    ((5, 1), (1,)),
    ((2, 0, 3), (3,)),
    ((0,), (1,)),
    ((6, 7), (6, 7)),
]


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_binary_broadcasts(cpu_library, op, dtype, shapes):
    check(binary_case(op, *shapes, dtype), cpu_library)


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((6, 7), (7,)), ((6, 7), (6, 7)), ((3, 4, 5), (4, 1))])
def test_binary_any_layout(cpu_library, op, dtype, shapes):
    for seed, layouts in enumerate(itertools.product(INPUT_LAYOUTS, INPUT_LAYOUTS, LAYOUTS)):
        check(binary_case(op, *shapes, dtype, layouts, seed=seed), cpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mul_is_torch_bit_for_bit(cpu_library, dtype):
    """The product rounded once is what torch.mul computes in every dtype."""
    case = binary_case("mul", (33, 17), (17,), dtype, seed=3)
    ours = case.run(cpu_library)["out"]
    a = torch.from_numpy(case.inputs["a"].values()).to(TORCH_DTYPES[dtype])
    b = torch.from_numpy(case.inputs["b"].values()).to(TORCH_DTYPES[dtype])
    assert np.array_equal(ours, torch.mul(a, b).double().numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("number", [0.1, -1 / 3, 1e-3, 70000.0, 1e-6])
def test_mul_by_a_number_as_scale_is_torch_bit_for_bit(cpu_library, dtype, number):
    """A number folded into scale (b a 0-d 1) is read in float32 and the product rounded once
    to float32, then to the dtype: torch's x * number on CPU, where 70000 is finite products in
    float16 (1e-3 * 70000) that rounding it to float16 first would make inf."""
    values = random_values(np.random.default_rng(5), (4096,), dtype, 3.0)
    a = make_input(values, dtype)
    unit = make_input(np.ones(()), dtype)
    out = make_output((4096,), dtype, "contiguous")
    cpu_library.call("mul", a=a.desc(), b=unit.desc(), scale=number, out=out.desc())
    expected = torch.mul(torch.from_numpy(values).to(TORCH_DTYPES[dtype]), number)
    assert np.array_equal(out.values(), expected.double().numpy(), equal_nan=True)


def _raises(status: int, message: str, fn, **kwargs) -> None:
    with pytest.raises(KernelError) as info:
        fn(**kwargs)
    assert info.value.status == status
    assert info.value.message == message


def test_binary_refuses_shapes_that_do_not_broadcast(cpu_library):
    a = make_input(np.zeros((3, 4)), "float32")
    b = make_input(np.zeros((4, 3)), "float32")
    out = make_output((3, 4), "float32", "contiguous")
    _raises(
        INVALID,
        "opforge_mul: shapes do not broadcast: a is [3, 4] but b is [4, 3]",
        lambda **kw: cpu_library.call("mul", **kw),
        a=a.desc(),
        b=b.desc(),
        scale=1.0,
        out=out.desc(),
    )


def test_binary_refuses_mixed_dtypes_and_a_wrong_output(cpu_library):
    a = make_input(np.zeros((3, 4)), "float32")
    half = make_input(np.zeros((4,)), "float16")
    _raises(
        INVALID_DTYPE,
        "opforge_add: dtype mismatch: a is float32 but b is float16",
        lambda **kw: cpu_library.call("add", **kw),
        a=a.desc(),
        b=half.desc(),
        alpha=1.0,
        out=make_output((3, 4), "float32", "contiguous").desc(),
    )
    b = make_input(np.zeros((4,)), "float32")
    _raises(
        INVALID,
        "opforge_add: out must have shape [3, 4], got [4]",
        lambda **kw: cpu_library.call("add", **kw),
        a=a.desc(),
        b=b.desc(),
        alpha=1.0,
        out=make_output((4,), "float32", "contiguous").desc(),
    )


def test_broadcast_output_shapes_are_inferred(cpu_library):
    info = cpu_library.infer(
        "mul",
        a=Tensor.meta((10, 1, 5), "bfloat16"),
        b=Tensor.meta((1, 10, 5), "bfloat16"),
        scale=1.0,
    )
    assert (info["out"].shape, info["out"].dtype) == ((10, 10, 5), "bfloat16")
    info = cpu_library.infer(
        "add", a=Tensor.meta((), "float16"), b=Tensor.meta((4, 2), "float16"), alpha=1.0
    )
    assert info["out"].shape == (4, 2)


# --- gelu ---

GELU_SHAPES = [(5, 7), (), (1,), (0, 3), (4, 1, 3)]
SPECIAL = np.array([-np.inf, np.inf, np.nan, -30.0, 30.0, 0.0, -0.0, 5.5, -5.5, 1e-3, -1e-3])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", GELU_SHAPES, ids=str)
def test_gelu(cpu_library, dtype, approximate, shape):
    check(gelu_case(shape, dtype, approximate), cpu_library)
    check(gelu_backward_case(shape, dtype, approximate), cpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_any_layout(cpu_library, dtype, approximate):
    for seed, (x_layout, y_layout) in enumerate(itertools.product(INPUT_LAYOUTS, LAYOUTS)):
        check(gelu_case((6, 5), dtype, approximate, (x_layout, y_layout), seed=seed), cpu_library)
        layouts = (x_layout, LAYOUTS[seed % len(LAYOUTS)], y_layout)
        check(gelu_backward_case((6, 5), dtype, approximate, layouts, seed=seed), cpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_special_values_as_torch(cpu_library, dtype, approximate):
    """inf, -inf (NaN, as -inf * 0), NaN, signed zeros and large magnitudes as PyTorch."""
    check(gelu_case(SPECIAL.shape, dtype, approximate, values=SPECIAL), cpu_library)
    check(gelu_backward_case(SPECIAL.shape, dtype, approximate, values=SPECIAL), cpu_library)


# --- layer_norm and rms_norm ---


def norm_specs(dtype: str) -> list[NormSpec]:
    """Shapes, parameter dtypes and layouts every normalisation is checked on."""
    return [
        NormSpec((4, 33), 1, dtype),
        NormSpec((2, 3, 5), 2, dtype, weight="float32", bias="float32"),
        NormSpec((3, 4, 6), 1, dtype, weight=None, bias=None),
        NormSpec((5, 9), 1, dtype, weight="float32", bias="same"),
        NormSpec((7,), 1, dtype),
        NormSpec((0, 6), 1, dtype),
        NormSpec((3, 0), 1, dtype),
        NormSpec((2, 1), 1, dtype),
        NormSpec((3, 2000), 1, dtype, scale=0.01, shift=100.0),
        NormSpec((6, 5), 1, dtype, data_layout="transposed", out_layout="sliced"),
        NormSpec(
            (4, 3, 5),
            2,
            dtype,
            data_layout="sliced",
            out_layout="reversed",
            stats_layout="reversed",
            param_layout="sliced",
        ),
        NormSpec(
            (5, 6),
            1,
            dtype,
            weight="float32",
            data_layout="reversed",
            out_layout="transposed",
            stats_layout="sliced",
            param_layout="reversed",
        ),
        NormSpec((4, 7), 1, dtype, data_layout="repeated", eps=0.5),
    ]


@pytest.mark.parametrize("op", list(NORM_CASES))
@pytest.mark.parametrize(
    "spec",
    [s for d in DTYPES for s in norm_specs(d) + unusual_eps_specs(d)],
    ids=lambda s: s.id,
)
def test_norm(cpu_library, op, spec):
    check(NORM_CASES[op](spec), cpu_library)


def test_empty_rows_give_mean_zero_and_rstd_nan_as_torch(cpu_library):
    """normalized_shape with a zero dim: PyTorch gives mean 0 and rstd NaN (0/0)."""
    case = NORM_CASES["layer_norm"](NormSpec((3, 0), 1, "float32"))
    ours = case.run(cpu_library)
    assert np.array_equal(ours["mean"], np.zeros(3))
    assert np.isnan(ours["rstd"]).all()


def test_rms_norm_backward_formula():
    """The float64 reference of rms_norm_backward agrees with torch autograd of F.rms_norm."""
    rng = np.random.default_rng(5)
    x, dy, w = (
        rng.standard_normal((4, 3, 5)),
        rng.standard_normal((4, 3, 5)),
        rng.standard_normal((3, 5)),
    )
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.rms_norm(xt, (3, 5), wt, 1e-5).backward(torch.tensor(dy))
    rstd = ref_rms_norm(x, (3, 5), None, 1e-5)["rstd"]
    ours = ref_rms_norm_backward(dy, x, (3, 5), rstd, w)
    np.testing.assert_allclose(ours["dx"], xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["dweight"], wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_norm_outputs_are_inferred(cpu_library):
    x = Tensor.meta((2, 3, 4), "bfloat16")
    info = cpu_library.infer("layer_norm", x=x, normalized_shape=[3, 4], eps=1e-5)
    assert (info["y"].shape, info["y"].dtype) == ((2, 3, 4), "bfloat16")
    assert (info["mean"].shape, info["mean"].dtype) == ((2,), "float32")
    assert (info["rstd"].shape, info["rstd"].dtype) == ((2,), "float32")
    info = cpu_library.infer(
        "rms_norm_backward",
        dy=x,
        x=x,
        normalized_shape=[4],
        rstd=Tensor.meta((2, 3), "float32"),
    )
    assert (info["dweight"].shape, info["dweight"].dtype) == ((4,), "float32")


def test_norm_argument_errors(cpu_library):
    x = Tensor.meta((2, 3), "bfloat16")
    with pytest.raises(KernelError) as info:
        cpu_library.infer("layer_norm", x=x, normalized_shape=[4], eps=1e-5)
    assert info.value.message == (
        "opforge_layer_norm: Given normalized_shape=[4], expected x with shape [*, 4], got x of "
        "shape [2, 3]"
    )
    with pytest.raises(KernelError) as info:
        cpu_library.infer(
            "rms_norm", x=x, normalized_shape=[3], weight=Tensor.meta((3,), "float16"), eps=1e-5
        )
    assert info.value.message == "opforge_rms_norm: weight must be float32 or bfloat16, got float16"
