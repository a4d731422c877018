"""mul: out = a * b * scale, broadcasting a and b against each other.

b's shape comes from the case's pattern: a's shape ("normal"), a bias over a's last dim
("bias"), a single element ("scalar"), a column ("column", a's shape with last dim 1), or a
single 1 ("unit": a number folded into scale, as the adapters pass one).
"""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data

CASES = [
    case("mul", s, d, values=v, scale=1.0)
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
CASES += [case("mul", (6, 37), d, values="large", scale=1.0) for d in DTYPES]
CASES += [
    case("mul", (6, 10), "float32", layout, values="bias", scale=1.0) for layout in LAYOUTS[1:]
]
CASES += [
    case("mul", s, d, values="unit", scale=f)
    for s in [(0,), (4099,), (3, 5), ()]
    for d in DTYPES
    for f in (0.1, -1 / 3, 1e-3)
]
CASES += [
    case("mul", (6, 10), "float32", layout, values="unit", scale=0.3) for layout in LAYOUTS[1:]
]


def b_shape(shape: tuple[int, ...], values: str) -> tuple[int, ...]:
    """b's shape for the case's pattern (shared with add's broadcasting cases)."""
    if values == "bias":
        return shape[-1:]
    if values in ("scalar", "unit"):
        return ()
    if values == "column":
        return (*shape[:-1], 1)
    return shape


def inputs(c, rng: np.random.Generator) -> dict:
    """a of the case's shape, b of the pattern's."""
    spread = 1e2 if c.values == "large" else 1.0
    b = data(b_shape(c.shape, c.values), c.dtype, rng, spread)
    return {
        "a": data(c.shape, c.dtype, rng, spread),
        "b": np.ones_like(b) if c.values == "unit" else b,
    }


def reference(a, b, scale) -> dict:
    """a * b * scale, broadcast (scale read in float32)."""
    return {"out": a * b * float(np.float32(scale))}
