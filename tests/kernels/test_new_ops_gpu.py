"""mul, gelu, layer_norm, rms_norm (and their backwards) and broadcasting add through the C ABI
on a CUDA device (memory from torch, torch's current stream), against the float64 references
of the CPU tests: every path of the kernels (16-byte and single-element accesses, the periodic
bias and scalar cases, any strides through the strided kernel or staging copies, rows in
registers and rows read twice, 64-bit offsets) on contiguous, shifted, transposed, sliced,
reversed and repeated layouts, in float32, float16 and bfloat16.

The GPU computes in float32: each output is compared within a few float32 rounding errors of
the float64 result (or one unit of its 16-bit dtype), with an absolute floor scaled to the
outputs' magnitude where float32 cancellation makes relative error meaningless (gelu far in the
negative tail, dx of the normalisations, column sums over thousands of rows).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

# The references are PyTorch's own ops in float64; a kernels-only image (a matrix cell without a
# framework) has no torch, and the numpy conformance table covers these ops there.
torch = pytest.importorskip("torch", reason="these references need torch (not installed)")

from tests.kernels.new_ops_support import (  # noqa: E402
    DTYPES,
    INPUT_LAYOUTS,
    LAYOUTS,
    NORM_CASES,
    TORCH_DTYPES,
    UNIT,
    NormSpec,
    View,
    assert_close,
    binary_case,
    gelu_backward_case,
    gelu_case,
    layer_norm_backward_case,
    make_input,
    make_output,
    random_values,
    ref_layer_norm,
    ref_layer_norm_backward,
    unusual_eps_specs,
)
from tests.kernels.test_cuda_paths import desc  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SPECIAL = np.array([-np.inf, np.inf, np.nan, -30.0, 30.0, 0.0, -0.0, 5.5, -5.5, 1e-3, -1e-3])


def stream() -> int:
    """torch's current CUDA stream, the one the library is given."""
    return torch.cuda.current_stream().cuda_stream


