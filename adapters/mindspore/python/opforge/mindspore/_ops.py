"""The ops as MindSpore functions: ``ops.Custom(func_type="aot")`` primitives with bprop.

Each wrapper checks its arguments (at graph compile time in GRAPH mode), encodes its scalars into
an attribute tensor (see ``_attrs``) and calls a cached Custom primitive whose shape and dtype
inference read the same attributes. The primitives and attribute tensors are made in
``constexpr`` functions, so the same code runs in GRAPH and PYNATIVE mode.
"""

from __future__ import annotations

import functools

import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype
from mindspore.ops import constexpr

from opforge.mindspore import _checks
from opforge.mindspore._attrs import attribute_tensor
from opforge.mindspore._encoding import decode_real
from opforge.mindspore._library import device_kind, entry

_REDUCE_SUM = ops.ReduceSum(keep_dims=False)


def _real(attrs_shape: tuple, index: int) -> float:
    """The real encoded from value position ``index`` (counting its quarters) of an attribute shape."""
    return decode_real(tuple(attrs_shape[1 + index : 5 + index]))


# --- shape/dtype inference (called by MindSpore with input shapes and dtypes) ---


def _same_shape(*shapes):
    return shapes[0]


def _same_dtype(*dtypes):
    return dtypes[0]


def _argmax_shape(x, attrs):
    dim, keepdim = attrs[1], attrs[2]
    if not x:
        return []
    if keepdim:
        return [*x[:dim], 1, *x[dim + 1 :]]
    return [*x[:dim], *x[dim + 1 :]]


# Tensor types, not the bare number types: GRAPH mode turns a 0-d output typed `int64` into a
# Python int.
_INT64 = mstype.TensorType(mstype.int64)
_FLOAT32 = mstype.TensorType(mstype.float32)


def _argmax_dtype(x, attrs):
    return _INT64


def _batch_norm_shape(x, weight, bias, running_mean, running_var, attrs):
    training = attrs[1]
    stats = [x[1]] if training else [0]
    updated = list(running_mean) if training else [0]
    return list(x), stats, stats, updated, updated


def _batch_norm_dtype(x, weight, bias, running_mean, running_var, attrs):
    return x, _FLOAT32, _FLOAT32, _FLOAT32, _FLOAT32


def _batch_norm_backward_shape(dy, x, weight, save_mean, save_invstd, attrs):
    return list(x), [x[1]], [x[1]]


def _batch_norm_backward_dtype(dy, x, weight, save_mean, save_invstd, attrs):
    return x, _FLOAT32, _FLOAT32


# --- bprops: gradients through the library's backward kernels ---


def _add_bprop(a, b, attrs, out, dout):
    alpha = _alpha_of(attrs.shape)
    db = dout if alpha == 1.0 else dout * alpha
    return dout, db, ops.zeros_like(attrs)


def _softmax_bprop(x, attrs, out, dout):
    # softmax_backward takes the same attribute (dim) as softmax.
    return _primitive("softmax_backward")(out, dout, attrs), ops.zeros_like(attrs)


def _argmax_bprop(x, attrs, out, dout):
    return ops.zeros_like(x), ops.zeros_like(attrs)


def _batch_norm_grads(
    attrs, has_weight, dx, dweight, dbias, weight, bias, running_mean, running_var
):
    # Absent weight/bias are placeholders and the statistics are not differentiated: zeros.
    return (
        dx,
        dweight if has_weight else ops.zeros_like(weight),
        dbias if _has_bias(attrs.shape) else ops.zeros_like(bias),
        ops.zeros_like(running_mean),
        ops.zeros_like(running_var),
        ops.zeros_like(attrs),
    )


def _batch_norm_train_bprop(x, weight, bias, running_mean, running_var, attrs, out, dout):
    has_weight, _ = _bn_backward_values(attrs.shape)
    dx, dweight, dbias = _primitive("batch_norm_backward")(
        dout[0], x, weight, out[1], out[2], _bn_backward_attrs_of(attrs.shape)
    )
    return _batch_norm_grads(
        attrs, has_weight, dx, dweight, dbias, weight, bias, running_mean, running_var
    )


def _batch_norm_infer_bprop(x, weight, bias, running_mean, running_var, attrs, out, dout):
    # Inference is affine in x: y = x * scale + shift per channel, computed here with MindSpore ops.
    has_weight, eps = _bn_backward_values(attrs.shape)
    view, axes = _channel_view(x.shape)
    invstd = ops.rsqrt(running_var + eps)
    scale = invstd * weight if has_weight else invstd
    dy = dout[0].astype(mstype.float32)
    dx = (dy * scale.reshape(view)).astype(x.dtype)
    dbias = _REDUCE_SUM(dy, axes)
    dweight = _REDUCE_SUM(
        dy * (x.astype(mstype.float32) - running_mean.reshape(view)) * invstd.reshape(view), axes
    )
    return _batch_norm_grads(
        attrs, has_weight, dx, dweight, dbias, weight, bias, running_mean, running_var
    )


