"""batch_norm_backward: dx, dweight, dbias from the saved statistics (training or inference)."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.dtypes import round_to
from tests.conformance.ops import batch_norm as forward

CASES = []
for _training in (True, False):
    CASES += [
        case("batch_norm_backward", s, d, training=_training)
        for s in forward.SHAPES
        for d in DTYPES
    ]
    CASES += [
        case("batch_norm_backward", (8, 4, 6), d, values="offset", training=_training)
        for d in DTYPES
    ]
    CASES.append(case("batch_norm_backward", (8, 4, 6), values="noaffine", training=_training))
    CASES += [
        case("batch_norm_backward", (6, 4, 5), "float32", layout, training=_training)
        for layout in LAYOUTS[1:]
    ]


def inputs(c, rng: np.random.Generator) -> dict:
    """x, the statistics a forward of it saved, weight, and a gradient dy."""
    x = data(c.shape, c.dtype, rng)
    if c.values == "offset":
        x = round_to(x + 100.0, c.dtype)
    params = forward.channel_inputs(c, rng, x)
    channels = c.shape[1]
    if c.arguments["training"]:
        saved = forward.reference(x, None, None, None, None, True, forward.MOMENTUM, forward.EPS)
        mean, invstd = saved["save_mean"], saved["save_invstd"]
    else:
        mean = rng.standard_normal(channels) * 0.1
        invstd = 1.0 / np.sqrt(rng.uniform(0.5, 2.0, channels) + forward.EPS)
    return {
        "dy": data(c.shape, c.dtype, rng),
        "x": x,
        "weight": params["weight"],
        "save_mean": round_to(mean, "float32"),
        "save_invstd": round_to(invstd, "float32"),
    }


def reference(dy, x, weight, save_mean, save_invstd, training) -> dict:
    """dx, dweight, dbias."""
    count = x.size // x.shape[1] if x.shape[1] else 0
    xhat = (x - forward.per_channel(save_mean, x)) * forward.per_channel(save_invstd, x)
    dbias = dy.sum(axis=forward.axes(x))
    dweight = (dy * xhat).sum(axis=forward.axes(x))
    scale = forward.per_channel(save_invstd * (weight if weight is not None else 1.0), x)
    if not training:
        return {"dx": scale * dy, "dweight": dweight, "dbias": dbias}
    count = max(count, 1)
    dx = scale * (
        dy - forward.per_channel(dbias, x) / count - xhat * forward.per_channel(dweight, x) / count
    )
    return {"dx": dx, "dweight": dweight, "dbias": dbias}


def scale(name: str, tensors: dict) -> float:
    """dx sums terms of either sign: against the scale of dy; the parameter gradients are sums."""
    x, dy = tensors["x"], tensors["dy"]
    if name in ("dweight", "dbias"):
        return float(max(1, x.size // x.shape[1])) if x.shape[1] else 1.0
    return max(1.0, float(np.max(np.abs(dy)))) if dy.size else 1.0
