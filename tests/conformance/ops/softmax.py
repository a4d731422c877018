"""softmax along a dim; NaN and all -inf rows give NaN, as in PyTorch."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case
from tests.conformance.dtypes import round_to

SHAPES = [
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

CASES = [case("softmax", s, d, dim=dim) for s, dim in SHAPES for d in DTYPES]
for _values in ("large", "masked", "all_neg_inf", "nan"):
    for _d in ("float32", "float16"):
        CASES += [case("softmax", (6, 37), _d, values=_values, dim=dim) for dim in (-1, 0)]
    CASES.append(case("softmax", (4, 2048), "bfloat16", values=_values, dim=-1))
CASES += [
    case("softmax", (5, 12), "float32", layout, dim=dim)
    for layout in LAYOUTS[1:]
    for dim in (-1, 0)
]


def pattern(values: str, x: np.ndarray, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Edge values written into x along ``dim`` (shared with argmax)."""
    x = x.copy()
    if values == "large":
        return x * 1e4
    if values == "offset":
        return x + 100.0
    if values == "ties":
        return rng.integers(0, 3, size=x.shape).astype(np.float64)
    if not x.size or values == "normal":
        return x
    rows = np.moveaxis(x, dim, -1)  # a view: edits land in x
    if values == "masked":
        mask = rng.random(rows.shape) < 0.4
        mask[..., 0] = False  # every row keeps a finite entry
        rows[mask] = -np.inf
    elif values == "all_neg_inf":
        rows[(0,) * (rows.ndim - 1)] = -np.inf
    elif values == "neg_inf":
        rows[..., 1::2] = -np.inf
    elif values == "nan":
        flat = rows.reshape(-1, rows.shape[-1])
        flat[0, rows.shape[-1] // 2] = np.nan
        if rows.shape[-1] > 3:
            flat[-1, -1] = np.nan
            flat[-1, 1] = np.nan
        rows[...] = flat.reshape(rows.shape)
    return x


def inputs(c, rng: np.random.Generator) -> dict:
    """x of the case's shape, with its edge values along dim."""
    x = pattern(c.values, rng.standard_normal(c.shape), c.arguments["dim"], rng)
    return {"x": round_to(x, c.dtype)}


def softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """Softmax in float64."""
    if x.ndim == 0:
        return np.exp(x - x) / np.exp(x - x)
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)


def reference(x, dim) -> dict:
    """y = softmax(x, dim)."""
    return {"y": softmax(x, dim)}
