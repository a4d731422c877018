"""rms_norm_backward: dx and dweight from the rstd the forward saved."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import data
from tests.conformance.ops import layer_norm as shared
from tests.conformance.ops import layer_norm_backward as centered

CASES = shared.cases("rms_norm_backward")


def inputs(c, rng: np.random.Generator) -> dict:
    """dy, x, the saved rstd and weight."""
    x = shared.x_values(c, rng)
    stats = centered.saved(x, c.arguments["normalized_shape"], centered=False)
    return {
        "dy": data(c.shape, c.dtype, rng),
        "x": x,
        "rstd": stats["rstd"],
        "weight": shared.parameter(c, rng, 1.0),
    }


def reference(dy, x, normalized_shape, rstd, weight) -> dict:
    """dx and dweight."""
    zeros = np.zeros_like(rstd)
    grads = centered.gradients(dy, x, normalized_shape, zeros, rstd, weight, centered=False)
    return {"dx": grads["dx"], "dweight": grads["dweight"]}


def scale(name: str, tensors: dict) -> float:
    """As layer_norm_backward's."""
    return centered.scale(name, tensors)
