"""ctypes mirrors of the DLPack structs, and DLTensor views of numpy arrays."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

KDL_CPU = 1
KDL_CUDA = 2
_CODES = {"f": 2, "i": 0, "u": 1}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class TensorView:
    """A DLTensor describing a numpy array (strides included); keeps its buffers alive."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        itemsize = array.dtype.itemsize
        self._shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self._strides = (ctypes.c_int64 * array.ndim)(*(s // itemsize for s in array.strides))
        self.tensor = DLTensor(
            ctypes.c_void_p(array.ctypes.data),
            DLDevice(KDL_CPU, 0),
            array.ndim,
            DLDataType(_CODES[array.dtype.kind], itemsize * 8, 1),
            self._shape,
            self._strides,
            0,
        )

    @property
    def ref(self) -> ctypes._Pointer:
        """A pointer to the descriptor, for passing to the library."""
        return ctypes.pointer(self.tensor)


def load_library(path: Path) -> ctypes.CDLL:
    """Load libopforge_kernels and declare the signatures the tests call."""
    lib = ctypes.CDLL(str(path))
    lib.opforge_last_error.restype = ctypes.c_char_p
    lib.opforge_abi_version.restype = ctypes.c_int
    lib.opforge_has_cuda.restype = ctypes.c_int
    tensor = ctypes.POINTER(DLTensor)
    lib.opforge_add.argtypes = [tensor, tensor, ctypes.c_double, tensor, ctypes.c_void_p]
    lib.opforge_add.restype = ctypes.c_int
    return lib
