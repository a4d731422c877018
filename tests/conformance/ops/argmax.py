"""argmax: the first index of the maximum; NaN is the maximum (numpy's rule, as in PyTorch)."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case
from tests.conformance.dtypes import round_to
from tests.conformance.ops.softmax import pattern

SHAPES = [
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

CASES = [case("argmax", s, d, dim=dim, keepdim=False) for s, dim in SHAPES for d in DTYPES]
CASES.append(case("argmax", (4, 6, 10), "float32", dim=1, keepdim=True))
CASES.append(case("argmax", (8, 33), "float16", dim=-1, keepdim=True))
for _values in ("ties", "nan", "neg_inf", "large"):
    CASES += [
        case("argmax", (6, 37), d, values=_values, dim=dim, keepdim=False)
        for d in DTYPES
        for dim in (-1, 0)
    ]
CASES += [
    case("argmax", (5, 12), "float32", layout, dim=dim, keepdim=False)
    for layout in LAYOUTS[1:]
    for dim in (-1, 0)
]


def inputs(c, rng: np.random.Generator) -> dict:
    """x with its edge values along dim (the last dim without one)."""
    dim = c.arguments["dim"]
    x = pattern(c.values, rng.standard_normal(c.shape), -1 if dim is None else dim, rng)
    return {"x": round_to(x, c.dtype)}


def reference(x, dim, keepdim) -> dict:
    """out (int64)."""
    # A reduction over nothing is refused (the cases expect the error), never computed.
    if dim is None:
        flat = np.array(np.argmax(x.reshape(-1)), dtype=np.int64)
        return {"out": flat.reshape((1,) * x.ndim) if keepdim else flat}
    if x.ndim == 0:
        return {"out": np.zeros((), dtype=np.int64)}
    d = dim % x.ndim
    out = np.argmax(x, axis=d)
    return {"out": np.expand_dims(out, d) if keepdim else out}


# Without dim: the index into the flattened tensor (keepdim keeps every dim as 1).
CASES += [
    case("argmax", s, d, values=v, dim=None, keepdim=k)
    for s in [(7,), (5, 12), (3, 4, 5), (), (2, 40000)]
    for d in DTYPES
    for v in ("normal", "ties")
    for k in (False, True)
]
CASES += [
    case("argmax", (5, 12), "float32", layout, dim=None, keepdim=False) for layout in LAYOUTS[1:]
]
CASES += [case("argmax", (6, 37), d, values="nan", dim=None, keepdim=False) for d in DTYPES]
