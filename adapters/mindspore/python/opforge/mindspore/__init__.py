"""opforge's kernel library as MindSpore ops (GRAPH and PYNATIVE mode, with gradients).

Each op wraps ``mindspore.ops.Custom(func_type="aot")`` over the AOT entry points in
``_aot_cpu.so`` (MindSpore's CPU device) or ``_aot_cuda.so`` (GPU), which call the shared kernel
library bundled beside them. Wrong arguments raise TypeError/ValueError naming the op before any
kernel runs; a kernel failure prints ``opforge.mindspore: <op>: <why>`` and :func:`last_error`
returns that message.

    import opforge.mindspore as ofm
    y = ofm.softmax(x, dim=-1)
    grad = mindspore.grad(lambda x: ofm.softmax(x, -1).sum())(x)
"""

from __future__ import annotations

from opforge.mindspore._library import last_error
from opforge.mindspore._ops import (
    add,
    argmax,
    batch_norm,
    batch_norm_backward,
    softmax,
    softmax_backward,
)

__all__ = [
    "add",
    "argmax",
    "batch_norm",
    "batch_norm_backward",
    "last_error",
    "softmax",
    "softmax_backward",
]
