"""The CUDA kernels' paths through the C ABI, each case shaped to reach one of them.

softmax.cu, argmax.cu and batch_norm_native.cu choose a kernel by shape, strides and device.
These cases reach each one (sizes for an H100: 227 KB of shared memory per block, clusters):
softmax rows in registers, in shared memory (one block, a cluster of blocks) and two-pass;
column tiles (one block, a cluster), tall columns (three passes) and short columns; argmax split
rows and column chunks; batch_norm native (2-D tiles in one block or a cluster, three passes,
small spatial, strided; 4-D channel planes in one block or a cluster; inference per channel
with spatial dims) and cuDNN (4-D training of samples too large for shared memory); and
layouts read in place (transposed, permuted, row-strided, broadcast) or through contiguous
copies (negative strides, mixed layouts). Contiguous cases run the conformance runner (float64
numpy reference, edge values); strided ones compare with torch in float64.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from opforge.kernels.abi import KDL_CUDA, Tensor
from tests.conformance.case import case
from tests.conformance.runner import CudaMemory, run_case

pytestmark = pytest.mark.gpu

NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int64": "int64"}
# (rtol, atol) against the float64 result rounded to the dtype; atol covers float16 subnormals.
TOLERANCE = {"float32": (2e-5, 1e-9), "float16": (2e-3, 1e-7), "bfloat16": (1.6e-2, 1e-9)}


@pytest.fixture(scope="module")
def memory():
    return CudaMemory()


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


def desc(t) -> Tensor:
    """A descriptor of CUDA tensor ``t`` with its own shape and strides."""
    name = NAMES[str(t.dtype).split(".")[-1]]
    return Tensor.from_pointer(t.data_ptr(), t.shape, t.stride(), name, KDL_CUDA, t.device.index)


def reversed_desc(t, dim: int) -> Tensor:
    """A descriptor of ``t`` read backwards along ``dim`` (a negative stride, as the C ABI allows)."""
    strides = list(t.stride())
    offset = (t.shape[dim] - 1) * strides[dim] * t.element_size()
    strides[dim] = -strides[dim]
    name = NAMES[str(t.dtype).split(".")[-1]]
    return Tensor.from_pointer(t.data_ptr() + offset, t.shape, strides, name, KDL_CUDA, 0)


def call(fn, *args, **kwargs) -> None:
    """Run a library call (strided CUDA tensors are computed, never refused)."""
    fn(*args, **kwargs)


def assert_close(torch, ours, ref, dtype: str, sums: bool = False) -> None:
    """ours equals ref (float64) rounded to dtype, within the dtype's tolerance. ``sums``: the
    values are differences of sums (softmax backward), so errors scale with the largest value."""
    rtol, atol = TOLERANCE[dtype]
    expected = ref.to(getattr(torch, dtype)).double()
    if sums:
        rtol *= 4
        atol = max(atol, rtol * float(expected.abs().nan_to_num(0, 0, 0).max()))
    torch.testing.assert_close(ours.double(), expected, rtol=rtol, atol=atol, equal_nan=True)


def like_layout(torch, t, like):
    """t's values laid out as ``like`` (strides and storage offset); contiguous when ``like``
    broadcasts (a zero stride cannot be written)."""
    if 0 in like.stride():
        return t.contiguous()
    extent = like.storage_offset() + 1
    extent += sum((n - 1) * s for n, s in zip(like.shape, like.stride(), strict=True))
    view = torch.empty(extent, dtype=t.dtype, device="cuda").as_strided(
        like.shape, like.stride(), like.storage_offset()
    )
    return view.copy_(t)


def dtype_of(torch, name: str):
    return getattr(torch, name)


def seeded(torch, key: str):
    """A CUDA generator seeded from the test's name, so every run sees the same data."""
    return torch.Generator(device="cuda").manual_seed(zlib.crc32(key.encode()))


# ---------------------------------------------------------------------------------------------
# Contiguous shapes through the conformance runner: every path, with its edge values.

