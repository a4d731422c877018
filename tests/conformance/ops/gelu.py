"""gelu: x * Phi(x) (approximate none) or its tanh approximation, as PyTorch."""

from __future__ import annotations

import math

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.dtypes import round_to

SHAPES = [(0,), (1,), (7,), (4099,), (3, 5), (2, 3, 4, 5), ()]
APPROXIMATIONS = ("none", "tanh")
# inf, -inf (NaN: -inf * 0, as PyTorch), NaN, signed zeros, the saturated tails, near zero.
SPECIAL = np.array([-np.inf, np.inf, np.nan, -30.0, 30.0, 0.0, -0.0, 5.5, -5.5, 1e-3, -1e-3])
SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
BETA = math.sqrt(2 / math.pi)
KAPPA = 0.044715

CASES = [case("gelu", s, d, approximate=a) for s in SHAPES for d in DTYPES for a in APPROXIMATIONS]
CASES += [
    case("gelu", SPECIAL.shape, d, values="special", approximate=a)
    for d in DTYPES
    for a in APPROXIMATIONS
]
CASES += [case("gelu", (6, 10), "float32", layout, approximate="tanh") for layout in LAYOUTS[1:]]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def x_values(c, rng: np.random.Generator) -> np.ndarray:
    """Normal values scaled by 3 (both tails), or the special values."""
    if c.values == "special":
        return round_to(SPECIAL, c.dtype)
    return data(c.shape, c.dtype, rng, 3.0)


def inputs(c, rng: np.random.Generator) -> dict:
    """x."""
    return {"x": x_values(c, rng)}


def value(x: np.ndarray, approximate: str) -> np.ndarray:
    """gelu(x) in float64, PyTorch's formulas."""
    with np.errstate(invalid="ignore", over="ignore"):
        if approximate == "tanh":
            return 0.5 * x * (1.0 + np.tanh(BETA * (x + KAPPA * x * x * x)))
        return x * 0.5 * (1.0 + _erf(x * SQRT_HALF))


def derivative(x: np.ndarray, approximate: str) -> np.ndarray:
    """gelu'(x) in float64, PyTorch's formulas."""
    with np.errstate(invalid="ignore", over="ignore"):
        if approximate == "tanh":
            t = np.tanh(BETA * (x + KAPPA * x * x * x))
            inner = BETA * (1.0 + 3.0 * KAPPA * x * x)
            return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner
        return 0.5 * (1.0 + _erf(x * SQRT_HALF)) + x * np.exp(-0.5 * x * x) * INV_SQRT_2PI


def reference(x, approximate) -> dict:
    """y = gelu(x)."""
    return {"y": value(x, approximate)}