@constexpr
def _alpha_of(attrs_shape):
    return _real(attrs_shape, 0)


@constexpr
def _has_bias(attrs_shape):
    return bool(attrs_shape[3])


@constexpr
def _bn_backward_values(attrs_shape):
    # batch_norm attributes: training, has_weight, has_bias, has_running, momentum (4), eps (4)
    return bool(attrs_shape[2]), _real(attrs_shape, 8)


@constexpr
def _bn_backward_attrs_of(attrs_shape):
    return attribute_tensor(_bn_backward_values(attrs_shape))


@constexpr
def _channel_view(x_shape):
    view = (1, x_shape[1]) + (1,) * (len(x_shape) - 2)
    axes = (0, *range(2, len(x_shape)))
    return view, axes


# op -> (entry point, shape inference, dtype inference, bprop)
_SPECS = {
    "add": ("add", _same_shape, _same_dtype, _add_bprop),
    "softmax": ("softmax", _same_shape, _same_dtype, _softmax_bprop),
    "softmax_backward": ("softmax_backward", _same_shape, _same_dtype, None),
    "argmax": ("argmax", _argmax_shape, _argmax_dtype, _argmax_bprop),
    "batch_norm_train": (
        "batch_norm",
        _batch_norm_shape,
        _batch_norm_dtype,
        _batch_norm_train_bprop,
    ),
    "batch_norm_infer": (
        "batch_norm",
        _batch_norm_shape,
        _batch_norm_dtype,
        _batch_norm_infer_bprop,
    ),
    "batch_norm_backward": (
        "batch_norm_backward",
        _batch_norm_backward_shape,
        _batch_norm_backward_dtype,
        None,
    ),
}


@functools.cache
def _make_primitive(name: str, kind: str) -> ops.Custom:
    op, shape, dtype, bprop = _SPECS[name]
    return ops.Custom(
        entry(op, kind), out_shape=shape, out_dtype=dtype, func_type="aot", bprop=bprop
    )


@constexpr
def _primitive(name):
    return _make_primitive(name, device_kind())


@constexpr
def _absent():
    return Tensor(np.zeros((0,), np.float32))


# --- checks and attributes, evaluated at compile time in GRAPH mode ---
# Memoised: in PYNATIVE they run on every call, and a training loop repeats the same arguments
# (typed, so that True and 1 stay different keys; a failing check is never cached).
_memo = functools.lru_cache(maxsize=1024, typed=True)


@constexpr
@_memo
def _add_attrs(a_shape, a_dtype, b_shape, b_dtype, alpha):
    _checks.floating("add", "a", a_dtype)
    _checks.same("add", {"a": a_shape, "b": b_shape}, {"a": a_dtype, "b": b_dtype})
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"opforge.mindspore.add: alpha must be a number, got {alpha!r}")
    return attribute_tensor((float(alpha),))


@constexpr
@_memo
def _softmax_attrs(op, x_shape, x_dtype, dim):
    _checks.floating(op, "x", x_dtype)
    return attribute_tensor((_checks.dim(op, dim, len(x_shape)),))


@constexpr
@_memo
def _softmax_backward_attrs(y_shape, y_dtype, dy_shape, dy_dtype, dim):
    _checks.floating("softmax_backward", "y", y_dtype)
    _checks.same("softmax_backward", {"y": y_shape, "dy": dy_shape}, {"y": y_dtype, "dy": dy_dtype})
    return attribute_tensor((_checks.dim("softmax_backward", dim, len(y_shape)),))


@constexpr
@_memo
def _argmax_attrs(x_shape, x_dtype, dim, keepdim):
    _checks.floating("argmax", "x", x_dtype)
    if not isinstance(keepdim, bool):
        raise TypeError(f"opforge.mindspore.argmax: keepdim must be a bool, got {keepdim!r}")
    if any(s == 0 for s in x_shape) and len(x_shape) and x_shape[dim] == 0:
        raise ValueError(f"opforge.mindspore.argmax: x has no elements along dim {dim}")
    return attribute_tensor((_checks.dim("argmax", dim, len(x_shape)), keepdim))


_PARAM_NAMES = ("weight", "bias", "running_mean", "running_var")


@constexpr
@_memo
def _batch_norm_attrs(x_shape, x_dtype, shapes, dtypes, training, momentum, eps):
    op = "batch_norm"
    params = dict(zip(_PARAM_NAMES, shapes, strict=True))
    _checks.floating(op, "x", x_dtype)
    _checks.channel_params(op, x_shape, params)
    for name, dtype in zip(_PARAM_NAMES, dtypes, strict=True):
        _checks.param_dtype(op, name, dtype)
    has_running = params["running_mean"] is not None
    if has_running != (params["running_var"] is not None):
        raise ValueError(f"opforge.mindspore.{op}: give running_mean and running_var together")
    if not training and not has_running:
        raise ValueError(
            f"opforge.mindspore.{op}: inference (training=False) needs running_mean and running_var"
        )
    count = int(np.prod(x_shape))
    if training and count and count // x_shape[1] < 2:
        raise ValueError(
            f"opforge.mindspore.{op}: training needs more than one value per channel, "
            f"got shape {list(x_shape)}"
        )
    has = (params["weight"] is not None, params["bias"] is not None, has_running)
    return attribute_tensor((bool(training), *has, float(momentum), float(eps)))