CONFORMANCE = [
    # softmax rows: shared memory, one block (a 50257-token vocabulary; odd length: unaligned rows)
    *[case("softmax", (3, 50257), d, dim=-1) for d in ("float32", "float16", "bfloat16")],
    *[
        case("softmax", (3, 50257), "bfloat16", values=v, dim=-1)
        for v in ("nan", "masked", "all_neg_inf")
    ],
    case("softmax", (2, 50257), "float16", values="large", dim=-1),
    *[case("softmax_backward", (3, 50257), d, dim=-1) for d in ("float32", "bfloat16")],
    # softmax rows: a cluster of blocks (forward 3 x 200 KB, backward 6 x 200 KB)
    *[case("softmax", (2, 150001), d, dim=-1) for d in ("float32", "bfloat16")],
    *[
        case("softmax", (2, 150001), "float32", values=v, dim=-1)
        for v in ("nan", "all_neg_inf", "masked")
    ],
    case("softmax_backward", (2, 150001), "float32", dim=-1),
    # softmax rows: two passes (beyond 8 blocks of shared memory)
    case("softmax", (2, 600001), "float32", dim=-1),
    case("softmax", (2, 600001), "float32", values="nan", dim=-1),
    case("softmax_backward", (2, 600001), "float32", dim=-1),
    # softmax columns: short (a thread per column), one tile block, a cluster, three passes.
    # Tiles of 32 columns (128 bytes of float32), or 64 bytes where those need too much shared
    # memory; columns not a multiple of 16 bytes are copied element by element (2-byte ones
    # without cp.async).
    *[case("softmax", (20, 301), d, dim=0) for d in ("float32", "bfloat16")],
    *[case("softmax", (300, 200), d, dim=0) for d in ("float32", "float16", "bfloat16")],
    *[case("softmax", (300, 37), d, values="nan", dim=0) for d in ("float32", "bfloat16")],
    # a cluster of 16 blocks (float32, 128-byte tiles), of 8 (bfloat16)
    *[case("softmax", (8192, 96), d, dim=0) for d in ("float32", "bfloat16")],
    *[case("softmax", (8192, 37), "float32", values=v, dim=0) for v in ("nan", "all_neg_inf")],
    case("softmax", (8192, 37), "bfloat16", values="all_neg_inf", dim=0),
    case("softmax", (8192, 96), "float32", values="masked", dim=0),
    # backward: 64-byte tiles (float32: 128-byte ones would take 128 KB blocks)
    *[case("softmax_backward", (8192, 96), d, dim=0) for d in ("float32", "bfloat16")],
    # more tiles than an H100 runs clusters at once (21 of 16 blocks, 45 of 8): several waves of
    # clusters; partial last tiles, unaligned columns, NaN or all -inf columns in one tile
    # only, tiles across outer indices
    *[case("softmax", (8192, n), d, dim=0) for d, n in (("float32", 1400), ("bfloat16", 1500))],
    case("softmax", (8192, 1401), "float32", values="nan", dim=0),
    case("softmax", (8192, 1499), "bfloat16", values="all_neg_inf", dim=0),
    *[
        case("softmax_backward", (8192, n), d, dim=0)
        for d, n in (("float32", 700), ("bfloat16", 1500))
    ],
    case("softmax", (3, 4096, 700), "float32", dim=1),
    # 64-byte tiles over a cluster of 16 blocks of 160 KB
    *[case("softmax", (40000, 48), d, dim=0) for d in ("float32", "bfloat16")],
    case("softmax", (40000, 20), "float32", values="nan", dim=0),
    # three passes: no cluster holds the tile
    case("softmax_backward", (40000, 48), "float32", dim=0),
    case("softmax", (90000, 20), "float32", values="nan", dim=0),
    case("softmax", (90000, 24), "bfloat16", dim=0),
    *[case("softmax", (6, 700, 40), d, dim=1) for d in ("float32", "bfloat16")],
    case("softmax_backward", (6, 700, 40), "float16", dim=1),
    # argmax: warp rows, block rows, split rows, column chunks (one and several), middle dim
    *[case("argmax", (64, 1000), d, dim=-1, keepdim=False) for d in ("float32", "bfloat16")],
    *[case("argmax", (2200, 1500), d, dim=-1, keepdim=False) for d in ("float32", "float16")],
    *[
        case("argmax", (3, 100003), d, values=v, dim=-1, keepdim=False)
        for d in ("float32", "bfloat16")
        for v in ("normal", "ties", "nan", "neg_inf")
    ],
    *[
        case("argmax", (4096, 300), d, values=v, dim=0, keepdim=False)
        for d in ("float32", "bfloat16")
        for v in ("normal", "ties", "nan")
    ],
    # One row of 300 segments: their merge loads eight per lane at a time, then the rest
    *[
        case("argmax", (1, 300 * 16384 + 7), "float32", values=v, dim=-1, keepdim=False)
        for v in ("normal", "ties")
    ],
    case("argmax", (8, 100000), "float32", dim=0, keepdim=False),
    case("argmax", (4, 500, 33), "float16", values="ties", dim=1, keepdim=False),
    case("argmax", (4, 500, 32), "float32", dim=1, keepdim=True),
    # batch_norm native, 2-D: tiles of channels in one block, in a cluster (float32: 32 channels
    # a tile; 16 where those need blocks over 64 KB), and (a batch too tall for a cluster) three
    # passes
    case("batch_norm", (3000, 64), "bfloat16", training=True, momentum=0.1, eps=1e-5),
    case("batch_norm_backward", (3000, 64), "bfloat16", training=True),
    *[
        case(op, shape, "float32", **scalars)
        for op, scalars in (
            ("batch_norm", {"training": True, "momentum": 0.1, "eps": 1e-5}),
            ("batch_norm_backward", {"training": True}),
        )
        for shape in ((500, 40), (3000, 70), (20000, 48))
    ],
    case("batch_norm", (40000, 16), "float32", training=True, momentum=0.1, eps=1e-5),
    case("batch_norm_backward", (20000, 16), "float32", training=True),
    # batch_norm native: small spatial (3-D and 4-D), one sample, no affine, offset values
    *[
        case(op, shape, d, **scalars)
        for op, scalars in (
            ("batch_norm", {"training": True, "momentum": 0.1, "eps": 1e-5}),
            ("batch_norm", {"training": False, "momentum": 0.1, "eps": 1e-5}),
            ("batch_norm_backward", {"training": True}),
        )
        for shape, d in (
            ((512, 300), "float32"),
            ((512, 300), "bfloat16"),
            ((64, 40, 8), "float32"),
        )
    ],
    case("batch_norm", (16, 6, 4, 4), "float16", training=True, momentum=0.1, eps=1e-5),
    case("batch_norm", (1, 4, 16), "float32", training=True, momentum=0.1, eps=1e-5),
    case(
        "batch_norm", (4000, 33), "float32", values="offset", training=True, momentum=0.1, eps=1e-5
    ),
    case("batch_norm_backward", (4000, 33), "float32", values="offset", training=True),
    case(
        "batch_norm", (300, 7), "float32", values="noaffine", training=True, momentum=0.1, eps=1e-5
    ),
    case("batch_norm_backward", (300, 7), "bfloat16", values="noaffine", training=True),
    # batch_norm training with spatial dims, each channel's batch whole in shared memory: one
    # block a channel (S = 100), a cluster (float32: 392 KB over 7 blocks; bfloat16 over 4),
    # single elements where the pack does not divide S (S = 49; float16 S = 81), offset values,
    # no affine
    *[
        case(op, shape, d, values=v, **scalars)
        for op, scalars in (
            ("batch_norm", {"training": True, "momentum": 0.1, "eps": 1e-5}),
            ("batch_norm_backward", {"training": True}),
        )
        for shape, d, v in (
            ((8, 12, 10, 10), "float32", "normal"),
            ((32, 3, 56, 56), "float32", "normal"),
            ((32, 3, 56, 56), "bfloat16", "normal"),
            ((600, 3, 7, 7), "float32", "normal"),
            ((90, 5, 9, 9), "float16", "normal"),
            ((32, 2, 56, 56), "float32", "offset"),
        )
    ],
    case(
        "batch_norm",
        (16, 3, 40, 40),
        "bfloat16",
        values="noaffine",
        training=True,
        momentum=0.1,
        eps=1e-5,
    ),
    case("batch_norm_backward", (16, 3, 40, 40), "float32", values="noaffine", training=True),
    # batch_norm training through cuDNN: samples of 256 KB, more than a block's shared memory
    case("batch_norm", (4, 2, 256, 256), "float32", training=True, momentum=0.1, eps=1e-5),
    case("batch_norm_backward", (4, 2, 256, 256), "float32", training=True),
    # batch_norm inference, native, each pass computing its coefficients and returning the
    # running statistics as the saved ones: with spatial dims per channel over packs (S a
    # multiple of the pack), over single elements (S = 81), per column (S = 36, bfloat16 packs of
    # 8); more rows than a grid's y dimension; 2-D; an empty batch (saved statistics alone)
    *[
        case("batch_norm", shape, d, training=False, momentum=0.1, eps=1e-5)
        for shape, d in (
            ((300, 70), "float32"),
            ((0, 5, 4), "float32"),
            ((8, 12, 10, 10), "float32"),
            ((8, 12, 10, 10), "bfloat16"),
            ((4, 6, 9, 9), "float32"),
            ((8, 16, 6, 6), "bfloat16"),
            ((70000, 2, 4), "float32"),
        )
    ],
]


