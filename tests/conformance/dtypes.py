"""The library's dtypes in numpy: storage arrays, and rounding float64 values to a dtype.

numpy has no bfloat16, so bfloat16 tensors are stored as uint16 arrays of their bit patterns.
"""

from __future__ import annotations

import numpy as np

STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int64": np.int64}


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round to nearest-even bfloat16; returns the uint16 bit patterns."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    # Unsigned operands throughout: NumPy 1.x (MindSpore's) refuses uint64 >> a Python int.
    one, sixteen = np.uint64(1), np.uint64(16)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> sixteen) & one)) >> sixteen
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns to float32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values as a storage array of ``dtype``."""
    if dtype == "bfloat16":
        return to_bfloat16_bits(values)
    with np.errstate(over="ignore"):  # beyond float16's range is inf, as the cast defines
        return np.asarray(values).astype(STORAGE[dtype])


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """A storage array of ``dtype`` as float64 values."""
    if dtype == "bfloat16":
        return from_bfloat16_bits(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to the nearest ``dtype`` value (still float64)."""
    return from_storage(to_storage(np.asarray(values, dtype=np.float64), dtype), dtype)
