"""The conformance table: every op by shapes, dims, dtypes, layouts and edge values.

Every layer (the C ABI on CPU and GPU, the PyTorch and MindSpore adapters) runs these same cases
against the float64 reference in ``reference.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.conformance.dtypes import round_to

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("contiguous", "transposed", "strided", "reversed")


@dataclass(frozen=True)
class Case:
    """One conformance case; ``values`` names the input pattern (edge values)."""

    op: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    dim: int = -1
    keepdim: bool = False
    layout: str = "contiguous"
    values: str = "normal"
    alpha: float = 1.0
    affine: bool = True

    @property
    def id(self) -> str:
        """A readable pytest id."""
        shape = "x".join(map(str, self.shape)) or "scalar"
        parts = [self.op, shape, self.dtype]
        if self.op in ("softmax", "softmax_backward", "argmax"):
            parts.append(f"dim{self.dim}")
        if self.keepdim:
            parts.append("keepdim")
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.values != "normal":
            parts.append(self.values)
        if not self.affine:
            parts.append("noaffine")
        return "-".join(parts)


def _values(case: Case, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Input values (float64, representable in the case's dtype) for the case's pattern."""
    x = rng.standard_normal(shape)
    kind = case.values
    if kind == "large":
        x = x * 1e4
    elif kind == "offset":
        x = 100.0 + x
    elif kind == "ties":
        x = rng.integers(0, 3, size=shape).astype(np.float64)
    elif kind in ("masked", "all_neg_inf", "nan", "neg_inf") and x.size:
        rows = np.moveaxis(x, case.dim, -1)  # a view: edits land in x
        if kind == "masked":
            mask = rng.random(rows.shape) < 0.4
            mask[..., 0] = False  # every row keeps a finite entry
            rows[mask] = -np.inf
        elif kind == "all_neg_inf":
            rows[(0,) * (rows.ndim - 1)] = -np.inf
        elif kind == "neg_inf":
            rows[..., 1::2] = -np.inf
        else:
            flat = rows.reshape(-1, rows.shape[-1]) if rows.shape[-1] else rows
            if flat.size:
                flat[0, rows.shape[-1] // 2] = np.nan
                if rows.shape[-1] > 3:
                    flat[-1, -1] = np.nan
                    flat[-1, 1] = np.nan
                rows[...] = flat.reshape(rows.shape)
    return round_to(x, case.dtype)


def make_inputs(case: Case, seed: int) -> dict[str, np.ndarray]:
    """Named float64 inputs of ``case``, exactly representable in its dtype."""
    rng = np.random.default_rng(seed)
    if case.op == "add":
        return {"a": _values(case, case.shape, rng), "b": _values(case, case.shape, rng)}
    if case.op in ("softmax", "argmax"):
        return {"x": _values(case, case.shape, rng)}
    if case.op == "softmax_backward":
        from tests.conformance.reference import softmax

        logits = rng.standard_normal(case.shape)
        y = round_to(softmax(logits, case.dim), case.dtype)
        return {"y": y, "dy": _values(case, case.shape, rng)}
    channels = case.shape[1]
    inputs = {"x": _values(case, case.shape, rng)}
    if case.affine:
        inputs["weight"] = round_to(rng.uniform(0.5, 1.5, channels), "float32")
        inputs["bias"] = round_to(rng.standard_normal(channels), "float32")
    if case.op in ("batch_norm_train", "batch_norm_infer"):
        inputs["running_mean"] = round_to(rng.standard_normal(channels) * 0.1, "float32")
        inputs["running_var"] = round_to(rng.uniform(0.5, 2.0, channels), "float32")
    if case.op == "batch_norm_backward":
        from tests.conformance.reference import batch_norm_train

        stats = batch_norm_train(inputs["x"], None, None, None, None, 0.1, 1e-5)
        inputs["save_mean"] = round_to(stats["save_mean"], "float32")
        inputs["save_invstd"] = round_to(stats["save_invstd"], "float32")
        inputs["dy"] = _values(Case("add", case.shape, case.dtype), case.shape, rng)
    return inputs


def _softmax_cases() -> list[Case]:
    shapes = [
        ((5,), -1),
        ((1,), 0),
        ((8, 33), -1),
        ((8, 33), 0),
        ((4, 6, 10), 1),
        ((2, 3, 1000), -1),
        ((3, 1, 4), 1),
        ((0, 5), -1),
        ((4, 0), -1),
        ((), 0),
        ((16, 1024), -1),
        ((3, 8195), -1),
        ((2, 40000), -1),
    ]
    cases = [Case("softmax", s, d, dim=dim) for s, dim in shapes for d in DTYPES]
    for values in ("large", "masked", "all_neg_inf", "nan"):
        for d in ("float32", "float16"):
            cases += [Case("softmax", (6, 37), d, dim=-1, values=values)]
            cases += [Case("softmax", (6, 37), d, dim=0, values=values)]
        cases += [Case("softmax", (4, 2048), "bfloat16", dim=-1, values=values)]
    cases += [Case("softmax", (5, 12), "float32", dim=-1, layout=lay) for lay in LAYOUTS[1:]]
    cases += [Case("softmax", (5, 12), "float32", dim=0, layout=lay) for lay in LAYOUTS[1:]]
    cases += [Case("softmax_backward", s, d, dim=dim) for s, dim in shapes for d in DTYPES]
    cases += [
        Case("softmax_backward", (5, 12), "float32", dim=-1, layout=lay) for lay in LAYOUTS[1:]
    ]
    return cases


def _argmax_cases() -> list[Case]:
    shapes = [
        ((7,), 0),
        ((8, 33), -1),
        ((8, 33), 0),
        ((4, 6, 10), 1),
        ((2, 3, 1000), -1),
        ((3, 1, 4), 1),
        ((), 0),
        ((0, 5), -1),
        ((16, 1024), -1),
        ((4, 32771), -1),
    ]
    cases = [Case("argmax", s, d, dim=dim) for s, dim in shapes for d in DTYPES]
    cases += [Case("argmax", (4, 6, 10), "float32", dim=1, keepdim=True)]
    cases += [Case("argmax", (8, 33), "float16", dim=-1, keepdim=True)]
    for values in ("ties", "nan", "neg_inf", "large"):
        for d in DTYPES:
            cases += [Case("argmax", (6, 37), d, dim=-1, values=values)]
            cases += [Case("argmax", (6, 37), d, dim=0, values=values)]
    cases += [Case("argmax", (5, 12), "float32", dim=-1, layout=lay) for lay in LAYOUTS[1:]]
    cases += [Case("argmax", (5, 12), "float32", dim=0, layout=lay) for lay in LAYOUTS[1:]]
    return cases


def _add_cases() -> list[Case]:
    shapes = [(0,), (1,), (7,), (4099,), (3, 5), (2, 3, 4, 5), ()]
    cases = [Case("add", s, d, alpha=a) for s in shapes for d in DTYPES for a in (1.0, -2.5)]
    cases += [Case("add", (6, 37), d, values="large") for d in DTYPES]
    cases += [Case("add", (6, 10), "float32", layout=lay, alpha=0.5) for lay in LAYOUTS[1:]]
    return cases


def _batch_norm_cases() -> list[Case]:
    shapes = [(16, 8), (4, 3, 10), (2, 3, 4, 5), (1, 3, 7), (64, 3, 1, 1), (5, 1)]
    cases = []
    for op in ("batch_norm_train", "batch_norm_infer", "batch_norm_backward"):
        cases += [Case(op, s, d) for s in shapes for d in DTYPES]
        cases += [Case(op, (8, 4, 6), d, values="offset") for d in DTYPES]
        cases += [Case(op, (8, 4, 6), "float32", affine=False)]
        cases += [Case(op, (6, 4, 5), "float32", layout=lay) for lay in LAYOUTS[1:]]
    cases += [
        Case("batch_norm_train", (0, 3), "float32"),
        Case("batch_norm_infer", (0, 3), "float32"),
    ]
    return cases


CASES: list[Case] = _add_cases() + _softmax_cases() + _argmax_cases() + _batch_norm_cases()
