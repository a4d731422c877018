"""Strided views, float64 references and tolerances for the tests of mul, gelu, layer_norm,
rms_norm (and broadcasting add) through the C ABI, on the CPU and on a CUDA device.

A ``View`` is a tensor described over a buffer of its own (torch storage, CPU or CUDA) with any
strides: row-major, row-major one element into its buffer (contiguous but not 16-byte aligned),
transposed, sliced (gaps between elements), reversed (negative strides) or repeated (zero
strides, inputs only). Its logical values are gathered in float64 with numpy, so
the references never depend on the layout, and an output's gaps can be checked untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from opforge.kernels.abi import KDL_CPU, KDL_CUDA, Tensor

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = tuple(TORCH_DTYPES)
# Unit roundoff of each storage dtype: a correctly rounded result is within this, relative.
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Written into every output buffer first: positions a view does not cover must keep it.
SENTINEL = 7.25

LAYOUTS = ("contiguous", "shifted", "transposed", "sliced", "reversed")
INPUT_LAYOUTS = (*LAYOUTS, "repeated")


@dataclass
class View:
    """A tensor of ``shape`` at ``offset`` (elements) with ``strides`` over ``buffer``."""

    buffer: torch.Tensor
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    def desc(self) -> Tensor:
        """The DLTensor descriptor the library takes."""
        device = self.buffer.device
        pointer = self.buffer.data_ptr() + self.offset * self.buffer.element_size()
        kind = KDL_CUDA if device.type == "cuda" else KDL_CPU
        return Tensor.from_pointer(
            pointer, self.shape, self.strides, self.dtype, kind, device.index or 0
        )

    def positions(self) -> np.ndarray:
        """The buffer position of every element, in the view's logical shape."""
        index = np.full(self.shape, self.offset, dtype=np.int64)
        for d, (size, stride) in enumerate(zip(self.shape, self.strides, strict=True)):
            axis = [1] * len(self.shape)
            axis[d] = size
            index = index + (np.arange(size, dtype=np.int64) * stride).reshape(axis)
        return index

    def values(self) -> np.ndarray:
        """The logical values in float64 (gathered first: the buffer may be huge)."""
        positions = torch.from_numpy(self.positions().reshape(-1)).to(self.buffer.device)
        return self.buffer[positions].double().cpu().numpy().reshape(self.shape)

    def gaps_untouched(self) -> bool:
        """Whether every buffer position outside the view still holds the sentinel."""
        flat = self.buffer.double().cpu().numpy()
        outside = np.ones(flat.shape, dtype=bool)
        outside[self.positions().reshape(-1)] = False
        return bool(np.all(flat[outside] == SENTINEL))


def _layout(shape: tuple[int, ...], layout: str) -> tuple[tuple[int, ...], int, int]:
    """(strides, offset, buffer size) of ``layout`` for ``shape``."""
    nd = len(shape)
    if layout == "repeated" and nd > 0 and shape[0] > 1:
        inner, _, size = _layout(shape[1:], "contiguous")
        return (0, *inner), 0, size
    order = list(range(nd))
    if layout == "transposed":
        order.reverse()  # the last dim varies slowest in memory
    gap = 2 if layout == "sliced" else 1
    strides = [0] * nd
    running = gap
    for d in reversed(order):
        strides[d] = running
        running *= max(shape[d], 1)
        if layout == "sliced":
            running += 1  # a hole after every run of the dim
    offset = {"sliced": 3, "shifted": 1}.get(layout, 0)
    if layout == "reversed" and nd > 0:
        strides[-1] = -strides[-1]
        offset = (max(shape[-1], 1) - 1) * -strides[-1]
    reach = offset + sum((s - 1) * abs(st) for s, st in zip(shape, strides, strict=True) if s > 0)
    return tuple(strides), offset, reach + 1 + (3 if layout == "sliced" else 0)


