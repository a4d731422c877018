"""batch_norm: training (batch statistics, running-statistic update) and inference."""

from __future__ import annotations

import numpy as np

from tests.conformance.case import DTYPES, LAYOUTS, case, data
from tests.conformance.dtypes import round_to

SHAPES = [(16, 8), (4, 3, 10), (2, 3, 4, 5), (1, 3, 7), (64, 3, 1, 1), (5, 1)]
MOMENTUM, EPS = 0.1, 1e-5


def _cases(op: str, **scalars) -> list:
    cases = [case(op, s, d, **scalars) for s in SHAPES for d in DTYPES]
    cases += [case(op, (8, 4, 6), d, values="offset", **scalars) for d in DTYPES]
    cases.append(case(op, (8, 4, 6), "float32", values="noaffine", **scalars))
    cases += [case(op, (6, 4, 5), "float32", layout, **scalars) for layout in LAYOUTS[1:]]
    return cases


CASES = []
for _training in (True, False):
    CASES += _cases("batch_norm", training=_training, momentum=MOMENTUM, eps=EPS)
    CASES.append(case("batch_norm", (0, 3), training=_training, momentum=MOMENTUM, eps=EPS))
CASES.append(
    case("batch_norm", (8, 4, 6), values="nostats", training=True, momentum=MOMENTUM, eps=EPS)
)


def channel_inputs(c, rng: np.random.Generator, x: np.ndarray) -> dict:
    """weight and bias (absent for the `noaffine` pattern), float32 per channel."""
    channels = x.shape[1]
    if c.values == "noaffine":
        return {"weight": None, "bias": None}
    return {
        "weight": round_to(rng.uniform(0.5, 1.5, channels), "float32"),
        "bias": round_to(rng.standard_normal(channels), "float32"),
    }


def inputs(c, rng: np.random.Generator) -> dict:
    """x (offset by 100 for the `offset` pattern), parameters and running statistics."""
    x = data(c.shape, c.dtype, rng)
    if c.values == "offset":
        x = round_to(x + 100.0, c.dtype)
    channels = c.shape[1]
    stats = {
        "running_mean": round_to(rng.standard_normal(channels) * 0.1, "float32"),
        "running_var": round_to(rng.uniform(0.5, 2.0, channels), "float32"),
    }
    if c.values == "nostats":
        stats = {"running_mean": None, "running_var": None}
    return {"x": x, **channel_inputs(c, rng, x), **stats}


def axes(x: np.ndarray) -> tuple[int, ...]:
    """Every dim but the channel dim 1."""
    return (0, *range(2, x.ndim))


def per_channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A [C] vector shaped to broadcast against x."""
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def reference(x, weight, bias, running_mean, running_var, training, momentum, eps) -> dict:
    """y, the saved statistics and the updated running statistics."""
    channels = x.shape[1]
    count = x.size // channels if channels else 0
    w = per_channel(weight, x) if weight is not None else 1.0
    b = per_channel(bias, x) if bias is not None else 0.0
    out = {}
    if running_mean is not None:
        out["running_mean"], out["running_var"] = running_mean.copy(), running_var.copy()
    if not training:
        invstd = 1.0 / np.sqrt(running_var + eps)
        out["y"] = (x - per_channel(running_mean, x)) * per_channel(invstd, x) * w + b
        out["save_mean"], out["save_invstd"] = running_mean.copy(), invstd
        return out
    if count == 0:
        out.update(y=x.copy(), save_mean=np.zeros(channels), save_invstd=np.zeros(channels))
        return out
    mean = x.mean(axis=axes(x))
    var = ((x - per_channel(mean, x)) ** 2).mean(axis=axes(x))
    invstd = 1.0 / np.sqrt(var + eps)
    out["y"] = (x - per_channel(mean, x)) * per_channel(invstd, x) * w + b
    out["save_mean"], out["save_invstd"] = mean, invstd
    if running_mean is not None:
        out["running_mean"] = (1 - momentum) * running_mean + momentum * mean
        out["running_var"] = (1 - momentum) * running_var + momentum * var * count / (count - 1)
    return out


def scale(name: str, tensors: dict) -> float:
    """Gradients: x's sums terms of either sign, the parameters' are sums over the batch."""
    x = tensors["x"]
    if name in ("weight", "bias"):
        return float(max(1, x.size // x.shape[1])) if x.shape[1] else 1.0
    return 4.0 if name == "x" else 1.0