def tolerance(op: str, output: str, dtype: str, expected: np.ndarray) -> tuple[float, float]:
    """(rtol, atol) of one output of the GPU against the float64 result."""
    finite = expected[np.isfinite(expected)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    if output in ("dweight", "dbias"):
        return 1e-4, 1e-4 * max(scale, 1.0)  # float32 sums over up to 16384 rows
    if dtype != "float32":
        # One rounding to the 16-bit dtype (two units allow for float32 error at a tie), and
        # float16's subnormal step.
        return 4 * UNIT[dtype], 1e-5 * max(scale, 1.0)
    if op in ("add", "mul"):
        return 2 * UNIT["float32"], 1e-30  # one float32 rounding (add: a fused multiply-add)
    if op.startswith("gelu"):
        return 1e-5, 2e-6 * max(scale, 1.0)  # erff/tanhf near -1 in the negative tail
    return 1e-5, 2e-5 * max(scale, 1.0)


def check(case, lib) -> None:
    """Run ``case`` on the device and compare every output with its float64 expectation."""
    ours = case.run(lib, stream())
    for name, expected in case.expected.items():
        dtype = case.outputs[name].dtype
        rtol, atol = tolerance(case.op, name, dtype, expected)
        assert_close(f"{case.op}.{name}[{dtype}]", ours[name], expected, rtol, atol)


# --- add and mul ---

BROADCASTS = [
    ((64, 256), (256,)),  # bias: the periodic path, 16-byte packs
    ((256,), (64, 256)),  # bias as the first operand
    ((33, 100), (100,)),  # period not a multiple of the pack: single elements (or strided)
    ((7, 12), (12,)),  # period too short for a row of threads: strided
    ((3, 4, 64), (4, 64)),  # a two-dim period
    ((1001,), ()),  # scalar operand, a tail after the packs
    ((), (1001,)),
    ((10, 1, 5), (1, 10, 5)),  # both broadcast: strided
    ((6, 1), (6, 40)),
    ((1001,), (1001,)),  # flat, with a tail
    ((2, 0, 3), (3,)),
    ((), ()),
]


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_binary_broadcasts(gpu_library, op, dtype, shapes):
    check(binary_case(op, *shapes, dtype, device="cuda"), gpu_library)


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((40, 64), (64,)), ((40, 64), (40, 64)), ((3, 40, 9), (40, 1))])
def test_binary_any_layout(gpu_library, op, dtype, shapes):
    for seed, layouts in enumerate(itertools.product(INPUT_LAYOUTS, INPUT_LAYOUTS, LAYOUTS)):
        check(binary_case(op, *shapes, dtype, layouts, "cuda", seed), gpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("number", [0.1, -1 / 3, 1e-3, 70000.0, 1e-6])
def test_mul_by_a_number_as_scale_is_torch_bit_for_bit(gpu_library, dtype, number):
    """A number folded into scale (b a 0-d 1) is read in float32 and the product rounded once,
    as torch's CUDA x * number: no float32 copies, and 70000 in float16 gives finite products
    where rounding it first would give inf."""
    values = random_values(np.random.default_rng(5), (4099,), dtype, 3.0)
    a = make_input(values, dtype, device="cuda")
    unit = make_input(np.ones(()), dtype, device="cuda")
    out = make_output((4099,), dtype, "contiguous", "cuda")
    gpu_library.call(
        "mul", a=a.desc(), b=unit.desc(), scale=number, out=out.desc(), stream=stream()
    )
    torch.cuda.synchronize()
    expected = torch.mul(
        torch.from_numpy(values).to(device="cuda", dtype=TORCH_DTYPES[dtype]), number
    )
    assert np.array_equal(out.values(), expected.double().cpu().numpy(), equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mul_bias_is_torch_bit_for_bit(gpu_library, dtype):
    """The periodic path rounds the float32 product once, as torch.mul does."""
    case = binary_case("mul", (512, 1024), (1024,), dtype, device="cuda", seed=4)
    ours = case.run(gpu_library, stream())["out"]
    a, b = case.inputs["a"], case.inputs["b"]
    dt = TORCH_DTYPES[dtype]
    ta = torch.from_numpy(a.values()).to(device="cuda", dtype=dt)
    tb = torch.from_numpy(b.values()).to(device="cuda", dtype=dt)
    assert np.array_equal(ours, torch.mul(ta, tb).double().cpu().numpy())


def test_period_rows_beyond_one_grid_column(gpu_library):
    """More rows than gridDim.y (65535) times the rows a block column covers (2^30 elements,
    compared on the device against torch.add)."""
    a = torch.randn(1 << 22, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)
    views = [View(t.view(-1), "bfloat16", tuple(t.shape), t.stride(), 0) for t in (a, b, out)]
    gpu_library.call(
        "add", a=views[0].desc(), b=views[1].desc(), alpha=0.5, out=views[2].desc(), stream=stream()
    )
    ref = torch.add(a.float(), b.float(), alpha=0.5)
    err = (out.float() - ref).abs() - 2 * UNIT["bfloat16"] * ref.abs()
    assert float(err.max()) <= 0.0


def _far_apart_rows(dtype: str) -> View:
    """A (2, 64) view whose rows are 2^31 elements apart: offsets need 64 bits."""
    gap = 1 << 31
    buffer = torch.zeros(gap + 64, dtype=TORCH_DTYPES[dtype], device="cuda")
    values = random_values(np.random.default_rng(7), (2, 64), dtype)
    buffer[:64] = torch.from_numpy(values[0]).to(buffer)
    buffer[gap:] = torch.from_numpy(values[1]).to(buffer)
    return View(buffer, dtype, (2, 64), (gap, 1), 0)


def test_strided_offsets_beyond_32_bits(gpu_library):
    """The strided kernel and the staging copies switch to 64-bit offsets."""
    a = _far_apart_rows("bfloat16")
    b = make_input(
        random_values(np.random.default_rng(8), (64,), "bfloat16"), "bfloat16", device="cuda"
    )
    out = make_output((2, 64), "bfloat16", "contiguous", "cuda")
    gpu_library.call("mul", a=a.desc(), b=b.desc(), out=out.desc(), scale=1.0, stream=stream())
    torch.cuda.synchronize()
    assert_close("mul", out.values(), a.values() * b.values(), 2 * UNIT["bfloat16"], 1e-30)
    y = make_output((2, 64), "bfloat16", "contiguous", "cuda")
    mean = make_output((2,), "float32", "contiguous", "cuda")
    rstd = make_output((2,), "float32", "contiguous", "cuda")
    gpu_library.call(
        "layer_norm",
        x=a.desc(),
        normalized_shape=[64],
        eps=1e-5,
        y=y.desc(),
        mean=mean.desc(),
        rstd=rstd.desc(),
        stream=stream(),
    )
    torch.cuda.synchronize()
    expected = ref_layer_norm(a.values(), (64,), None, None, 1e-5)
    assert_close("layer_norm.y", y.values(), expected["y"], 4 * UNIT["bfloat16"], 1e-4)
    assert_close("layer_norm.rstd", rstd.values(), expected["rstd"], 1e-5, 1e-6)


# --- gelu ---

GELU_SHAPES = [(5, 7), (), (1,), (0, 3), (1001,), (64, 256)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", GELU_SHAPES, ids=str)
def test_gelu(gpu_library, dtype, approximate, shape):
    check(gelu_case(shape, dtype, approximate, device="cuda"), gpu_library)
    check(gelu_backward_case(shape, dtype, approximate, device="cuda"), gpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_any_layout(gpu_library, dtype, approximate):
    for seed, (x_layout, y_layout) in enumerate(itertools.product(INPUT_LAYOUTS, LAYOUTS)):
        case = gelu_case((40, 33), dtype, approximate, (x_layout, y_layout), "cuda", seed)
        check(case, gpu_library)
        layouts = (x_layout, LAYOUTS[seed % len(LAYOUTS)], y_layout)
        check(gelu_backward_case((40, 33), dtype, approximate, layouts, "cuda", seed), gpu_library)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_special_values_as_torch(gpu_library, dtype, approximate):
    check(gelu_case(SPECIAL.shape, dtype, approximate, device="cuda", values=SPECIAL), gpu_library)
    case = gelu_backward_case(SPECIAL.shape, dtype, approximate, device="cuda", values=SPECIAL)
    check(case, gpu_library)


# --- layer_norm and rms_norm ---


def gpu_norm_specs(dtype: str) -> list[NormSpec]:
    """Every path of row_norm.cuh: rows in registers with 16-byte packs (staged through shared
    memory or not, one or two rows per backward step) or single elements (odd or misaligned
    rows), rows read twice (longer than registers hold), row groups of one warp to a whole
    block, the staging copies, and the empty cases."""
    return [
        NormSpec((64, 4096), 1, dtype),
        NormSpec((8, 8192), 1, dtype, weight="float32", bias="float32"),
        # 2-byte types: two packs per backward thread, most threads' second one past the row;
        # an odd number of rows for two rows per step
        NormSpec((11, 4104), 1, dtype),
        NormSpec((3, 16384), 1, dtype),  # forward in registers, backward reads rows twice
        NormSpec((2, 40000), 1, dtype, weight="float32", bias=None),  # both read rows twice
        NormSpec((5, 8200), 1, dtype),  # packs, but more than the backward's registers hold
        NormSpec((1000, 96), 1, dtype),  # a warp per row, eight row groups per block
        NormSpec((7, 33), 1, dtype),  # single elements
        NormSpec((4, 3, 5), 2, dtype, weight="float32", bias="same"),  # mixed: read as float32
        NormSpec((9, 256), 1, dtype, weight=None, bias=None),
        NormSpec((1, 1), 1, dtype),
        NormSpec((77,), 1, dtype),
        NormSpec((0, 64), 1, dtype),
        NormSpec((6, 0), 1, dtype),
        NormSpec((2, 1), 1, dtype),
        NormSpec((16, 512), 1, dtype, data_layout="shifted", out_layout="shifted"),
        NormSpec((40, 64), 1, dtype, data_layout="transposed", out_layout="sliced"),
        NormSpec(
            (6, 5, 64),
            2,
            dtype,
            data_layout="sliced",
            out_layout="reversed",
            stats_layout="reversed",
            param_layout="sliced",
        ),
        NormSpec(
            (12, 320),
            1,
            dtype,
            weight="float32",
            data_layout="reversed",
            out_layout="transposed",
            stats_layout="sliced",
            param_layout="shifted",
        ),
        NormSpec((8, 128), 1, dtype, data_layout="repeated", eps=0.5),
    ]


@pytest.mark.parametrize("op", list(NORM_CASES))
@pytest.mark.parametrize(
    "spec",
    [s for d in DTYPES for s in gpu_norm_specs(d) + unusual_eps_specs(d)],
    ids=lambda s: s.id,
)
def test_norm(gpu_library, op, spec):
    check(NORM_CASES[op](spec, device="cuda"), gpu_library)


@pytest.mark.parametrize("op", ["layer_norm_backward", "rms_norm_backward"])
def test_parameter_gradients_are_deterministic(gpu_library, op):
    """dweight (and dbias) come from fixed-order sums: two runs agree bit for bit."""
    spec = NormSpec((4096, 1024), 1, "bfloat16")
    first = NORM_CASES[op](spec, device="cuda").run(gpu_library, stream())
    second = NORM_CASES[op](spec, device="cuda").run(gpu_library, stream())
    for name in first:
        assert np.array_equal(first[name], second[name], equal_nan=True), name


def test_runs_on_the_stream_it_is_given(gpu_library):
    """Kernels, temporaries and copies follow the caller's stream, not the default one."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        spec = NormSpec((256, 2048), 1, "float32", data_layout="transposed", out_layout="sliced")
        case = layer_norm_backward_case(spec, device="cuda")
        ours = case.run(gpu_library, side.cuda_stream)
    for name, expected in case.expected.items():
        rtol, atol = tolerance(case.op, name, "float32", expected)
        assert_close(name, ours[name], expected, rtol, atol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_back_to_back_launches_see_each_others_writes(gpu_library, dtype):
    """On an H100 each norm kernel is set up while the one before it drains: it must still read
    what that one wrote, and not overwrite what that one still reads. Each call here reads what
    the call just before it wrote and writes over what that call read, with no synchronisation
    in between; the last is a backward reading the statistics written just before it."""
    rows, n, eps = 4096, 1024, 1e-5
    dt = TORCH_DTYPES[dtype]
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(rows, n, device="cuda", dtype=dt, generator=g)
    w = torch.rand(n, device="cuda", dtype=dt, generator=g) + 0.5
    bias = torch.randn(n, device="cuda", dtype=dt, generator=g)
    b, dx = torch.empty_like(a), torch.empty_like(a)
    mean1, rstd1, rstd2, mean3, rstd3, dw, db = (
        torch.empty(k, device="cuda") for k in [rows] * 5 + [n] * 2
    )
    wd, bd = w.double().cpu().numpy(), bias.double().cpu().numpy()
    common = {"normalized_shape": [n], "stream": stream()}

    def layer_norm(x, y, mean, rstd) -> None:
        gpu_library.call(
            "layer_norm",
            x=desc(x),
            weight=desc(w),
            bias=desc(bias),
            eps=eps,
            y=desc(y),
            mean=desc(mean),
            rstd=desc(rstd),
            **common,
        )

    def expect(name: str, op: str, ours: torch.Tensor, expected: np.ndarray) -> None:
        rtol, atol = tolerance(op, name, str(ours.dtype).split(".")[-1], expected)
        assert_close(f"{op}.{name}[{dtype}]", ours.double().cpu().numpy(), expected, rtol, atol)

    for _ in range(3):
        before = a.double().cpu().numpy()
        layer_norm(a, b, mean1, rstd1)
        gpu_library.call(
            "rms_norm",
            x=desc(b),
            weight=desc(w),
            eps=eps,
            y=desc(a),
            rstd=desc(rstd2),
            **common,
        )
        layer_norm(a, b, mean3, rstd3)
        backward_inputs = [b, a, mean3, rstd3, w]
        _layer_norm_backward(gpu_library, backward_inputs, dx, dw, db, common["stream"])
        torch.cuda.synchronize()
        # The first call's output is overwritten by the third's: its reference, rounded as ours.
        first = ref_layer_norm(before, [n], wd, bd, eps)["y"]
        first = torch.from_numpy(first).to(dt).double()
        rms = torch.nn.functional.rms_norm(first, [n], torch.from_numpy(wd), eps).numpy()
        expect("y", "rms_norm", a, rms)
        third = ref_layer_norm(a.double().cpu().numpy(), [n], wd, bd, eps)
        for name, ours in (("y", b), ("mean", mean3), ("rstd", rstd3)):
            expect(name, "layer_norm", ours, third[name])
        _expect_backward(backward_inputs, dx, dw, db, f"layer_norm_backward[{dtype}]")


def _backward_inputs(rows: int, n: int, dtype: str, seed: int) -> list:
    """dy, x, mean, rstd and weight of a layer_norm backward, on the device."""
    dt = TORCH_DTYPES[dtype]
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, n, device="cuda", dtype=dt, generator=g)
    dy = torch.randn(rows, n, device="cuda", dtype=dt, generator=g)
    w = torch.rand(n, device="cuda", dtype=dt, generator=g) + 0.5
    mean = x.float().mean(1)
    rstd = torch.rsqrt(x.float().var(1, unbiased=False) + 1e-5)
    return [dy, x, mean, rstd, w]


def _layer_norm_backward(lib, inputs, dx, dw, db, stream_handle: int) -> None:
    dy, x, mean, rstd, w = inputs
    lib.call(
        "layer_norm_backward",
        dy=desc(dy),
        x=desc(x),
        normalized_shape=[x.shape[1]],
        mean=desc(mean),
        rstd=desc(rstd),
        weight=desc(w),
        dx=desc(dx),
        dweight=desc(dw),
        dbias=desc(db),
        stream=stream_handle,
    )


def _expect_backward(inputs, dx, dw, db, label: str) -> None:
    """dx, dweight and dbias against aten's float64 backward from the same statistics."""
    dy, x, mean, rstd, w = (t.double().cpu().numpy() for t in inputs)
    expected = ref_layer_norm_backward(dy, x, [x.shape[1]], mean, rstd, w)
    dtype = str(inputs[1].dtype).split(".")[-1]
    for name, ours in (("dx", dx), ("dweight", dw), ("dbias", db)):
        rtol, atol = tolerance("layer_norm_backward", name, dtype, expected[name])
        assert_close(f"{label} {name}", ours.double().cpu().numpy(), expected[name], rtol, atol)


@pytest.mark.parametrize("shape", [(4096, 8192), (4100, 2048), (3, 4096)], ids=str)
def test_column_sums_wait_for_every_row_block(gpu_library, shape):
    """On Hopper column_sums is set up while the row kernel drains, and each call's partial
    column sums go to scratch memory that the call before has just freed, holding its sums.
    Back-to-back calls with no synchronisation, at sizes where some row blocks get a step more
    than others: every call's dweight and dbias are bit for bit the first call's, and that one
    is right."""
    rows, n = shape
    inputs = _backward_inputs(rows, n, "bfloat16", seed=11)
    dx = torch.empty_like(inputs[1])
    calls = 24
    dws = torch.empty(calls, n, device="cuda")
    dbs = torch.empty(calls, n, device="cuda")
    for i in range(calls):
        _layer_norm_backward(gpu_library, inputs, dx, dws[i], dbs[i], stream())
    torch.cuda.synchronize()
    _expect_backward(inputs, dx, dws[0], dbs[0], f"{rows}x{n}")
    for i in range(1, calls):
        assert torch.equal(dws[i], dws[0]), f"call {i}: dweight differs from call 0"
        assert torch.equal(dbs[i], dbs[0]), f"call {i}: dbias differs from call 0"


def test_backward_replayed_in_a_cuda_graph(gpu_library):
    """Captured in a CUDA graph, a backward's scratch memory (the partial column sums) is the
    same memory at every replay, holding the replay before's sums: each replay on new data
    still gives that data's gradients."""
    rows, n = 2048, 4096
    inputs = _backward_inputs(rows, n, "bfloat16", seed=5)
    dx = torch.empty_like(inputs[1])
    dw, db = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _layer_norm_backward(gpu_library, inputs, dx, dw, db, side.cuda_stream)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _layer_norm_backward(gpu_library, inputs, dx, dw, db, stream())
    for seed in (21, 22, 23):
        for static, fresh in zip(inputs, _backward_inputs(rows, n, "bfloat16", seed), strict=True):
            static.copy_(fresh)
        dw.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _expect_backward(inputs, dx, dw, db, f"replay with seed {seed}")
