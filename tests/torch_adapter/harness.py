"""Running the conformance cases through opforge.torch (also used by the parity tests)."""

from __future__ import annotations

import zlib

import numpy as np
import torch

import opforge.torch as ot
from tests.conformance import reference
from tests.conformance.cases import Case, make_inputs
from tests.conformance.runner import DATA_TOLERANCE, PARAM_TOLERANCE, Check

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def tensor(
    values: np.ndarray, case: Case, device: str = "cpu", laid_out: bool = True
) -> torch.Tensor:
    """values (exact in the dtype) as a torch tensor with the case's layout."""
    t = torch.from_numpy(np.array(values)).to(TORCH_DTYPES[case.dtype])
    if laid_out and t.dim() >= 1:
        if case.layout == "transposed" and t.dim() >= 2:
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif case.layout == "strided":
            base = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
            base[..., ::2] = t
            t = base[..., ::2]
    return t.to(device)


def f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def checks(case: Case, device: str = "cpu") -> list[Check]:
    """Run ``case`` through the adapter; the checks against the reference (forward and grads)."""
    inputs = make_inputs(case, zlib.crc32(case.id.encode()))
    rtol, atol = DATA_TOLERANCE[case.dtype]
    prtol, patol = PARAM_TOLERANCE
    out: list[Check] = []
    if case.op == "add":
        y = ot.add(
            tensor(inputs["a"], case, device), tensor(inputs["b"], case, device), alpha=case.alpha
        )
        out.append(
            Check(
                "out",
                f64(y),
                reference.add(inputs["a"], inputs["b"], case.alpha),
                rtol,
                atol,
                case.dtype,
            )
        )
    elif case.op == "softmax":
        x = tensor(inputs["x"], case, device).requires_grad_(case.values == "normal")
        y = ot.softmax(x, case.dim)
        ref = reference.softmax(inputs["x"], case.dim)
        out.append(Check("y", f64(y), ref, rtol, atol, case.dtype))
        if x.requires_grad and y.numel():
            dy = np.random.default_rng(1).standard_normal(case.shape)
            y.backward(tensor(dy, case, device, laid_out=False))
            expected = reference.softmax_backward(f64(y), dy, case.dim)
            out.append(Check("x.grad", f64(x.grad), expected, rtol * 4, atol * 4, case.dtype))
    elif case.op == "softmax_backward":
        dx = torch.ops.opforge.softmax_backward(
            tensor(inputs["y"], case, device), tensor(inputs["dy"], case, device), case.dim
        )
        out.append(
            Check(
                "dx",
                f64(dx),
                reference.softmax_backward(inputs["y"], inputs["dy"], case.dim),
                rtol,
                atol,
                case.dtype,
            )
        )
    elif case.op == "argmax":
        idx = ot.argmax(tensor(inputs["x"], case, device), case.dim, case.keepdim)
        out.append(
            Check(
                "out",
                f64(idx),
                reference.argmax(inputs["x"], case.dim, case.keepdim).astype(np.float64),
                0,
                0,
                "int64",
            )
        )
    else:
        x = tensor(inputs["x"], case, device)
        channels = case.shape[1]
        w = torch.from_numpy(inputs["weight"]).float().to(device) if case.affine else None
        b = torch.from_numpy(inputs["bias"]).float().to(device) if case.affine else None
        if case.op == "batch_norm_backward":
            dy = tensor(inputs["dy"], case, device)
            sm = torch.from_numpy(inputs["save_mean"]).float().to(device)
            si = torch.from_numpy(inputs["save_invstd"]).float().to(device)
            dx, dw, db = torch.ops.opforge.batch_norm_backward(dy, x, w, sm, si, 1e-5)
            ref = reference.batch_norm_backward(
                inputs["dy"],
                inputs["x"],
                inputs.get("weight"),
                inputs["save_mean"],
                inputs["save_invstd"],
            )
            count = max(1, inputs["x"].size // channels)
            scale = max(1.0, float(np.max(np.abs(inputs["dy"])))) if inputs["dy"].size else 1.0
            out += [
                Check("dx", f64(dx), ref["dx"], rtol, atol * scale, case.dtype),
                Check("dweight", f64(dw), ref["dweight"], prtol, patol * count),
                Check("dbias", f64(db), ref["dbias"], prtol, patol * count),
            ]
        else:
            training = case.op == "batch_norm_train"
            rm = torch.from_numpy(inputs["running_mean"]).float().to(device)
            rv = torch.from_numpy(inputs["running_var"]).float().to(device)
            y, sm, si = ot.batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
            if training:
                ref = reference.batch_norm_train(
                    inputs["x"],
                    inputs.get("weight"),
                    inputs.get("bias"),
                    inputs["running_mean"],
                    inputs["running_var"],
                    0.1,
                    1e-5,
                )
                out.append(Check("y", f64(y), ref["y"], rtol, atol, case.dtype))
                for name, t in (
                    ("save_mean", sm),
                    ("save_invstd", si),
                    ("running_mean", rm),
                    ("running_var", rv),
                ):
                    out.append(Check(name, f64(t), ref[name], prtol, patol))
            else:
                ref_y = reference.batch_norm_infer(
                    inputs["x"],
                    inputs.get("weight"),
                    inputs.get("bias"),
                    inputs["running_mean"],
                    inputs["running_var"],
                    1e-5,
                )
                out.append(Check("y", f64(y), ref_y, rtol, atol, case.dtype))
                assert sm.numel() == 0 and si.numel() == 0
    return out
