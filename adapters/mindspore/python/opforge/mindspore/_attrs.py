"""The attribute tensors passed to the AOT kernels (the encoding is in ``_encoding``)."""

from __future__ import annotations

import functools

from mindspore import Tensor, ops
from mindspore import dtype as mstype

from opforge.mindspore._encoding import Scalar, encode


def attribute_tensor(values: tuple[Scalar, ...]) -> Tensor:
    """The zero-element tensor carrying ``values``."""
    # Cached by encoding, not by value: (1,) and (1.0,) are equal keys but different attributes.
    return _tensor_of_dims(encode(values))


@functools.lru_cache(maxsize=256)
def _tensor_of_dims(dims: tuple[int, ...]) -> Tensor:
    # Not numpy: it refuses shapes whose other dims multiply past int64, even with a leading 0.
    return ops.zeros((0, *dims), mstype.int8)