@constexpr
@_memo
def _batch_norm_backward_attrs(dy_shape, dy_dtype, x_shape, x_dtype, shapes, dtypes, eps):
    op = "batch_norm_backward"
    names = ("weight", "save_mean", "save_invstd")
    _checks.floating(op, "x", x_dtype)
    _checks.same(op, {"dy": dy_shape, "x": x_shape}, {"dy": dy_dtype, "x": x_dtype})
    _checks.channel_params(op, x_shape, dict(zip(names, shapes, strict=True)))
    for name, dtype in zip(names, dtypes, strict=True):
        _checks.param_dtype(op, name, dtype)
    return attribute_tensor((shapes[0] is not None, float(eps)))


def _shape(t):
    if t is None:
        return None
    return t.shape


def _dtype(t):
    if t is None:
        return None
    return t.dtype


def _or_absent(t):
    if t is None:
        return _absent()
    return t


# --- the public functions ---


def add(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """``a + alpha * b`` for tensors of one shape and dtype (float32, float16, bfloat16)."""
    return _primitive("add")(a, b, _add_attrs(a.shape, a.dtype, b.shape, b.dtype, alpha))


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along ``dim``, numerically stable; an all ``-inf`` row gives NaN (as PyTorch)."""
    return _primitive("softmax")(x, _softmax_attrs("softmax", x.shape, x.dtype, dim))


def softmax_backward(y: Tensor, dy: Tensor, dim: int = -1) -> Tensor:
    """The gradient of softmax along ``dim`` given its output ``y`` and the output gradient ``dy``."""
    attrs = _softmax_backward_attrs(y.shape, y.dtype, dy.shape, dy.dtype, dim)
    return _primitive("softmax_backward")(y, dy, attrs)


def argmax(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """int64 index of the first maximum along ``dim`` (NaN counts as the maximum)."""
    return _primitive("argmax")(x, _argmax_attrs(x.shape, x.dtype, dim, keepdim))


def batch_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple:
    """Batch norm over dim 1 of an NxC, NxCxL or NxCxHxW tensor.

    Returns ``(y, save_mean, save_invstd, running_mean, running_var)``. MindSpore kernels do not
    write their inputs, so the running statistics are **returned, not updated in place**: in
    training they are the updated copies ``(1 - momentum) * running + momentum * batch`` (unbiased
    variance), which you assign back, e.g. ``ops.assign(self.running_mean, new_mean)`` for
    Parameters; they are ``None`` when none were given. In inference (``training=False``) the
    statistics used are returned unchanged and ``save_mean``/``save_invstd`` are empty.
    ``weight``/``bias`` (optional) and the statistics are float32 with C elements; ``x`` is
    float32, float16 or bfloat16. Gradients flow to ``x``, ``weight`` and ``bias``.
    """
    params = (weight, bias, running_mean, running_var)
    attrs = _batch_norm_attrs(
        x.shape,
        x.dtype,
        (_shape(weight), _shape(bias), _shape(running_mean), _shape(running_var)),
        (_dtype(weight), _dtype(bias), _dtype(running_mean), _dtype(running_var)),
        training,
        momentum,
        eps,
    )
    name = "batch_norm_train" if training else "batch_norm_infer"
    y, save_mean, save_invstd, new_mean, new_var = _primitive(name)(
        x,
        _or_absent(params[0]),
        _or_absent(params[1]),
        _or_absent(params[2]),
        _or_absent(params[3]),
        attrs,
    )
    if not training:
        return y, save_mean, save_invstd, running_mean, running_var
    if running_mean is None:
        return y, save_mean, save_invstd, None, None
    return y, save_mean, save_invstd, new_mean, new_var


def batch_norm_backward(
    dy: Tensor,
    x: Tensor,
    weight: Tensor | None,
    save_mean: Tensor,
    save_invstd: Tensor,
    eps: float = 1e-5,
) -> tuple:
    """``(dx, dweight, dbias)`` of the training forward, from its saved statistics."""
    attrs = _batch_norm_backward_attrs(
        dy.shape,
        dy.dtype,
        x.shape,
        x.dtype,
        (_shape(weight), save_mean.shape, save_invstd.shape),
        (_dtype(weight), save_mean.dtype, save_invstd.dtype),
        eps,
    )
    return _primitive("batch_norm_backward")(
        dy, x, _or_absent(weight), save_mean, save_invstd, attrs
    )
