"""Running the conformance cases through opforge.mindspore, in PYNATIVE or GRAPH mode."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

import opforge.mindspore as ofm
from tests.conformance import reference
from tests.conformance.cases import Case, make_inputs
from tests.conformance.runner import DATA_TOLERANCE, EPS, MOMENTUM, PARAM_TOLERANCE, Check

MS_DTYPES = {"float32": mstype.float32, "float16": mstype.float16, "bfloat16": mstype.bfloat16}


class Compiled(ms.nn.Cell):
    """``fn`` as a Cell, so that in GRAPH mode it is compiled to a graph before it runs."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def construct(self, *args):
        return self.fn(*args)


def call(fn: Callable, mode: str) -> Callable:
    """``fn`` as run in ``mode``: directly (PYNATIVE) or as a compiled Cell (GRAPH)."""
    return Compiled(fn) if mode == "graph" else fn


# Losses reduce in float32: MindSpore's CPU ReduceSum has no bfloat16 kernel.


def gradient(fn: Callable, positions: tuple[int, ...], mode: str) -> Callable:
    """The gradient of scalar ``fn`` with respect to the inputs at ``positions``, in ``mode``."""
    return ms.grad(call(fn, mode), grad_position=positions)


def tensor(values: np.ndarray, case: Case, laid_out: bool = True) -> Tensor:
    """values (exact in the case's dtype) as a MindSpore tensor, built with the case's layout.

    MindSpore hands AOT kernels dense buffers; the transposed and strided cases check that views
    made by MindSpore ops reach the kernel with the right values.
    """
    array = np.asarray(values, dtype=np.float32)
    layout = case.layout if laid_out and array.ndim >= 1 else "contiguous"
    if layout == "transposed" and array.ndim >= 2:
        t = ops.swapaxes(Tensor(np.ascontiguousarray(array.swapaxes(-1, -2))), -1, -2)
    elif layout == "strided":
        base = np.zeros((*array.shape[:-1], array.shape[-1] * 2), np.float32)
        base[..., ::2] = array
        t = Tensor(base)[..., ::2]
    else:
        t = Tensor(np.array(array, order="C"))
    return t if case.dtype == "float32" else t.astype(MS_DTYPES[case.dtype])


def param(values: np.ndarray | None) -> Tensor | None:
    """A float32 per-channel tensor (or None)."""
    return None if values is None else Tensor(np.asarray(values, np.float32))


def f64(t: Tensor) -> np.ndarray:
    """A tensor's values as float64 numpy."""
    if t.dtype == mstype.bfloat16:
        t = t.astype(mstype.float32)
    return t.asnumpy().astype(np.float64)


def checks(case: Case, mode: str) -> list[Check]:
    """Run ``case`` through the adapter in ``mode``; the checks against the reference."""
    inputs = make_inputs(case, zlib.crc32(case.id.encode()))
    rtol, atol = DATA_TOLERANCE[case.dtype]
    out: list[Check] = []
    if case.op == "add":
        alpha = case.alpha

        def fn(a, b):
            return ofm.add(a, b, alpha)

        y = call(fn, mode)(tensor(inputs["a"], case), tensor(inputs["b"], case))
        ref = reference.add(inputs["a"], inputs["b"], alpha)
        out.append(Check("out", f64(y), ref, rtol, atol, case.dtype))
    elif case.op == "softmax":
        dim = case.dim

        def fn(x):
            return ofm.softmax(x, dim)

        x = tensor(inputs["x"], case)
        y = call(fn, mode)(x)
        out.append(Check("y", f64(y), reference.softmax(inputs["x"], dim), rtol, atol, case.dtype))
        if case.values == "normal" and inputs["x"].size:
            dy_values = np.random.default_rng(1).standard_normal(case.shape)

            def loss(x, dy):
                return (ofm.softmax(x, dim).astype(mstype.float32) * dy).sum()

            dy = Tensor(dy_values.astype(np.float32))
            dx = gradient(loss, (0,), mode)(x, dy)
            expected = reference.softmax_backward(f64(y), f64(dy), dim)
            out.append(Check("x.grad", f64(dx), expected, rtol * 4, atol * 4, case.dtype))
    elif case.op == "softmax_backward":
        dim = case.dim

        def fn(y, dy):
            return ofm.softmax_backward(y, dy, dim)

        dx = call(fn, mode)(tensor(inputs["y"], case), tensor(inputs["dy"], case))
        ref = reference.softmax_backward(inputs["y"], inputs["dy"], dim)
        out.append(Check("dx", f64(dx), ref, rtol, atol, case.dtype))
    elif case.op == "argmax":
        dim, keepdim = case.dim, case.keepdim

        def fn(x):
            return ofm.argmax(x, dim, keepdim)

        idx = call(fn, mode)(tensor(inputs["x"], case))
        assert idx.dtype == mstype.int64
        ref = reference.argmax(inputs["x"], dim, keepdim).astype(np.float64)
        out.append(Check("out", f64(idx), ref, 0, 0, "int64"))
    elif case.op == "batch_norm_backward":
        out += _batch_norm_backward(case, inputs, mode)
    else:
        out += _batch_norm_forward(case, inputs, mode)
    return out


