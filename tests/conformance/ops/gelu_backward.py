"""gelu_backward: dx = dy * gelu'(x), of the same approximation."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.ops import gelu as forward

CASES = [
    case("gelu_backward", s, d, approximate=a)
    for s in forward.SHAPES
    for d in DTYPES
    for a in forward.APPROXIMATIONS
]
CASES += [
    case("gelu_backward", forward.SPECIAL.shape, d, values="special", approximate=a)
    for d in DTYPES
    for a in forward.APPROXIMATIONS
]
CASES += [
    case("gelu_backward", (6, 10), "float32", layout, approximate="none") for layout in LAYOUTS[1:]
]


def inputs(c, rng: np.random.Generator) -> dict:
    """dy, and x as gelu's cases make it."""
    x = forward.x_values(c, rng)
    return {"dy": data(x.shape, c.dtype, rng), "x": x}


def reference(dy, x, approximate) -> dict:
    """dx."""
    with np.errstate(invalid="ignore"):
        return {"dx": dy * forward.derivative(x, approximate)}


def scale(name: str, tensors: dict) -> float:
    """dx against the scale of dy."""
    dy = tensors["dy"]
    return max(1.0, float(np.max(np.abs(dy)))) if dy.size else 1.0
