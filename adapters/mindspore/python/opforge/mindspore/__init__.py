"""opforge's kernel library as MindSpore ops (GRAPH and PYNATIVE mode, with gradients).

Each op wraps ``mindspore.ops.Custom(func_type="aot")`` over the AOT entry points in
``_aot_cpu.so`` (MindSpore's CPU device) or ``_aot_cuda.so`` (GPU), which call the shared kernel
library bundled beside them; the wrappers, their shape inference and bprops are generated from the
op table (``_ops``). Wrong arguments raise TypeError/ValueError naming the function before any
kernel runs (in GRAPH mode while the graph compiles); shapes the kernels refuse raise
:class:`InvalidArgumentError`, a ValueError that is also the RuntimeError MindSpore's own ops
raise for such mismatches; a kernel failure prints
``opforge.mindspore: <op>: <why>`` and :func:`last_error` returns that message.

    import opforge.mindspore as ofm
    y = ofm.softmax(x, dim=-1)
    grad = mindspore.grad(lambda x: ofm.softmax(x, -1).sum())(x)
"""

from __future__ import annotations

from opforge.mindspore._library import last_error
from opforge.mindspore._ops import *  # noqa: F403
from opforge.mindspore._ops import __all__ as _ops_all
from opforge.mindspore._runtime import InvalidArgumentError

__all__ = [*_ops_all, "InvalidArgumentError", "last_error"]
