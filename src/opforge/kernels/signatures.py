"""The C calling convention of each op, as the ctypes binding (``abi``) reads it."""

from __future__ import annotations

from opforge.kernels.optable import Arg, Op, OpTable


def param_kind(arg: Arg) -> str:
    """The ``abi`` kind of one argument (tensor, tensor!, tensor?, int, int?, int[], str:a|b ...)."""
    if arg.is_tensor:
        return "tensor" + ("!" if arg.mutable else "") + ("?" if arg.optional else "")
    if arg.type == "str":
        return "str:" + "|".join(arg.checks["values"])
    return arg.type + ("?" if arg.optional else "")


def c_signature(op: Op) -> dict[str, object]:
    """``{"params": [(name, kind), ...], "outputs": [name, ...]}`` of ``opforge_<op>``."""
    return {
        "params": [(arg.name, param_kind(arg)) for arg in op.args],
        "outputs": [out.name for out in op.outputs],
    }


def c_signatures(table: OpTable) -> dict[str, dict[str, object]]:
    """Every op's signature spec, in table order."""
    return {name: c_signature(op) for name, op in table.ops.items()}
