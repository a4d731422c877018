"""Running the conformance cases through the PyTorch adapter (also used by the parity tests).

Generic over the op table: each case's tensors become torch tensors in the case's layout, the op
runs as ``torch.ops.opforge.<op>``, and for a differentiable op the gradients of its inputs from
autograd are compared with the table's backward rule applied to the references.
"""

from __future__ import annotations

import numpy as np
import torch

import opforge.torch  # noqa: F401  (registers torch.ops.opforge)
from tests.conformance import gradients
from tests.conformance.case import Case
from tests.conformance.runner import Check, check, is_data, prepare, written

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def tensor(
    values: np.ndarray, dtype: str, layout: str = "contiguous", device: str = "cpu"
) -> torch.Tensor:
    """values (exact in the dtype) as a torch tensor with the given layout."""
    t = torch.from_numpy(np.array(values)).to(TORCH_DTYPES[dtype])
    if t.dim() >= 1:
        if layout == "transposed" and t.dim() >= 2:
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif layout == "strided":
            base = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
            base[..., ::2] = t
            t = base[..., ::2]
    return t.to(device)


def f64(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as float64 numpy."""
    return t.detach().cpu().double().numpy()


def checks(case: Case, device: str = "cpu") -> list[Check]:
    """Run ``case`` through the adapter; the checks against the reference (values and grads)."""
    p = prepare(case)
    op = p.op
    differentiable = set(op.differentiable) if case.values == "normal" else set()
    args = []
    inputs: dict[str, torch.Tensor] = {}
    for arg in op.args:
        if not arg.is_tensor:
            args.append(p.scalars[arg.name])
            continue
        values = p.tensors[arg.name]
        if values is None:
            args.append(None)
            continue
        t = tensor(
            values, p.dtype(case, arg.name), case.layout if is_data(arg) else "contiguous", device
        )
        if arg.name in differentiable and t.numel():
            t.requires_grad_()
        inputs[arg.name] = t
        args.append(t)
    result = getattr(torch.ops.opforge, case.op).default(*args)
    results = result if isinstance(result, tuple) else (result,)
    produced = dict(zip([o.name for o in op.outputs], results, strict=True))
    produced.update({a.name: inputs[a.name] for a in op.tensors if a.mutable and a.name in inputs})
    out = [
        check(case, p, name, f64(produced[name]), p.expected[name])
        for name in written(op)
        if name in p.expected and name in produced
    ]
    wanted = [n for n in differentiable if n in inputs and inputs[n].requires_grad]
    if wanted:
        out += _gradient_checks(case, p, produced, inputs, wanted)
    return out


def _gradient_checks(case: Case, p, produced: dict, inputs: dict, wanted: list[str]) -> list[Check]:
    rng = np.random.default_rng(1)
    seeds = {
        name: rng.standard_normal(np.shape(p.expected[name]))
        for name in gradients.differentiable_outputs(p.op)
    }
    outputs = [produced[name] for name in seeds]
    upstream = [
        torch.from_numpy(seeds[name]).to(produced[name].dtype).to(produced[name].device)
        for name in seeds
    ]
    grads = torch.autograd.grad(outputs, [inputs[n] for n in wanted], upstream, allow_unused=True)
    # The reference sees what the adapter saw: the upstream gradients as stored in their dtype.
    seen = {name: f64(g) for name, g in zip(seeds, upstream, strict=True)}
    expected = gradients.reference(p.op, p.tensors, p.scalars, p.expected, seen)
    return [
        check(case, p, name, f64(g), expected[name], widen=4.0, label=f"{name}.grad")
        for name, g in zip(wanted, grads, strict=True)
    ]
