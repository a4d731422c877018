"""rms_norm over the trailing dims named by normalized_shape (float32 weight here)."""

from __future__ import annotations

import numpy as np

from tests.conformance.ops import layer_norm as shared

CASES = shared.cases("rms_norm", eps=shared.EPS)


def inputs(c, rng: np.random.Generator) -> dict:
    """x and weight."""
    return {"x": shared.x_values(c, rng), "weight": shared.parameter(c, rng, 1.0)}


def reference(x, normalized_shape, weight, eps) -> dict:
    """y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) with x's leading shape."""
    _, rstd = shared.statistics(x, normalized_shape, eps, centered=False)
    y = x * rstd
    if weight is not None:
        y = y * weight
    return {"y": y, "rstd": rstd.reshape(x.shape[: x.ndim - len(normalized_shape)])}
