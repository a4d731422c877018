"""mul: out = a * b, broadcasting a and b against each other.

b's shape comes from the case's pattern: a's shape ("normal"), a bias over a's last dim
("bias"), a single element ("scalar"), or a column ("column", a's shape with last dim 1).
"""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data

CASES = [
    case("mul", s, d, values=v)
    for s, v in [
        ((0,), "normal"),
        ((1,), "normal"),
        ((4099,), "normal"),
        ((3, 5), "normal"),
        ((), "normal"),
        ((64, 256), "bias"),
        ((33, 100), "bias"),
        ((2, 0, 3), "bias"),
        ((7, 9), "scalar"),
        ((6, 40), "column"),
    ]
    for d in DTYPES
]
CASES += [case("mul", (6, 37), d, values="large") for d in DTYPES]
CASES += [case("mul", (6, 10), "float32", layout, values="bias") for layout in LAYOUTS[1:]]


def b_shape(shape: tuple[int, ...], values: str) -> tuple[int, ...]:
    """b's shape for the case's pattern (shared with add's broadcasting cases)."""
    if values == "bias":
        return shape[-1:]
    if values == "scalar":
        return ()
    if values == "column":
        return (*shape[:-1], 1)
    return shape


def inputs(c, rng: np.random.Generator) -> dict:
    """a of the case's shape, b of the pattern's."""
    scale = 1e2 if c.values == "large" else 1.0
    return {
        "a": data(c.shape, c.dtype, rng, scale),
        "b": data(b_shape(c.shape, c.values), c.dtype, rng, scale),
    }


def reference(a, b) -> dict:
    """a * b, broadcast."""
    return {"out": a * b}