@pytest.mark.parametrize("case", CONFORMANCE, ids=lambda c: c.id)
def test_contiguous_path(gpu_library, memory, case):
    for check in run_case(gpu_library, case, memory):
        check.assert_close(case)


# ---------------------------------------------------------------------------------------------
# softmax on views: each layout is read in place or goes through contiguous copies.


SOFTMAX_LAYOUTS = (
    "transposed-last",
    "transposed-first",
    "row-slice",
    "row-slice-columns",
    "unaligned-long-rows",
    "permuted-rows",
    "permuted-columns",
    "broadcast-rows",
    "broadcast-columns",
    "mixed-layouts",
    "strided-inner",
)


def softmax_layouts(torch, dtype, gen) -> dict:
    """Layout name -> (x, dim, y or None for empty_like(x)), one per case the kernels tell apart."""
    dt = dtype_of(torch, dtype)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(dt) * 3

    def empty(*shape):
        return torch.empty(*shape, dtype=dt, device="cuda")

    base = randn(300, 256)
    wide = randn(64, 1100)
    cube = randn(8, 16, 70)
    return {
        "transposed-last": (base.t(), -1, None),  # a column softmax of the base
        "transposed-first": (base.t(), 0, None),  # rows of the base
        "row-slice": (wide[:, :1000], -1, None),  # rows 1100 apart
        "row-slice-columns": (wide[:, 3:1003], 0, None),  # columns of a slice, unaligned
        "unaligned-long-rows": (randn(4, 50258)[:, 1:], -1, None),  # 50257 long, odd offsets
        "permuted-rows": (cube.permute(0, 2, 1), 1, None),  # rows of the base, outer merged
        "permuted-columns": (cube.permute(1, 0, 2), 0, None),  # [outer, len, inner] permuted
        "broadcast-rows": (randn(1, 500).expand(64, 500), -1, empty(64, 500)),
        "broadcast-columns": (randn(64, 1).expand(64, 500), 0, empty(64, 500)),  # copies
        "mixed-layouts": (base, -1, empty(256, 300).t()),  # copies
        "strided-inner": (wide[:, ::2], 0, None),  # inner stride 2: copies
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", SOFTMAX_LAYOUTS)
def test_softmax_view(gpu_library, memory, torch, layout, dtype):
    gen = seeded(torch, f"softmax-{layout}-{dtype}")
    x, dim, y = softmax_layouts(torch, dtype, gen)[layout]
    y = torch.empty_like(x) if y is None else y
    y.fill_(float("nan"))
    call(gpu_library.call, "softmax", x=desc(x), dim=dim, y=desc(y), stream=memory.stream)
    torch.cuda.synchronize()
    assert_close(torch, y, torch.softmax(x.double(), dim), dtype)

    # Backward with y and dy laid out as x, dx as y.
    yv = like_layout(torch, torch.softmax(x.double(), dim).to(x.dtype), x)
    dy = like_layout(torch, torch.randn(x.shape, generator=gen, device="cuda").to(x.dtype), x)
    dx = like_layout(torch, torch.full_like(y, float("nan")), y)
    call(
        gpu_library.call,
        "softmax_backward",
        y=desc(yv),
        dy=desc(dy),
        dim=dim,
        dx=desc(dx),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    ref = yv.double() * (dy.double() - (dy.double() * yv.double()).sum(dim, keepdim=True))
    assert_close(torch, dx, ref, dtype, sums=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_backward_long_rows_of_other_phases(gpu_library, memory, torch, dtype):
    """Long rows (shared memory) whose y and dy start at different offsets from a 16-byte
    boundary: the dot product cannot pair their packs and goes element by element."""
    gen = seeded(torch, f"softmax-backward-phases-{dtype}")
    dt = dtype_of(torch, dtype)
    y = torch.softmax(torch.randn(4, 50257, generator=gen, device="cuda", dtype=torch.float64), -1)
    y = y.to(dt)
    dy = torch.randn(4, 50260, generator=gen, device="cuda").to(dt)[:, 3:]
    dx = torch.full_like(y, float("nan"))
    call(
        gpu_library.call,
        "softmax_backward",
        y=desc(y),
        dy=desc(dy),
        dim=-1,
        dx=desc(dx),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    ref = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    assert_close(torch, dx, ref, dtype, sums=True)


@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_negative_strides(gpu_library, memory, torch, dim):
    """A C ABI caller may pass negative strides: computed through contiguous copies."""
    gen = seeded(torch, f"softmax-reversed-{dim}")
    base = torch.randn(40, 300, generator=gen, device="cuda")
    y = torch.full_like(base, float("nan"))
    call(
        gpu_library.call,
        "softmax",
        x=reversed_desc(base, 1),
        dim=dim,
        y=desc(y),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    assert_close(torch, y, torch.softmax(base.flip(1).double(), dim), "float32")


def test_softmax_cluster_boundaries(gpu_library, memory, torch):
    """A NaN or a +inf in one block of a cluster reaches every output of its row or column."""
    gen = seeded(torch, "softmax-cluster-boundaries")
    rows = torch.randn(3, 150001, generator=gen, device="cuda")
    rows[0, 140000] = float("nan")  # in the last block of row 0's cluster
    rows[1, 60000] = float("inf")  # in the middle block of row 1's
    cols = torch.randn(8192, 32, generator=gen, device="cuda")
    cols[7000, 5] = float("nan")  # block 6 of 8 of column 5's tile
    cols[:, 9] = float("-inf")  # an all -inf column
    for x, dim in ((rows, -1), (cols, 0)):
        y = torch.empty_like(x)
        call(gpu_library.call, "softmax", x=desc(x), dim=dim, y=desc(y), stream=memory.stream)
        torch.cuda.synchronize()
        assert_close(torch, y, torch.softmax(x.double(), dim), "float32")
    assert torch.isnan(y[:, 5]).all() and torch.isnan(y[:, 9]).all()


# ---------------------------------------------------------------------------------------------
# argmax on views and on one very long row.


def numpy_argmax(torch, x, dim: int):
    """The reference: numpy's argmax (first maximum, the first NaN) on the float values."""
    return torch.from_numpy(np.argmax(x.float().cpu().numpy(), axis=dim)).cuda()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "layout",
    ["transposed", "permuted", "row-slice", "broadcast-rows", "broadcast-len", "strided-out"],
)
def test_argmax_view(gpu_library, memory, torch, layout, dtype):
    gen = seeded(torch, f"argmax-{layout}-{dtype}")
    dt = dtype_of(torch, dtype)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(dt)

    out = None
    if layout == "transposed":
        x, dim = randn(3000, 512).t(), -1
    elif layout == "permuted":
        x, dim = randn(6, 10, 70).permute(2, 0, 1), 0
    elif layout == "row-slice":
        x, dim = randn(70, 3000)[:, 5:2005], -1
    elif layout == "broadcast-rows":
        x, dim = randn(1, 3000).expand(40, 3000), -1
    elif layout == "broadcast-len":
        x, dim = randn(40, 1).expand(40, 3000), -1
    else:
        x, dim = randn(700, 96), 0
        out = torch.empty(96 * 3, dtype=torch.int64, device="cuda")[::3]
    expected = numpy_argmax(torch, x, dim)
    out = torch.full(expected.shape, -7, dtype=torch.int64, device="cuda") if out is None else out
    call(
        gpu_library.call,
        "argmax",
        x=desc(x),
        dim=dim,
        keepdim=False,
        out=desc(out),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_argmax_negative_strides(gpu_library, memory, torch):
    gen = seeded(torch, "argmax-reversed")
    base = torch.randint(0, 4, (30, 500), generator=gen, device="cuda").float()  # many ties
    out = torch.full((30,), -7, dtype=torch.int64, device="cuda")
    call(
        gpu_library.call,
        "argmax",
        x=reversed_desc(base, 1),
        dim=-1,
        keepdim=False,
        out=desc(out),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    assert torch.equal(out, numpy_argmax(torch, base.flip(1), -1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_argmax_whole_tensor_as_one_row(gpu_library, memory, torch, dtype):
    """dim=None in the adapters: one row of 2^22 elements, split over many blocks."""
    gen = seeded(torch, f"argmax-flat-{dtype}")
    x = torch.randint(-50, 50, (1 << 22,), generator=gen, device="cuda").to(dtype_of(torch, dtype))
    out = torch.full((), -7, dtype=torch.int64, device="cuda")
    for first, second in ((3_000_001, 1_000_003), (12345, 4_000_000)):
        x[first] = x[second] = 1000  # ties in different segments: the first wins
        call(
            gpu_library.call,
            "argmax",
            x=desc(x),
            dim=0,
            keepdim=False,
            out=desc(out),
            stream=memory.stream,
        )
        torch.cuda.synchronize()
        assert int(out) == min(first, second)
    x[2_500_000] = x[4_100_000] = float("nan")
    call(
        gpu_library.call,
        "argmax",
        x=desc(x),
        dim=0,
        keepdim=False,
        out=desc(out),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    assert int(out) == 2_500_000


def argmax_rows(gpu_library, memory, torch, x):
    """The library's argmax of each row of the 2-D CUDA tensor x, once computed."""
    out = torch.full((x.shape[0],), -7, dtype=torch.int64, device="cuda")
    call(
        gpu_library.call,
        "argmax",
        x=desc(x),
        dim=-1,
        keepdim=False,
        out=desc(out),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["warp-rows", "segments-offset"])
def test_argmax_two_byte_packs(gpu_library, memory, torch, dtype, layout):
    """2-byte rows go a pack of 8 at a time (its largest value first, the winning pack scanned
    at the end): ties within a pack and across a lane's packs, NaNs, signed zeros, infinities,
    and (a slice 3 elements in) elements before and after the packs."""
    # Warp rows take packs where rows are a whole number of them apart.
    length, offset, width = (1000, 0, 1008) if layout == "warp-rows" else (3001, 3, 3009)
    base = torch.full((8, width), -5.0, device="cuda")
    x = base[:, offset : offset + length]
    x[0, 17] = x[0, 19] = 7.0  # twice in one pack
    x[1, 9] = x[1, 9 + 32 * 8] = x[1, 9 + 64 * 8] = 7.0  # one lane's packs (warp rows)
    x[2, 300], x[2, 40], x[2, 500] = float("nan"), float("nan"), 9.0
    x[3] = -1.0
    x[3, 99], x[3, 101] = -0.0, 0.0
    x[4] = float("-inf")
    x[5, length - 1] = 3.0  # the last element: after the packs when sliced
    x[6, 1], x[6, 50], x[6, 51] = 3.0, float("inf"), float("nan")
    x[7] = torch.randint(-3, 3, (length,), generator=seeded(torch, "argmax-packs"), device="cuda")
    x = base.to(dtype_of(torch, dtype))[:, offset : offset + length]
    out = argmax_rows(gpu_library, memory, torch, x)
    assert out.tolist()[:7] == [17, 9, 40, 99, 0, length - 1, 51]
    assert torch.equal(out, numpy_argmax(torch, x, -1))


def test_argmax_signed_zeros_and_infinities(gpu_library, memory, torch):
    """-0 and +0 tie (the first wins); an all -inf row gives 0; +inf beats every number."""
    x = torch.tensor(
        [[-0.0, 0.0, -1.0], [0.0, -0.0, -2.0], [float("-inf")] * 3, [1.0, float("inf"), 3.0]],
        device="cuda",
    )
    x = torch.cat([x, torch.full((4, 2000), float("-inf"), device="cuda")], dim=1)  # block rows
    assert argmax_rows(gpu_library, memory, torch, x).tolist() == [0, 0, 0, 1]


# ---------------------------------------------------------------------------------------------
# batch_norm on views and with strided parameters.


def bn_reference(torch, x, w, b, rm, rv, momentum, eps):
    """Training forward in float64: y, mean, invstd, and the updated running statistics."""
    xd = x.double()
    dims = [0, *range(2, x.dim())]
    shape = [1, -1] + [1] * (x.dim() - 2)
    mean = xd.mean(dims)
    var = xd.var(dims, unbiased=False)
    invstd = 1 / torch.sqrt(var + eps)
    y = (xd - mean.view(shape)) * invstd.view(shape)
    if w is not None:
        y = y * w.double().view(shape) + b.double().view(shape)
    n = x.numel() // x.shape[1]
    new_rm = (1 - momentum) * rm.double() + momentum * mean
    new_rv = (1 - momentum) * rv.double() + momentum * var * n / (n - 1)
    return y, mean, invstd, new_rm, new_rv


def bn_backward_reference(torch, dy, x, w, mean, invstd):
    dims = [0, *range(2, x.dim())]
    shape = [1, -1] + [1] * (x.dim() - 2)
    n = x.numel() // x.shape[1]
    xhat = (x.double() - mean.double().view(shape)) * invstd.double().view(shape)
    dbias = dy.double().sum(dims)
    dweight = (dy.double() * xhat).sum(dims)
    scale = invstd.double() * (w.double() if w is not None else 1.0)
    dx = scale.view(shape) * (dy.double() - dbias.view(shape) / n - xhat * dweight.view(shape) / n)
    return dx, dweight, dbias


def strided_vector(torch, values):
    """``values`` (float32) in every other element of a larger buffer."""
    buffer = torch.full((values.numel() * 2,), float("nan"), device="cuda")
    view = buffer[::2]
    view.copy_(values)
    return view


@pytest.mark.parametrize(
    "layout",
    [
        "row-slice",
        "row-slice-4d",
        "row-slice-4d-cluster",
        "transposed",
        "permuted-3d",
        "strided-params",
        "tiny-eps-4d",
    ],
)
def test_batch_norm_view(gpu_library, memory, torch, layout):
    gen = seeded(torch, f"batch-norm-{layout}")

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda") * 2 + 1

    eps = 1e-5
    if layout == "row-slice":
        x = randn(256, 100)[:, 10:74]
    elif layout == "row-slice-4d":
        x = randn(6, 10, 8, 8)[:, 2:8]  # rows of 6 whole channel planes, 10 apart
    elif layout == "row-slice-4d-cluster":
        x = randn(32, 5, 56, 56)[:, 1:4]  # channels of 392 KB, over clusters
    elif layout == "transposed":
        x = randn(48, 256).t()
    elif layout == "permuted-3d":
        x = randn(32, 20, 12).permute(0, 2, 1)  # N x C x L with channels last
    elif layout == "strided-params":
        x = randn(200, 24)
    else:
        x, eps = randn(4, 6, 9, 9), 1e-7
    c = x.shape[1]
    w, b = (
        torch.rand(c, generator=gen, device="cuda") + 0.5,
        torch.randn(c, generator=gen, device="cuda"),
    )
    rm, rv = (
        torch.randn(c, generator=gen, device="cuda") * 0.1,
        torch.rand(c, generator=gen, device="cuda") + 0.5,
    )
    sm, si = (
        torch.full((c,), float("nan"), device="cuda"),
        torch.full((c,), float("nan"), device="cuda"),
    )
    if layout == "strided-params":
        w, b, rm, rv, sm, si = (strided_vector(torch, t) for t in (w, b, rm, rv, sm, si))

    def batch_norm(training: bool, y, save_mean, save_invstd) -> None:
        tensors = {"x": x, "weight": w, "bias": b, "running_mean": rm, "running_var": rv}
        tensors |= {"y": y, "save_mean": save_mean, "save_invstd": save_invstd}
        call(
            gpu_library.call,
            "batch_norm",
            **{name: desc(t) for name, t in tensors.items()},
            training=training,
            momentum=0.1,
            eps=eps,
            stream=memory.stream,
        )
        torch.cuda.synchronize()

    y = torch.full_like(x, float("nan"))
    ref = bn_reference(torch, x, w, b, rm, rv, 0.1, eps)
    batch_norm(True, y, sm, si)
    for ours, expected in zip((y, sm, si, rm, rv), ref, strict=True):
        torch.testing.assert_close(ours.double(), expected, rtol=2e-5, atol=2e-5)

    yi = torch.full_like(x, float("nan"))
    batch_norm(False, yi, torch.empty(c, device="cuda"), torch.empty(c, device="cuda"))
    shape = [1, -1] + [1] * (x.dim() - 2)
    expected = (x.double() - rm.double().view(shape)) / torch.sqrt(rv.double().view(shape) + eps)
    expected = expected * w.double().view(shape) + b.double().view(shape)
    torch.testing.assert_close(yi.double(), expected, rtol=2e-5, atol=2e-5)

    dy = torch.randn(x.shape, generator=gen, device="cuda")
    dx = torch.full_like(x, float("nan"))
    dw, db = (
        torch.full((c,), float("nan"), device="cuda"),
        torch.full((c,), float("nan"), device="cuda"),
    )
    if layout == "strided-params":
        dw, db = strided_vector(torch, dw), strided_vector(torch, db)
    call(
        gpu_library.call,
        "batch_norm_backward",
        **dict(
            zip(
                ("dy", "x", "weight", "save_mean", "save_invstd"),
                (desc(t) for t in (dy, x, w, sm, si)),
                strict=True,
            )
        ),
        training=True,
        **dict(zip(("dx", "dweight", "dbias"), (desc(t) for t in (dx, dw, db)), strict=True)),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    count = x.numel() // c
    for ours, expected, scale in zip(
        (dx, dw, db), bn_backward_reference(torch, dy, x, w, sm, si), (1, count, count), strict=True
    ):
        torch.testing.assert_close(ours.double(), expected, rtol=2e-4, atol=2e-4 * scale)


def test_batch_norm_empty_batch_zeroes_strided_statistics(gpu_library, memory, torch):
    x = torch.empty(0, 5, device="cuda")
    sm = strided_vector(torch, torch.ones(5, device="cuda"))
    si = strided_vector(torch, torch.ones(5, device="cuda"))
    rm, rv = torch.full((5,), 0.25, device="cuda"), torch.full((5,), 2.0, device="cuda")
    call(
        gpu_library.call,
        "batch_norm",
        x=desc(x),
        weight=None,
        bias=None,
        running_mean=desc(rm),
        running_var=desc(rv),
        training=True,
        momentum=0.1,
        eps=1e-5,
        y=desc(torch.empty_like(x)),
        save_mean=desc(sm),
        save_invstd=desc(si),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    assert sm.tolist() == [0.0] * 5 and si.tolist() == [0.0] * 5
    assert rm.tolist() == [0.25] * 5 and rv.tolist() == [2.0] * 5
    assert torch.isnan(sm._base[1::2]).all()  # the elements between stay untouched


@pytest.mark.parametrize("layout", ["same-view", "interleaved"])
@pytest.mark.parametrize("shape", [(4, 6, 5), (4, 6, 8), (300, 6), (0, 6, 4)])
def test_batch_norm_inference_saved_statistics_sharing_the_parameters(
    gpu_library, memory, torch, shape, layout
):
    """Saved statistics that are the parameters' memory (the C ABI allows exactly the same view,
    and leaves interleaved strided views unchecked: save_mean[c] is weight[c + 1]) are written
    after every read, on each inference path: per column, per channel's packs, 2-D, and an
    empty batch."""
    gen = seeded(torch, f"bn-aliases-{shape}-{layout}")
    channels = shape[1]
    x = torch.randn(*shape, generator=gen, device="cuda")
    rm = torch.randn(channels, generator=gen, device="cuda")
    rv = torch.rand(channels, generator=gen, device="cuda") + 0.5
    bias = torch.randn(channels, generator=gen, device="cuda")
    shared = torch.rand(2 * channels + 2, generator=gen, device="cuda") + 0.5
    weight = shared[0 : 2 * channels : 2]
    invstd = 1 / torch.sqrt(rv.double() + 1e-5)
    per_channel = (1, channels) + (1,) * (x.dim() - 2)
    expected_y = (x.double() - rm.double().view(per_channel)) * (invstd * weight.double()).view(
        per_channel
    ) + bias.double().view(per_channel)
    expected_mean = rm.clone()
    if layout == "same-view":
        save_mean, save_invstd = weight, rv
    else:
        save_mean, save_invstd = shared[2 : 2 * channels + 2 : 2], torch.empty_like(rv)
    y = torch.empty_like(x)
    call(
        gpu_library.call,
        "batch_norm",
        x=desc(x),
        weight=desc(weight),
        bias=desc(bias),
        running_mean=desc(rm),
        running_var=desc(rv),
        training=False,
        momentum=0.1,
        eps=1e-5,
        y=desc(y),
        save_mean=desc(save_mean),
        save_invstd=desc(save_invstd),
        stream=memory.stream,
    )
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), expected_y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(save_mean, expected_mean)
    torch.testing.assert_close(save_invstd.double(), invstd, rtol=1e-6, atol=0)