def make_input(
    values: np.ndarray, dtype: str, layout: str = "contiguous", device: str = "cpu"
) -> View:
    """A view of ``values`` (rounded to ``dtype``) laid out as ``layout``.

    With "repeated", dim 0 has stride 0, so only ``values[0]`` is stored: read the view's
    values with ``values()``.
    """
    shape = tuple(values.shape)
    if layout == "repeated" and values.ndim > 0 and values.shape[0] > 1:
        values = np.broadcast_to(values[:1], shape)  # one stored copy of values[0]
    strides, offset, size = _layout(shape, layout)
    buffer = torch.full((size,), SENTINEL, dtype=TORCH_DTYPES[dtype], device=device)
    view = View(buffer, dtype, shape, strides, offset)
    if math.prod(shape) > 0:
        flat = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
        buffer[torch.from_numpy(view.positions().reshape(-1)).to(device)] = flat.to(
            device=device, dtype=buffer.dtype
        )
    return view


def make_output(shape: tuple[int, ...], dtype: str, layout: str, device: str = "cpu") -> View:
    """An output view filled with the sentinel (every position, gaps included)."""
    strides, offset, size = _layout(tuple(shape), layout)
    buffer = torch.full((size,), SENTINEL, dtype=TORCH_DTYPES[dtype], device=device)
    return View(buffer, dtype, tuple(shape), strides, offset)


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` and back to float64."""
    return (
        torch.from_numpy(np.asarray(values, dtype=np.float64))
        .to(TORCH_DTYPES[dtype])
        .double()
        .numpy()
    )


def random_values(rng: np.random.Generator, shape, dtype: str, scale: float = 1.0) -> np.ndarray:
    """Normal values, already representable in ``dtype``."""
    return rounded(rng.standard_normal(shape) * scale, dtype)


# --- float64 references (PyTorch's own ops in float64, or their formulas) ---


def _t(a: np.ndarray | None) -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.asarray(a, dtype=np.float64))


def ref_gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    """torch.nn.functional.gelu in float64."""
    return torch.nn.functional.gelu(_t(x), approximate=approximate).numpy()


def ref_gelu_backward(dy: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """aten::gelu_backward in float64."""
    return torch.ops.aten.gelu_backward(_t(dy), _t(x), approximate=approximate).numpy()


def ref_layer_norm(x, normalized_shape, weight, bias, eps) -> dict[str, np.ndarray]:
    """aten::native_layer_norm in float64: y, and mean and rstd with x's leading shape."""
    y, mean, rstd = torch.native_layer_norm(
        _t(x), list(normalized_shape), _t(weight), _t(bias), eps
    )
    lead = x.shape[: x.ndim - len(normalized_shape)]
    return {"y": y.numpy(), "mean": mean.reshape(lead).numpy(), "rstd": rstd.reshape(lead).numpy()}


def ref_layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight) -> dict[str, np.ndarray]:
    """aten::native_layer_norm_backward in float64 from the given statistics."""
    k = len(normalized_shape)
    keep = tuple(mean.shape) + (1,) * k
    ones = np.ones(normalized_shape)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        _t(dy),
        _t(x),
        list(normalized_shape),
        _t(mean).reshape(keep),
        _t(rstd).reshape(keep),
        _t(ones if weight is None else weight),
        _t(np.zeros(normalized_shape)),
        [True, True, True],
    )
    return {"dx": dx.numpy(), "dweight": dw.numpy(), "dbias": db.numpy()}


def ref_rms_norm(x, normalized_shape, weight, eps) -> dict[str, np.ndarray]:
    """aten::_fused_rms_norm in float64: y, and rstd with x's leading shape."""
    y, rstd = torch.ops.aten._fused_rms_norm(_t(x), list(normalized_shape), _t(weight), eps)
    lead = x.shape[: x.ndim - len(normalized_shape)]
    return {"y": y.numpy(), "rstd": rstd.reshape(lead).numpy()}


def ref_rms_norm_backward(dy, x, normalized_shape, rstd, weight) -> dict[str, np.ndarray]:
    """rms_norm's gradients from a given rstd (PyTorch has no CPU kernel taking rstd):
    g = dy * weight, xhat = x * rstd, dx = rstd * (g - xhat * mean(g * xhat)),
    dweight = sum of dy * xhat over the leading dims. ``test_rms_norm_backward_formula`` checks
    this against torch autograd."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    lead_axes = tuple(range(x.ndim - len(normalized_shape)))
    r = rstd.reshape(rstd.shape + (1,) * len(axes))
    xhat = x * r
    g = dy if weight is None else dy * weight
    n = math.prod(normalized_shape)
    mean_gx = (g * xhat).sum(axis=axes, keepdims=True) / n if n else 0.0
    return {"dx": r * (g - xhat * mean_gx), "dweight": (dy * xhat).sum(axis=lead_axes)}


# --- comparison ---


def assert_close(name: str, ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> None:
    """Elementwise |ours - ref| <= atol + rtol * |ref|, NaN where ref is NaN, equal infinities."""
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != {ref.shape}"
    ref_nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), ref_nan), f"{name}: NaN at different places"
    inf = np.isinf(ref)
    assert np.array_equal(ours[inf], ref[inf]), f"{name}: infinities differ"
    finite = ~ref_nan & ~inf
    err = np.abs(ours[finite] - ref[finite])
    bound = atol + rtol * np.abs(ref[finite])
    if err.size and not np.all(err <= bound):
        worst = int(np.argmax(err - bound))
        raise AssertionError(
            f"{name}: |ours - ref| = {err[worst]:.3g} > {bound[worst]:.3g} at a value "
            f"{ref[finite][worst]:.6g} ({int(np.sum(err > bound))} of {err.size} elements)"
        )


# --- cases: inputs, scalars, outputs to fill and the float64 expectation ---


@dataclass
class Case:
    """One call of an op with the float64 values its outputs should hold."""

    op: str
    inputs: dict[str, View | None]
    scalars: dict
    outputs: dict[str, View]
    expected: dict[str, np.ndarray]

    def run(self, lib, stream: int | None = None) -> dict[str, np.ndarray]:
        """Call the op (on ``stream`` for CUDA views) and return the outputs' values."""
        tensors = {name: v.desc() for name, v in {**self.inputs, **self.outputs}.items() if v}
        lib.call(self.op, stream=stream, **tensors, **self.scalars)
        if stream is not None:
            torch.cuda.synchronize()
        for name, view in self.outputs.items():
            assert view.gaps_untouched(), f"{self.op}: {name} was written outside its view"
        return {name: view.values() for name, view in self.outputs.items()}


def binary_case(
    op: str,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    dtype: str,
    layouts: tuple[str, str, str] = ("contiguous",) * 3,
    device: str = "cpu",
    seed: int = 0,
    alpha: float = 0.5,
    scale: float = 1.0,
) -> Case:
    """add (with ``alpha``) or mul (with ``scale``) of a and b broadcast together (NumPy's
    rule)."""
    rng = np.random.default_rng(seed)
    a = make_input(random_values(rng, a_shape, dtype), dtype, layouts[0], device)
    b = make_input(random_values(rng, b_shape, dtype), dtype, layouts[1], device)
    av, bv = a.values(), b.values()
    expected = av + alpha * bv if op == "add" else av * bv * float(np.float32(scale))
    out = make_output(expected.shape, dtype, layouts[2], device)
    scalars = {"alpha": alpha} if op == "add" else {"scale": scale}
    return Case(op, {"a": a, "b": b}, scalars, {"out": out}, {"out": expected})


def gelu_case(
    shape: tuple[int, ...],
    dtype: str,
    approximate: str,
    layouts: tuple[str, str] = ("contiguous",) * 2,
    device: str = "cpu",
    seed: int = 0,
    values: np.ndarray | None = None,
) -> Case:
    """gelu of normal values scaled by 3 (or of ``values``)."""
    rng = np.random.default_rng(seed)
    xv = random_values(rng, shape, dtype, 3.0) if values is None else rounded(values, dtype)
    x = make_input(xv, dtype, layouts[0], device)
    y = make_output(x.shape, dtype, layouts[1], device)
    expected = ref_gelu(x.values(), approximate)
    return Case("gelu", {"x": x}, {"approximate": approximate}, {"y": y}, {"y": expected})


def gelu_backward_case(
    shape: tuple[int, ...],
    dtype: str,
    approximate: str,
    layouts: tuple[str, str, str] = ("contiguous",) * 3,
    device: str = "cpu",
    seed: int = 0,
    values: np.ndarray | None = None,
) -> Case:
    """gelu_backward at normal x scaled by 3 (or ``values``), normal dy."""
    rng = np.random.default_rng(seed)
    xv = random_values(rng, shape, dtype, 3.0) if values is None else rounded(values, dtype)
    dy = make_input(random_values(rng, xv.shape, dtype), dtype, layouts[0], device)
    x = make_input(xv, dtype, layouts[1], device)
    dx = make_output(x.shape, dtype, layouts[2], device)
    expected = ref_gelu_backward(dy.values(), x.values(), approximate)
    return Case(
        "gelu_backward",
        {"dy": dy, "x": x},
        {"approximate": approximate},
        {"dx": dx},
        {"dx": expected},
    )


def _param(rng, shape, dtype: str, kind: str | None, layout: str, device: str, shift: float):
    """A weight or bias: absent (None), float32 ("float32") or the data's dtype ("same")."""
    if kind is None:
        return None
    pdtype = "float32" if kind == "float32" else dtype
    return make_input(random_values(rng, shape, pdtype) * 0.5 + shift, pdtype, layout, device)


def _stats(values: np.ndarray, layout: str, device: str) -> View:
    """Statistics as a forward leaves them: float32."""
    return make_input(rounded(values, "float32"), "float32", layout, device)


@dataclass(frozen=True)
class NormSpec:
    """A normalisation case: x's shape, how many trailing dims are normalized, the dtype of the
    parameters (None, "float32" or "same" as x) and the layouts of data, statistics and
    parameters."""

    shape: tuple[int, ...]
    k: int
    dtype: str
    weight: str | None = "same"
    bias: str | None = "same"
    data_layout: str = "contiguous"
    out_layout: str = "contiguous"
    stats_layout: str = "contiguous"
    param_layout: str = "contiguous"
    eps: float = 1e-5
    scale: float = 1.0
    shift: float = 0.0

    @property
    def normalized(self) -> tuple[int, ...]:
        """normalized_shape: the trailing k dims."""
        return self.shape[len(self.shape) - self.k :]

    @property
    def id(self) -> str:
        """The case's test id: dtype, shape, k, parameter dtypes and layouts."""
        return (
            f"{self.dtype}-{'x'.join(map(str, self.shape))}-k{self.k}-w{self.weight}-b{self.bias}-"
            f"{self.data_layout}-{self.out_layout}-{self.stats_layout}-{self.param_layout}"
            + ("" if self.eps == 1e-5 else f"-eps{self.eps}")
        )

    @property
    def lead(self) -> tuple[int, ...]:
        """The leading dims (the shape of the statistics)."""
        return self.shape[: len(self.shape) - self.k]


def unusual_eps_specs(dtype: str) -> list[NormSpec]:
    """eps as torch takes it beyond the usual: negative (rows whose variance is above -eps are
    finite, the rest NaN), infinite (rstd 0) and NaN."""
    return [
        NormSpec((6, 40), 1, dtype, eps=-0.1),
        NormSpec((6, 40), 1, dtype, eps=-0.5, scale=0.5),
        NormSpec((3, 16), 1, dtype, eps=float("inf")),
        NormSpec((3, 16), 1, dtype, eps=float("nan")),
    ]


def layer_norm_case(spec: NormSpec, device: str = "cpu", seed: int = 0) -> Case:
    """layer_norm forward; x = normal * scale + shift."""
    rng = np.random.default_rng(seed)
    x = make_input(
        random_values(rng, spec.shape, spec.dtype, spec.scale) + spec.shift,
        spec.dtype,
        spec.data_layout,
        device,
    )
    weight = _param(rng, spec.normalized, spec.dtype, spec.weight, spec.param_layout, device, 1.0)
    bias = _param(rng, spec.normalized, spec.dtype, spec.bias, spec.param_layout, device, 0.0)
    expected = ref_layer_norm(
        x.values(),
        spec.normalized,
        None if weight is None else weight.values(),
        None if bias is None else bias.values(),
        spec.eps,
    )
    outputs = {
        "y": make_output(spec.shape, spec.dtype, spec.out_layout, device),
        "mean": make_output(spec.lead, "float32", spec.stats_layout, device),
        "rstd": make_output(spec.lead, "float32", spec.stats_layout, device),
    }
    return Case(
        "layer_norm",
        {"x": x, "weight": weight, "bias": bias},
        {"normalized_shape": list(spec.normalized), "eps": spec.eps},
        outputs,
        expected,
    )


def layer_norm_backward_case(spec: NormSpec, device: str = "cpu", seed: int = 0) -> Case:
    """layer_norm_backward from the statistics of x (rounded to float32, as saved)."""
    rng = np.random.default_rng(seed)
    xv = rounded(random_values(rng, spec.shape, spec.dtype, spec.scale) + spec.shift, spec.dtype)
    forward = ref_layer_norm(xv, spec.normalized, None, None, spec.eps)
    dy = make_input(
        random_values(rng, spec.shape, spec.dtype), spec.dtype, spec.data_layout, device
    )
    x = make_input(xv, spec.dtype, spec.data_layout, device)
    mean = _stats(forward["mean"], spec.stats_layout, device)
    rstd = _stats(forward["rstd"], spec.stats_layout, device)
    weight = _param(rng, spec.normalized, spec.dtype, spec.weight, spec.param_layout, device, 1.0)
    expected = ref_layer_norm_backward(
        dy.values(),
        x.values(),
        spec.normalized,
        mean.values(),
        rstd.values(),
        None if weight is None else weight.values(),
    )
    outputs = {
        "dx": make_output(spec.shape, spec.dtype, spec.out_layout, device),
        "dweight": make_output(spec.normalized, "float32", spec.stats_layout, device),
        "dbias": make_output(spec.normalized, "float32", spec.stats_layout, device),
    }
    return Case(
        "layer_norm_backward",
        {"dy": dy, "x": x, "mean": mean, "rstd": rstd, "weight": weight},
        {"normalized_shape": list(spec.normalized)},
        outputs,
        expected,
    )


def rms_norm_case(spec: NormSpec, device: str = "cpu", seed: int = 0) -> Case:
    """rms_norm forward; x = normal * scale + shift."""
    rng = np.random.default_rng(seed)
    x = make_input(
        random_values(rng, spec.shape, spec.dtype, spec.scale) + spec.shift,
        spec.dtype,
        spec.data_layout,
        device,
    )
    weight = _param(rng, spec.normalized, spec.dtype, spec.weight, spec.param_layout, device, 1.0)
    expected = ref_rms_norm(
        x.values(), spec.normalized, None if weight is None else weight.values(), spec.eps
    )
    outputs = {
        "y": make_output(spec.shape, spec.dtype, spec.out_layout, device),
        "rstd": make_output(spec.lead, "float32", spec.stats_layout, device),
    }
    return Case(
        "rms_norm",
        {"x": x, "weight": weight},
        {"normalized_shape": list(spec.normalized), "eps": spec.eps},
        outputs,
        expected,
    )


def rms_norm_backward_case(spec: NormSpec, device: str = "cpu", seed: int = 0) -> Case:
    """rms_norm_backward from the rstd of x (rounded to float32, as saved)."""
    rng = np.random.default_rng(seed)
    xv = rounded(random_values(rng, spec.shape, spec.dtype, spec.scale) + spec.shift, spec.dtype)
    forward = ref_rms_norm(xv, spec.normalized, None, spec.eps)
    dy = make_input(
        random_values(rng, spec.shape, spec.dtype), spec.dtype, spec.data_layout, device
    )
    x = make_input(xv, spec.dtype, spec.data_layout, device)
    rstd = _stats(forward["rstd"], spec.stats_layout, device)
    weight = _param(rng, spec.normalized, spec.dtype, spec.weight, spec.param_layout, device, 1.0)
    expected = ref_rms_norm_backward(
        dy.values(),
        x.values(),
        spec.normalized,
        rstd.values(),
        None if weight is None else weight.values(),
    )
    outputs = {
        "dx": make_output(spec.shape, spec.dtype, spec.out_layout, device),
        "dweight": make_output(spec.normalized, "float32", spec.stats_layout, device),
    }
    return Case(
        "rms_norm_backward",
        {"dy": dy, "x": x, "rstd": rstd, "weight": weight},
        {"normalized_shape": list(spec.normalized)},
        outputs,
        expected,
    )


NORM_CASES = {
    "layer_norm": layer_norm_case,
    "layer_norm_backward": layer_norm_backward_case,
    "rms_norm": rms_norm_case,
    "rms_norm_backward": rms_norm_backward_case,
}
