"""add: out = a + alpha * b, broadcasting (b's shape by the pattern, as mul's cases)."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.ops.mul import b_shape

CASES = [
    case("add", s, d, alpha=a)
    for s in [(0,), (1,), (7,), (4099,), (3, 5), (2, 3, 4, 5), ()]
    for d in DTYPES
    for a in (1.0, -2.5)
]
CASES += [case("add", (6, 37), d, values="large", alpha=1.0) for d in DTYPES]
CASES += [case("add", (6, 10), "float32", layout, alpha=0.5) for layout in LAYOUTS[1:]]
CASES += [
    case("add", s, d, values=v, alpha=0.5)
    for s, v in [((64, 256), "bias"), ((2, 0, 3), "bias"), ((7, 9), "scalar"), ((6, 40), "column")]
    for d in DTYPES
]
CASES += [
    case("add", (6, 10), "float32", layout, values="bias", alpha=1.0) for layout in LAYOUTS[1:]
]


def inputs(c, rng: np.random.Generator) -> dict:
    """a of the case's shape, b of the pattern's."""
    scale = 1e4 if c.values == "large" else 1.0
    return {
        "a": data(c.shape, c.dtype, rng, scale),
        "b": data(b_shape(c.shape, c.values), c.dtype, rng, scale),
    }


def reference(a, b, alpha) -> dict:
    """a + alpha * b, broadcast."""
    return {"out": a + alpha * b}
