"""Argument checks run before any kernel: each error names the op and what is wrong.

Called through ``constexpr`` from the op wrappers, so in GRAPH mode they run while the graph is
compiled (shapes and dtypes are constants there) and in PYNATIVE mode on every call.
"""

from __future__ import annotations

from mindspore import dtype as mstype

FLOATING = {mstype.float32: "float32", mstype.float16: "float16", mstype.bfloat16: "bfloat16"}


def floating(op: str, name: str, dtype: object) -> None:
    """A data input must be float32, float16 or bfloat16."""
    if dtype not in FLOATING:
        raise TypeError(
            f"opforge.mindspore.{op}: {name} has dtype {dtype}; supported: float32, float16, bfloat16"
        )


def same(op: str, shapes: dict[str, tuple], dtypes: dict[str, object]) -> None:
    """Inputs that must agree in shape and dtype."""
    (first, shape), *rest = shapes.items()
    for name, other in rest:
        if tuple(other) != tuple(shape):
            raise ValueError(
                f"opforge.mindspore.{op}: shape mismatch: {first} is {list(shape)} but {name} is "
                f"{list(other)}"
            )
    (first, dtype), *rest_dtypes = dtypes.items()
    for name, other in rest_dtypes:
        if other != dtype:
            raise TypeError(
                f"opforge.mindspore.{op}: dtype mismatch: {first} is {dtype} but {name} is {other}"
            )


def dim(op: str, dim: int, ndim: int) -> int:
    """``dim`` normalised to [0, ndim); a 0-d tensor takes dim 0 or -1."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"opforge.mindspore.{op}: dim must be an int, got {dim!r}")
    span = max(ndim, 1)
    if not -span <= dim < span:
        raise ValueError(
            f"opforge.mindspore.{op}: dim {dim} is out of range for a {ndim}-d input "
            f"(expected {-span}..{span - 1})"
        )
    return dim % span


def channel_params(op: str, x_shape: tuple, params: dict[str, tuple | None]) -> None:
    """batch_norm: x is NxC[x...] and every given per-channel tensor has C elements."""
    if not 2 <= len(x_shape) <= 4:
        raise ValueError(
            f"opforge.mindspore.{op}: x must be NxC, NxCxL, or NxCxHxW, got shape {list(x_shape)}"
        )
    channels = x_shape[1]
    for name, shape in params.items():
        if shape is not None and tuple(shape) != (channels,):
            raise ValueError(
                f"opforge.mindspore.{op}: {name} has shape {list(shape)}, expected [{channels}] "
                f"(the channels of x, dim 1)"
            )


def param_dtype(op: str, name: str, dtype: object | None) -> None:
    """Per-channel tensors (weight, bias, statistics) are float32, as in PyTorch's mixed precision."""
    if dtype is not None and dtype != mstype.float32:
        raise TypeError(f"opforge.mindspore.{op}: {name} has dtype {dtype}; expected float32")
