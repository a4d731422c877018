"""The float64 gradients of an op's inputs, from its backward rule in the op table.

The rule is applied to the references: a linear rule sums the upstream gradient (times its
factor) to each input's shape; a call rule evaluates the reference of the backward op with the
arguments the rule names. Used by the framework adapters' runners to check their autograd.
"""

from __future__ import annotations

import numpy as np

from opforge.kernels import optable
from tests.conformance import ops


def sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``grad`` summed over the dims broadcasting added to an input of ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def differentiable_outputs(op: optable.Op) -> list[str]:
    """The outputs a gradient flows back from."""
    rule = op.backward
    if rule is None:
        return []
    if rule.linear is not None:
        return [o.name for o in op.outputs]
    return [o.name for o in op.outputs if f"grad_{o.name}" in rule.sources]


def reference(op: optable.Op, tensors: dict, scalars: dict, outputs: dict, grads: dict) -> dict:
    """The gradient of each differentiable input present, given upstream ``grads`` by output."""
    rule = op.backward
    assert rule is not None
    if rule.linear is not None:
        seed = grads[op.outputs[0].name]
        return {
            name: sum_to(seed * (1.0 if factor == 1 else scalars[factor]), np.shape(tensors[name]))
            for name, factor in rule.linear.items()
            if tensors[name] is not None
        }
    values = {**tensors, **scalars, **outputs, **{f"grad_{k}": v for k, v in grads.items()}}

    def call(name: str, args: dict) -> dict:
        return ops.module(name).reference(**{k: values[src] for k, src in args.items()})

    if rule.each is not None:
        return {
            target: sum_to(
                sum(call(c.op, c.args)[c.output] for c in calls), np.shape(tensors[target])
            )
            for target, calls in rule.each.items()
            if tensors[target] is not None
        }
    result = call(rule.op, rule.args)
    return {
        target: result[source]
        for target, source in rule.outputs.items()
        if tensors[target] is not None
    }
