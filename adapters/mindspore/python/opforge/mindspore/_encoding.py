"""Scalar op arguments as the shape of a zero-element tensor, the last input of every AOT call.

MindSpore gives an AOT kernel each input's shape as a host int64 array, on CPU and GPU alike, so
the shape of an empty int8 tensor ``(0, v1, v2, ...)`` carries scalars with no device copy and no
dependence on MindSpore's C++ attribute classes. Integers and flags are stored as themselves;
a real is split into the four 16-bit quarters of its IEEE double, so every value is
non-negative (MindSpore reads negative dims as "unknown") and below 2**31 (GRAPH mode refuses
larger dims). ``adapters/mindspore/csrc/aot.cpp`` reads them in
the same order.
"""

from __future__ import annotations

import struct

Scalar = bool | int | float


def encode(values: tuple[Scalar, ...]) -> tuple[int, ...]:
    """The dims encoding ``values`` (after the leading 0)."""
    dims: list[int] = []
    for value in values:
        if isinstance(value, bool):
            dims.append(int(value))
        elif isinstance(value, int):
            if not 0 <= value < 2**31:
                raise ValueError(f"attribute {value} is outside 0..2**31-1; normalise it first")
            dims.append(value)
        else:
            dims += struct.unpack(">4H", struct.pack(">d", float(value)))
    return tuple(dims)


def decode_real(quarters: tuple[int, ...]) -> float:
    """The real stored as four 16-bit ``quarters`` (most significant first) by :func:`encode`."""
    return struct.unpack(">d", struct.pack(">4H", *quarters))[0]
