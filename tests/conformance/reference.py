"""The float64 numpy reference every layer is compared against."""

from __future__ import annotations

import numpy as np


def add(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """a + alpha * b."""
    return a + alpha * b


def softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """Softmax along ``dim``; NaN rows and all -inf rows give NaN, as in PyTorch."""
    if x.ndim == 0:
        return np.exp(x - x) / np.exp(x - x)
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x - np.max(x, axis=dim, keepdims=True)
        e = np.exp(shifted)
        return e / np.sum(e, axis=dim, keepdims=True)


def softmax_backward(y: np.ndarray, dy: np.ndarray, dim: int) -> np.ndarray:
    """y * (dy - sum(dy * y))."""
    if y.ndim == 0 or y.size == 0:
        return y * (dy - dy * y)
    return y * (dy - np.sum(dy * y, axis=dim, keepdims=True))


def argmax(x: np.ndarray, dim: int, keepdim: bool) -> np.ndarray:
    """First index of the maximum; NaN is the maximum (numpy's rule, as in PyTorch)."""
    if x.ndim == 0:
        return np.zeros((), dtype=np.int64)
    out = (
        np.argmax(x, axis=dim)
        if x.shape[dim]
        else np.zeros(x.shape[: dim % x.ndim] + x.shape[dim % x.ndim + 1 :], dtype=np.int64)
    )
    return np.expand_dims(out, dim) if keepdim else out


def _axes(x: np.ndarray) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def _channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def batch_norm_train(x, weight, bias, running_mean, running_var, momentum, eps) -> dict:
    """Training forward: y, saved mean/invstd and the updated running statistics."""
    channels = x.shape[1]
    count = x.size // channels if channels else 0
    out = {}
    if count == 0:
        out["y"] = x.copy()
        out["save_mean"] = np.zeros(channels)
        out["save_invstd"] = np.zeros(channels)
        if running_mean is not None:
            out["running_mean"], out["running_var"] = running_mean.copy(), running_var.copy()
        return out
    mean = x.mean(axis=_axes(x))
    var = ((x - _channel(mean, x)) ** 2).mean(axis=_axes(x))
    invstd = 1.0 / np.sqrt(var + eps)
    y = (x - _channel(mean, x)) * _channel(invstd, x)
    if weight is not None:
        y = y * _channel(weight, x) + _channel(bias, x)
    out.update(y=y, save_mean=mean, save_invstd=invstd)
    if running_mean is not None:
        out["running_mean"] = (1 - momentum) * running_mean + momentum * mean
        out["running_var"] = (1 - momentum) * running_var + momentum * var * count / (count - 1)
    return out


def batch_norm_infer(x, weight, bias, running_mean, running_var, eps) -> np.ndarray:
    """Inference forward from running statistics."""
    y = (x - _channel(running_mean, x)) / np.sqrt(_channel(running_var, x) + eps)
    if weight is not None:
        y = y * _channel(weight, x) + _channel(bias, x)
    return y


def batch_norm_backward(dy, x, weight, save_mean, save_invstd) -> dict:
    """dx, dweight and dbias from the saved statistics."""
    count = x.size // x.shape[1] if x.shape[1] else 0
    xhat = (x - _channel(save_mean, x)) * _channel(save_invstd, x)
    dbias = dy.sum(axis=_axes(x))
    dweight = (dy * xhat).sum(axis=_axes(x))
    scale = _channel(save_invstd * (weight if weight is not None else 1.0), x)
    dx = scale * (dy - _channel(dbias, x) / count - xhat * _channel(dweight, x) / count)
    return {"dx": dx, "dweight": dweight, "dbias": dbias}
