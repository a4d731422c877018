"""softmax_backward: dx = y * (dy - sum(dy * y, dim))."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.dtypes import round_to
from tests.conformance.ops.softmax import SHAPES, softmax

CASES = [case("softmax_backward", s, d, dim=dim) for s, dim in SHAPES for d in DTYPES]
CASES += [case("softmax_backward", (5, 12), "float32", layout, dim=-1) for layout in LAYOUTS[1:]]


def inputs(c, rng: np.random.Generator) -> dict:
    """y a softmax output, dy a random gradient."""
    y = round_to(softmax(rng.standard_normal(c.shape), c.arguments["dim"]), c.dtype)
    return {"y": y, "dy": data(c.shape, c.dtype, rng)}


def reference(y, dy, dim) -> dict:
    """dx."""
    if y.ndim == 0 or y.size == 0:
        return {"dx": y * (dy - dy * y)}
    return {"dx": y * (dy - np.sum(dy * y, axis=dim, keepdims=True))}
