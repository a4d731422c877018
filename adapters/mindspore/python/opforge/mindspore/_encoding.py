"""Scalar op arguments as the shape of a zero-element tensor, the last input of every AOT call.

MindSpore gives an AOT kernel each input's shape as a host int64 array, on CPU and GPU alike, so
the shape of an empty int8 tensor ``(0, v1, v2, ...)`` carries scalars with no device copy and no
dependence on MindSpore's C++ attribute classes. MindSpore reads negative dims as "unknown" and
GRAPH mode refuses dims of 2**31 and more, so every value stored lies in 0..2**31-1:

- flag, bool: 0 or 1; str: the index of the value
- int: sign (0 or 1) and magnitude; int?: presence flag, then sign and magnitude
- float: the four 16-bit quarters of its IEEE double, most significant first; float?: presence
  flag, then the quarters
- int[]: the length, then sign and magnitude of each value

Each op's layout (``_signatures.LAYOUTS``) lists a presence flag per optional tensor, then its
scalars in order; ``adapters/mindspore/csrc/aot_runtime.hpp`` reads them in the same order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_LIMIT = 2**31


def _integer(value: int) -> list[int]:
    magnitude = abs(value)
    if magnitude >= _LIMIT:
        raise ValueError(f"attribute {value} is outside -2**31+1..2**31-1")
    return [int(value < 0), magnitude]


def _real(value: float) -> list[int]:
    return list(struct.unpack(">4H", struct.pack(">d", float(value))))


def encode(items: Sequence[tuple[str, object]]) -> tuple[int, ...]:
    """The dims encoding ``(kind, value)`` items (after the leading 0)."""
    dims: list[int] = []
    for kind, value in items:
        if kind in ("flag", "bool"):
            dims.append(int(bool(value)))
        elif kind == "int":
            dims += _integer(value)
        elif kind == "int?":
            dims += [0, 0, 0] if value is None else [1, *_integer(value)]
        elif kind == "float":
            dims += _real(value)
        elif kind == "float?":
            dims += [0, 0, 0, 0, 0] if value is None else [1, *_real(value)]
        elif kind.startswith("str:"):
            dims.append(kind[4:].split("|").index(value))
        elif kind == "int[]":
            dims.append(len(value))
            for v in value:
                dims += _integer(v)
        else:
            raise ValueError(f"unknown attribute kind {kind!r}")
    return tuple(dims)


def decode(kinds: Sequence[str], dims: Sequence[int]) -> list:
    """The values of ``kinds`` stored in ``dims`` (the attribute shape without its leading 0)."""
    values: list = []
    at = 0

    def take(n: int) -> list[int]:
        nonlocal at
        part = [int(d) for d in dims[at : at + n]]
        at += n
        return part

    def integer() -> int:
        sign, magnitude = take(2)
        return -magnitude if sign else magnitude

    def real() -> float:
        return struct.unpack(">d", struct.pack(">4H", *take(4)))[0]

    for kind in kinds:
        if kind in ("flag", "bool"):
            values.append(bool(take(1)[0]))
        elif kind == "int":
            values.append(integer())
        elif kind == "int?":
            values.append(integer() if take(1)[0] else take(2) and None)
        elif kind == "float":
            values.append(real())
        elif kind == "float?":
            values.append(real() if take(1)[0] else take(4) and None)
        elif kind.startswith("str:"):
            values.append(kind[4:].split("|")[take(1)[0]])
        elif kind == "int[]":
            values.append(tuple(integer() for _ in range(take(1)[0])))
    return values
