"""One conformance case: an op, a dtype, a shape, a layout, an input pattern and scalars."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tests.conformance.dtypes import round_to

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("contiguous", "transposed", "strided", "reversed")


@dataclass(frozen=True)
class Case:
    """A case of ``op``: the op's module (tests/conformance/ops/<op>.py) makes its inputs.

    ``shape`` is the shape of the op's main data tensor; ``values`` names an input pattern
    (edge values); ``scalars`` are the op's non-tensor arguments; ``layout`` is the memory
    layout of the data tensors (parameters and statistics are always contiguous).
    """

    op: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scalars: tuple[tuple[str, object], ...] = field(default_factory=tuple)
    layout: str = "contiguous"
    values: str = "normal"

    @property
    def arguments(self) -> dict[str, object]:
        """The scalar arguments by name."""
        return dict(self.scalars)

    @property
    def id(self) -> str:
        """A readable pytest id."""
        shape = "x".join(map(str, self.shape)) or "scalar"
        parts = [self.op, shape, self.dtype]
        parts += [f"{k}{_short(v)}" for k, v in self.scalars]
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.values != "normal":
            parts.append(self.values)
        return "-".join(parts)


def _short(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(map(str, value)) or "none"
    return str(value)


def case(
    op: str,
    shape: tuple[int, ...],
    dtype: str = "float32",
    layout: str = "contiguous",
    values: str = "normal",
    **scalars: object,
) -> Case:
    """A Case with scalars given as keywords."""
    return Case(op, tuple(shape), dtype, tuple(scalars.items()), layout, values)


def data(
    shape: tuple[int, ...], dtype: str, rng: np.random.Generator, scale: float = 1.0
) -> np.ndarray:
    """Standard normal values of ``shape``, exactly representable in ``dtype``."""
    return round_to(rng.standard_normal(shape) * scale, dtype)
