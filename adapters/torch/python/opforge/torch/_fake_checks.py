"""The kernel library's argument checks (``kernels/src/common/call.cpp``), for the fake kernels.

A fake kernel computes output shapes without running anything: under ``torch.compile`` (fake
tensors), and under ``vmap`` over an empty batch (meta tensors). Without these checks it would
accept what the library refuses (a dim out of range, an unknown ``approximate``, a negative
``eps``), and an empty batch would return outputs where any other batch raises. Each check
raises the library's own message, so the error reads the same whichever path found it. The
generated ``_ops.py`` calls them in the library's order: one tensor at a time, the scalars, then
the relations between arguments.

Each check also raises the exception type torch raises for that problem (``error``): by default
torch's own convention (IndexError for a dim out of range and for a reduction over nothing, as
its ``maybe_wrap_dim`` and reductions; NotImplementedError for a dtype without a kernel, as its
dtype dispatch; RuntimeError for the rest), else what the op table's ``raises`` gives the check.
The helpers' eager calls ask them for it once a call has failed (``_runtime.argument_error``):
the library's errors reach Python as RuntimeError through the stable ABI.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from opforge.torch import _shapes


def _refuse(op: str, message: str, error: type[Exception] = RuntimeError) -> None:
    raise error(f"opforge::{op}: {message}")


def _shape(shape: Sequence) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _number(value: float) -> str:
    # call.cpp's number_string: the shortest %g that reads back as the same double.
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if float(text) == value or math.isnan(value):
            return text
    return repr(value)


def same_device(op: str, tensors: Mapping) -> None:
    """Every tensor on one device (call.cpp's same_device, as it reads the inputs): a meta
    tensor beside CPU ones would otherwise reach this fake kernel, serving as the meta kernel,
    and get outputs on the CPU that nothing fills."""
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first = t.device
        elif t.device != first:
            _refuse(
                op, f"device mismatch: {name} is on {t.device} but the other tensors are on {first}"
            )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtypes(
    op: str,
    t: torch.Tensor | None,
    name: str,
    allowed: Sequence[str],
    error: type[Exception] = NotImplementedError,
) -> None:
    """``t``'s dtype is one of ``allowed`` (names such as ``float32``)."""
    if t is not None and _dtype_name(t.dtype) not in allowed:
        _refuse(
            op,
            f"{name} has dtype {_dtype_name(t.dtype)} (supported: {', '.join(allowed)})",
            error,
        )


def rank(
    op: str,
    t: torch.Tensor | None,
    name: str,
    lo: int,
    hi: int,
    error: type[Exception] = RuntimeError,
) -> None:
    """``t`` has ``lo`` to ``hi`` dims."""
    if t is not None and not lo <= t.dim() <= hi:
        _refuse(op, f"{name} must have {lo} to {hi} dimensions, got shape {_shape(t.shape)}", error)


def dim(
    op: str,
    value: int | None,
    of: torch.Tensor | None,
    of_name: str,
    name: str,
    error: type[Exception] = IndexError,
) -> None:
    """``value`` is a dim of ``of`` (a 0-d tensor counts as having one)."""
    if value is None or of is None:
        return
    n = max(of.dim(), 1)
    if not -n <= value < n:
        _refuse(
            op,
            f"{name} {value} is out of range for {of_name} of shape {_shape(of.shape)} "
            f"(valid: {-n} to {n - 1})",
            error,
        )


def at_least(
    op: str, value: float | None, lo: float, name: str, error: type[Exception] = RuntimeError
) -> None:
    """``value`` is at least ``lo`` (NaN is not)."""
    if value is not None and not value >= lo:
        _refuse(op, f"{name} must be at least {_number(lo)}, got {_number(value)}", error)


def finite(op: str, value: float | None, name: str, error: type[Exception] = RuntimeError) -> None:
    """``value`` is neither infinite nor NaN."""
    if value is not None and not math.isfinite(value):
        _refuse(op, f"{name} must be finite, got {_number(value)}", error)


def _choices(values: Sequence[str]) -> str:
    # torch's wording for two ("approximate argument must be either none or tanh"), quoted.
    quoted = [f"'{v}'" for v in values]
    return (
        f"either {quoted[0]} or {quoted[1]}" if len(quoted) == 2 else "one of " + ", ".join(quoted)
    )


def choice(
    op: str, value: str, values: Sequence[str], name: str, error: type[Exception] = RuntimeError
) -> None:
    """``value`` is one of ``values``."""
    if value not in values:
        _refuse(op, f"{name} argument must be {_choices(values)}, got '{value}'", error)


def suffix(
    op: str,
    value: Sequence,
    of: torch.Tensor | None,
    of_name: str,
    name: str,
    error: type[Exception] = RuntimeError,
    longer: type[Exception] | None = None,
) -> None:
    """``value`` is the trailing shape of ``of`` (at least one dim); ``longer``: the error
    where it has more values than ``of`` has dims (None: ``error``)."""
    if of is None:
        return
    shape = tuple(of.shape)
    values = tuple(value)
    if not values:
        _refuse(op, f"Expected {name} to be at least 1-dimensional, got []", error)
    if len(values) > len(shape) or shape[len(shape) - len(values) :] != values:
        _refuse(
            op,
            f"Given {name}={_shape(values)}, expected {of_name} with shape [*, "
            f"{_shape(values)[1:]}, got {of_name} of shape {_shape(shape)}",
            longer if longer is not None and len(values) > len(shape) else error,
        )


def _same_dtype(
    op: str, ref: torch.Tensor, ref_name: str, t: torch.Tensor, name: str, error: type[Exception]
) -> None:
    if t.dtype != ref.dtype:
        _refuse(
            op,
            f"dtype mismatch: {ref_name} is {_dtype_name(ref.dtype)} but {name} is "
            f"{_dtype_name(t.dtype)}",
            error,
        )


def like(
    op: str,
    ref: torch.Tensor | None,
    ref_name: str,
    t: torch.Tensor | None,
    name: str,
    error: type[Exception] = RuntimeError,
) -> None:
    """``t`` has ``ref``'s shape and dtype."""
    if ref is None or t is None:
        return
    if t.shape != ref.shape:
        _refuse(
            op,
            f"shape mismatch: {ref_name} is {_shape(ref.shape)} but {name} is {_shape(t.shape)}",
            error,
        )
    _same_dtype(op, ref, ref_name, t, name, error)


def broadcastable(
    op: str,
    ref: torch.Tensor | None,
    ref_name: str,
    t: torch.Tensor | None,
    name: str,
    error: type[Exception] = RuntimeError,
) -> None:
    """``t`` has ``ref``'s dtype and a shape that broadcasts with ``ref``'s (NumPy's rule)."""
    if ref is None or t is None:
        return
    _same_dtype(op, ref, ref_name, t, name, error)
    try:
        _shapes.broadcast(ref.shape, t.shape)
    except ValueError:
        _refuse(
            op,
            f"shapes do not broadcast: {ref_name} is {_shape(ref.shape)} but {name} is "
            f"{_shape(t.shape)}",
            error,
        )


def _param_dtype(
    op: str, t: torch.Tensor, name: str, like: torch.Tensor | None, error: type[Exception]
) -> None:
    if t.dtype == torch.float32 or (like is not None and t.dtype == like.dtype):
        return
    other = (
        f" or {_dtype_name(like.dtype)}" if like is not None and like.dtype != torch.float32 else ""
    )
    _refuse(op, f"{name} must be float32{other}, got {_dtype_name(t.dtype)}", error)


def channels(
    op: str,
    ref: torch.Tensor | None,
    ref_name: str,
    t: torch.Tensor | None,
    name: str,
    or_like: bool = False,
    error: type[Exception] = RuntimeError,
) -> None:
    """``t`` has one value per channel (dim 1) of ``ref``, in float32 (or ``ref``'s dtype)."""
    if ref is None or t is None:
        return
    c = ref.shape[1] if ref.dim() > 1 else 0
    if t.dim() != 1 or t.shape[0] != c:
        _refuse(
            op,
            f"{name} must have shape [{c}] (one per channel of {ref_name}), got {_shape(t.shape)}",
            error,
        )
    _param_dtype(op, t, name, ref if or_like else None, error)


def shaped(
    op: str,
    shape: Sequence,
    shape_name: str,
    t: torch.Tensor | None,
    name: str,
    like: torch.Tensor | None = None,
    error: type[Exception] = RuntimeError,
) -> None:
    """``t`` has ``shape``, in float32 (or ``like``'s dtype)."""
    if t is None:
        return
    if tuple(t.shape) != tuple(shape):
        _refuse(
            op,
            f"Expected {name} to be of same shape as {shape_name} {_shape(shape)}, got "
            f"{_shape(t.shape)}",
            error,
        )
    _param_dtype(op, t, name, like, error)


def batch_shape(x: torch.Tensor, normalized: Sequence) -> tuple:
    """The dims of ``x`` before the ``normalized`` trailing ones (none if they do not fit)."""
    if len(normalized) > x.dim():
        return ()
    return tuple(x.shape)[: x.dim() - len(normalized)]


def per_channel_count(
    op: str,
    x: torch.Tensor | None,
    name: str,
    least: int,
    when: bool,
    error: type[Exception] = RuntimeError,
) -> None:
    """``x`` (non-empty, 2-D or more) has at least ``least`` values per channel when ``when``."""
    if x is None or not when or x.numel() == 0 or x.dim() < 2:
        return
    if x.numel() // x.shape[1] < least:
        _refuse(
            op,
            f"needs at least {least} values per channel, got {name} of shape {_shape(x.shape)}",
            error,
        )


def reducible(
    op: str, x: torch.Tensor, name: str, dim: int | None, error: type[Exception] = IndexError
) -> None:
    """A reduction of ``x`` over ``dim`` (None: everything) has values to reduce, even where its
    output would be empty (as the kernels and torch require)."""
    if dim is None:
        reduced = x.numel()
    elif x.dim() == 0:
        reduced = 1
    else:
        dim %= x.dim()
        reduced = x.shape[dim]
    if reduced == 0:
        where = f" over dim {dim}, which has size 0" if dim is not None else ", which is empty"
        _refuse(op, f"cannot reduce {name} of shape {_shape(x.shape)}{where}", error)


def together(
    op: str, tensors: Mapping[str, torch.Tensor | None], error: type[Exception] = RuntimeError
) -> None:
    """The optional ``tensors`` are given all or none."""
    given = [t is not None for t in tensors.values()]
    if any(given) and not all(given):
        _refuse(op, f"give {' and '.join(tensors)} together, or none of them", error)


def required_unless(
    op: str,
    flag: bool,
    flag_name: str,
    tensors: Mapping[str, torch.Tensor | None],
    error: type[Exception] = RuntimeError,
) -> None:
    """``tensors`` are given when ``flag`` is false."""
    if flag:
        return
    for name, t in tensors.items():
        if t is None:
            _refuse(op, f"{name} is required when {flag_name} is false", error)
