"""layer_norm_backward: dx, dweight and dbias from the statistics the forward saved."""

from __future__ import annotations

import math

import numpy as np

from tests.conformance.case import data
from tests.conformance.dtypes import round_to
from tests.conformance.ops import layer_norm as forward

CASES = forward.cases("layer_norm_backward")


def saved(x: np.ndarray, normalized_shape, centered: bool) -> dict:
    """The forward's statistics of x, as float32 with x's leading shape."""
    mean, rstd = forward.statistics(x, normalized_shape, forward.EPS, centered)
    lead = x.shape[: x.ndim - len(normalized_shape)]
    return {
        "mean": round_to(mean.reshape(lead), "float32"),
        "rstd": round_to(rstd.reshape(lead), "float32"),
    }


def inputs(c, rng: np.random.Generator) -> dict:
    """dy, x, the saved statistics and weight."""
    x = forward.x_values(c, rng)
    stats = saved(x, c.arguments["normalized_shape"], centered=True)
    return {
        "dy": data(c.shape, c.dtype, rng),
        "x": x,
        **stats,
        "weight": forward.parameter(c, rng, 1.0),
    }


def gradients(dy, x, normalized_shape, mean, rstd, weight, centered: bool) -> dict:
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight (without the
    mean(g) term when not centered), dweight = sum of dy * xhat, dbias = sum of dy over rows."""
    k = len(normalized_shape)
    keep = mean.shape + (1,) * k
    ax = forward.axes(x, normalized_shape)
    lead = tuple(range(x.ndim - k))
    r = rstd.reshape(keep)
    xhat = (x - mean.reshape(keep)) * r
    g = dy if weight is None else dy * weight
    n = math.prod(normalized_shape)
    mean_g = g.sum(axis=ax, keepdims=True) / n if centered and n else 0.0
    mean_gx = (g * xhat).sum(axis=ax, keepdims=True) / n if n else 0.0
    return {
        "dx": r * (g - mean_g - xhat * mean_gx),
        "dweight": (dy * xhat).sum(axis=lead),
        "dbias": dy.sum(axis=lead),
    }


def reference(dy, x, normalized_shape, mean, rstd, weight) -> dict:
    """dx, dweight, dbias."""
    return gradients(dy, x, normalized_shape, mean, rstd, weight, centered=True)


def scale(name: str, tensors: dict) -> float:
    """The parameter gradients sum over the rows; dx against the scale of dy * rstd."""
    dy, rstd = tensors["dy"], tensors["rstd"]
    if name in ("dweight", "dbias"):
        return float(max(1, rstd.size))
    if not dy.size:
        return 1.0
    return max(1.0, float(np.max(np.abs(dy))) * float(np.nanmax(rstd)) if rstd.size else 1.0)