def _batch_norm_forward(case: Case, inputs: dict, mode: str) -> list[Check]:
    rtol, atol = DATA_TOLERANCE[case.dtype]
    prtol, patol = PARAM_TOLERANCE
    training = case.op == "batch_norm_train"
    x = tensor(inputs["x"], case)
    w, b = param(inputs.get("weight")), param(inputs.get("bias"))
    rm, rv = param(inputs["running_mean"]), param(inputs["running_var"])
    affine = case.affine

    def fn(x, w, b, rm, rv):
        if affine:
            return ofm.batch_norm(x, w, b, rm, rv, training, MOMENTUM, EPS)
        return ofm.batch_norm(x, None, None, rm, rv, training, MOMENTUM, EPS)

    args = (x, w, b, rm, rv) if affine else (x, rm, rv, rm, rv)
    y, save_mean, save_invstd, new_mean, new_var = call(fn, mode)(*args)
    weight, bias = inputs.get("weight"), inputs.get("bias")
    if not training:
        ref_y = reference.batch_norm_infer(
            inputs["x"], weight, bias, inputs["running_mean"], inputs["running_var"], EPS
        )
        assert save_mean.shape == (0,) and save_invstd.shape == (0,)
        return [Check("y", f64(y), ref_y, rtol, atol, case.dtype)]
    ref = reference.batch_norm_train(
        inputs["x"], weight, bias, inputs["running_mean"], inputs["running_var"], MOMENTUM, EPS
    )
    out = [Check("y", f64(y), ref["y"], rtol, atol, case.dtype)]
    for name, t in (
        ("save_mean", save_mean),
        ("save_invstd", save_invstd),
        ("running_mean", new_mean),
        ("running_var", new_var),
    ):
        out.append(Check(name, f64(t), ref[name], prtol, patol))
    # The inputs are not written: MindSpore returns the updated statistics.
    np.testing.assert_array_equal(rm.asnumpy(), inputs["running_mean"].astype(np.float32))
    if affine and case.values == "normal" and inputs["x"].size:
        dy_values = np.random.default_rng(2).standard_normal(case.shape)

        def loss(x, w, b, rm, rv, dy):
            y = ofm.batch_norm(x, w, b, rm, rv, True, MOMENTUM, EPS)[0]
            return (y.astype(mstype.float32) * dy).sum()

        dy = Tensor(dy_values.astype(np.float32))
        dx, dw, db = gradient(loss, (0, 1, 2), mode)(x, w, b, rm, rv, dy)
        grads = reference.batch_norm_backward(
            f64(dy), inputs["x"], weight, ref["save_mean"], ref["save_invstd"]
        )
        count = max(1, inputs["x"].size // case.shape[1])
        scale = max(1.0, float(np.max(np.abs(f64(dy)))))
        out += [
            Check("x.grad", f64(dx), grads["dx"], rtol * 4, atol * 4 * scale, case.dtype),
            Check("weight.grad", f64(dw), grads["dweight"], prtol * 10, patol * 10 * count),
            Check("bias.grad", f64(db), grads["dbias"], prtol * 10, patol * 10 * count),
        ]
    return out


def _batch_norm_backward(case: Case, inputs: dict, mode: str) -> list[Check]:
    rtol, atol = DATA_TOLERANCE[case.dtype]
    prtol, patol = PARAM_TOLERANCE
    affine = case.affine

    def fn(dy, x, w, sm, si):
        return ofm.batch_norm_backward(dy, x, w if affine else None, sm, si, EPS)

    sm, si = param(inputs["save_mean"]), param(inputs["save_invstd"])
    w = param(inputs["weight"]) if affine else sm
    dx, dw, db = call(fn, mode)(tensor(inputs["dy"], case), tensor(inputs["x"], case), w, sm, si)
    ref = reference.batch_norm_backward(
        inputs["dy"], inputs["x"], inputs.get("weight"), inputs["save_mean"], inputs["save_invstd"]
    )
    count = max(1, inputs["x"].size // case.shape[1])
    scale = max(1.0, float(np.max(np.abs(inputs["dy"])))) if inputs["dy"].size else 1.0
    return [
        Check("dx", f64(dx), ref["dx"], rtol, atol * scale, case.dtype),
        Check("dweight", f64(dw), ref["dweight"], prtol, patol * count),
        Check("dbias", f64(db), ref["dbias"], prtol, patol * count),
    ]
