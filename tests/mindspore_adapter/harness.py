"""Running the conformance cases through opforge.mindspore, in PYNATIVE or GRAPH mode.

Generic over the op table: each case's tensors become MindSpore tensors (dense, as MindSpore hands
AOT kernels dense buffers; the transposed and strided layouts are made by MindSpore ops, which
checks that views reach the kernel with the right values), the op's primitive runs through the
generated wrapper, and for a differentiable op ``mindspore.grad`` through its bprop is compared
with the table's backward rule applied to the references.
"""

from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

from opforge.mindspore import _ops
from tests.conformance import gradients
from tests.conformance.case import Case
from tests.conformance.dtypes import round_to
from tests.conformance.runner import Check, check, is_data, prepare, written

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


def tensor(values: np.ndarray, dtype: str, layout: str = "contiguous") -> Tensor:
    """values (exact in the dtype) as a MindSpore tensor, built with the given layout."""
    array = np.asarray(values, dtype=np.float32)
    if layout == "transposed" and array.ndim >= 2:
        t = ops.swapaxes(Tensor(np.ascontiguousarray(array.swapaxes(-1, -2))), -1, -2)
    elif layout == "strided" and array.ndim >= 1:
        base = np.zeros((*array.shape[:-1], array.shape[-1] * 2), np.float32)
        base[..., ::2] = array
        t = Tensor(base)[..., ::2]
    else:
        t = Tensor(np.array(array, order="C"))
    return t if dtype == "float32" else t.astype(MS_DTYPES[dtype])


def f64(t: Tensor) -> np.ndarray:
    """A tensor's values as float64 numpy."""
    if t.dtype == mstype.bfloat16:
        t = t.astype(mstype.float32)
    return t.asnumpy().astype(np.float64)


def checks(case: Case, mode: str) -> list[Check]:
    """Run ``case`` through the adapter in ``mode``; the checks against the reference."""
    p = prepare(case)
    op = p.op
    wrapper = getattr(_ops, f"_{case.op}")
    present = [a.name for a in op.tensors if p.tensors[a.name] is not None]
    tensors = {
        name: tensor(
            p.tensors[name],
            p.dtype(case, name),
            case.layout if is_data(op.arg(name)) else "contiguous",
        )
        for name in present
    }
    scalars = [p.scalars[a.name] for a in op.scalars]

    index = tuple(present.index(a.name) if a.name in present else -1 for a in op.tensors)

    def run(*values):
        args = [values[i] if i >= 0 else None for i in index]
        return wrapper(case.op, *args, *scalars)

    result = call(run, mode)(*(tensors[n] for n in present))
    results = result if isinstance(result, tuple) else (result,)
    produced = dict(zip(written(op), results, strict=True))
    out = [
        check(case, p, name, f64(produced[name]), p.expected[name])
        for name in written(op)
        if name in p.expected
    ]
    wanted = [
        n
        for n in op.differentiable
        if n in tensors and p.tensors[n].size and case.values == "normal"
    ]
    if wanted:
        out += _gradient_checks(case, p, run, present, tensors, wanted, mode)
    return out


def _gradient_checks(case, p, run, present, tensors, wanted, mode) -> list[Check]:
    rng = np.random.default_rng(1)
    names = gradients.differentiable_outputs(p.op)
    # Rounded to the outputs' dtype: the gradient reaching the bprop is stored in it.
    seeds = {
        name: round_to(rng.standard_normal(np.shape(p.expected[name])), p.dtype(case, name))
        for name in names
    }
    order = written(p.op)
    weights = [Tensor(seeds[n].astype(np.float32)) for n in names]

    slots = tuple(order.index(n) for n in names)
    first = len(present)
    single = len(order) == 1

    # Losses reduce in float32: MindSpore's CPU ReduceSum has no bfloat16 kernel.
    def loss(*values):
        results = run(*values[:first])
        if single:
            results = (results,)
        total = 0
        for i in range(len(slots)):
            total = total + (results[slots[i]].astype(mstype.float32) * values[first + i]).sum()
        return total

    positions = tuple(present.index(n) for n in wanted)
    grads = ms.grad(call(loss, mode), grad_position=positions)(
        *(tensors[n] for n in present), *weights
    )
    grads = grads if isinstance(grads, tuple) else (grads,)
    expected = gradients.reference(p.op, p.tensors, p.scalars, p.expected, seeds)
    return [
        check(case, p, name, f64(g), expected[name], widen=4.0, label=f"{name}.grad")
        for name, g in zip(wanted, grads, strict=True)
    ]
