"""layer_norm over the trailing dims named by normalized_shape (float32 weight and bias here)."""

from __future__ import annotations

import math

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.dtypes import round_to

# (x's shape, how many trailing dims are normalized): rows in registers (one warp to a block),
# rows read twice, several normalized dims, no rows, empty rows (mean 0, rstd NaN, as PyTorch).
SHAPES = [
    ((4, 33), 1),
    ((2, 3, 5), 2),
    ((7,), 1),
    ((16, 1024), 1),
    ((3, 8195), 1),
    ((2, 40000), 1),
    ((0, 6), 1),
    ((3, 0), 1),
    ((2, 1), 1),
]
EPS = 1e-5


def cases(op: str, **scalars) -> list:
    """The cases of a normalisation op (shared by layer_norm, rms_norm and their backwards):
    every shape and dtype, x offset by 100 ("offset"), no weight or bias ("noaffine"), and the
    data layouts."""

    def one(shape, k, dtype="float32", layout="contiguous", values="normal"):
        normalized = tuple(shape[len(shape) - k :])
        return case(op, shape, dtype, layout, values, normalized_shape=normalized, **scalars)

    out = [one(s, k, d) for s, k in SHAPES for d in DTYPES]
    out += [one((6, 37), 1, d, values="offset") for d in DTYPES]
    out.append(one((8, 48), 1, values="noaffine"))
    out += [one((6, 10), 1, layout=layout) for layout in LAYOUTS[1:]]
    return out


CASES = cases("layer_norm", eps=EPS)


def x_values(c, rng: np.random.Generator) -> np.ndarray:
    """x: normal, or offset by 100 (the mean then dwarfs the spread)."""
    x = data(c.shape, c.dtype, rng)
    return round_to(x + 100.0, c.dtype) if c.values == "offset" else x


def parameter(c, rng: np.random.Generator, shift: float) -> np.ndarray | None:
    """A float32 weight (shift 1) or bias (shift 0) of normalized_shape; absent for noaffine."""
    if c.values == "noaffine":
        return None
    shape = c.arguments["normalized_shape"]
    return round_to(rng.standard_normal(shape) * 0.5 + shift, "float32")


def inputs(c, rng: np.random.Generator) -> dict:
    """x, weight and bias."""
    return {"x": x_values(c, rng), "weight": parameter(c, rng, 1.0), "bias": parameter(c, rng, 0.0)}


def axes(x: np.ndarray, normalized_shape) -> tuple[int, ...]:
    """The normalized (trailing) axes of x."""
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


def statistics(x: np.ndarray, normalized_shape, eps: float, centered: bool):
    """mean (0 when not centered or with no element) and rstd, keeping the normalized axes."""
    ax = axes(x, normalized_shape)
    n = math.prod(normalized_shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (
            x.sum(axis=ax, keepdims=True) / n
            if centered and n
            else np.zeros_like(x.sum(axis=ax, keepdims=True))
        )
        var = ((x - mean) ** 2).sum(axis=ax, keepdims=True) / n
        return mean, 1.0 / np.sqrt(var + eps)


def reference(x, normalized_shape, weight, bias, eps) -> dict:
    """y = (x - mean) * rstd * weight + bias; mean and rstd with x's leading shape."""
    mean, rstd = statistics(x, normalized_shape, eps, centered=True)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    lead = x.shape[: x.ndim - len(normalized_shape)]
    return {"y": y, "mean": mean.reshape(lead), "rstd": rstd.reshape(lead)}
