"""Derivatives of backward ops in the arguments the op table gives no rule for.

MindSpore has no forward mode of its own: ``ops.jvp`` differentiates a gradient once more (the
gradient is linear in the output gradient, and its derivative there is the jacobian-vector
product), so a backward op needs a bprop of its own. The op table gives its derivative in the
output gradient (the forward op's ``jvp`` rule, which the generated bprop calls), but MindSpore
asks for the others as well (the forward's input or output), which are second derivatives. Each
function here is named after a backward op and returns those, in the order of the op's tensor
arguments, computed in float32 (the caller casts each to its argument's dtype); the generator
lists the ops in ``gen_mindspore.SECOND_ORDER``, and refuses to differentiate the others.
"""

from __future__ import annotations

import math

from mindspore import dtype as mstype
from mindspore import ops

# gelu's tanh approximation: 0.5 * x * (1 + tanh(_C * (x + _A * x**3))).
_C = math.sqrt(2.0 / math.pi)
_A = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# Past this magnitude both approximations' second derivative is 0 in float32 (a factor
# exp(-x**2 / 2) or 1 - tanh(u)**2 underflows), while its other factors would overflow to inf
# (and inf * 0 is NaN).
_FLAT = 20.0


def softmax_backward(y, dy, dim, dout):
    """dx = y * (dy - sum(dy * y)): its gradient in ``y`` given ``dout``."""
    y, dy, dout = y.astype(mstype.float32), dy.astype(mstype.float32), dout.astype(mstype.float32)
    dot = ops.sum(dy * y, dim, keepdim=True)
    weighted = ops.sum(dout * y, dim, keepdim=True)
    return (dout * (dy - dot) - dy * weighted,)


def gelu_backward(dy, x, approximate, dout):
    """dx = dy * gelu'(x): its gradient in ``x`` given ``dout``, dout * dy * gelu''(x)."""
    x = x.astype(mstype.float32)
    x = ops.where(ops.abs(x) > _FLAT, ops.sign(x) * _FLAT, x)
    square = x * x
    if approximate == "tanh":
        t = ops.tanh(_C * (x + _A * square * x))
        slope = _C * (1.0 + 3.0 * _A * square)
        second = (1.0 - t * t) * (slope - x * t * slope * slope + 3.0 * _A * _C * square)
    else:
        second = ops.exp(-0.5 * square) * _INV_SQRT_2PI * (2.0 - square)
    return (dout.astype(mstype.float32) * dy.astype(mstype.float32) * second,)
