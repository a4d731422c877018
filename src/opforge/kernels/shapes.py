"""The op table's output shape rules in Python, for shape inference inside the frameworks.

torch's fake kernels (symbolic shapes included) and MindSpore's ``out_shape`` functions use these;
the kernel library's C++ rules (``kernels/src/common/call.cpp``) are the same rules, and
``tests/test_op_table.py`` checks that the two agree on every conformance case. Shapes are
sequences of ints (or torch SymInts); nothing here imports a framework or opforge, because each
adapter ships a copy of this file.
"""

from __future__ import annotations

from collections.abc import Sequence


def like(shape: Sequence) -> tuple:
    """The shape of the referenced tensor."""
    return tuple(shape)


def broadcast(a: Sequence, b: Sequence) -> tuple:
    """The broadcast of two shapes (NumPy's rule); ValueError if they do not broadcast."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for da, db in zip(a, b, strict=True):
        if da != db and da != 1 and db != 1:
            raise ValueError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(db if da == 1 else da)
    return tuple(out)


def reduce(shape: Sequence, dim: int | None, keepdim: bool) -> tuple:
    """A reduction's output: ``dim`` removed (or kept as 1); ``dim=None`` reduces everything."""
    shape = tuple(shape)
    if dim is None:
        return (1,) * len(shape) if keepdim else ()
    if not shape:
        return ()
    dim = dim % len(shape)
    if keepdim:
        return (*shape[:dim], 1, *shape[dim + 1 :])
    return (*shape[:dim], *shape[dim + 1 :])


def channels(shape: Sequence) -> tuple:
    """One value per channel: ``[C]`` with C the size of dim 1."""
    return (shape[1],)


def batch(shape: Sequence, normalized: Sequence) -> tuple:
    """The leading dims of ``shape`` before the ``normalized`` trailing ones."""
    return tuple(shape)[: len(shape) - len(normalized)]


def given(values: Sequence) -> tuple:
    """A shape given by an int-list argument."""
    return tuple(values)
