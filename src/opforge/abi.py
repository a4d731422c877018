"""The kernel library's C ABI from Python (ctypes), with no framework involved.

Used by the conformance suite and the benchmarks to call ``libopforge_kernels`` directly, on host
memory (numpy) or on device memory (any allocator that gives a pointer).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import OpforgeError

ABI_VERSION = 2
KDL_CPU = 1
KDL_CUDA = 2

STATUS_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "UNSUPPORTED",
    3: "CUDA",
    4: "INTERNAL",
}

# DLPack (code, bits) of the dtypes the library knows.
DTYPES = {
    "float32": (2, 32),
    "float16": (2, 16),
    "bfloat16": (4, 16),
    "int64": (0, 64),
    "float64": (2, 64),
    "int32": (0, 32),
}


class KernelError(OpforgeError):
    """A library call returned a non-OK status; ``message`` is ``opforge_last_error()``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = STATUS_NAMES.get(status, str(status))


class DLDevice(ctypes.Structure):
    """DLPack ``DLDevice``."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """DLPack ``DLDataType``."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack ``DLTensor`` (layout of dlpack.h 1.x)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


@dataclass
class Tensor:
    """A DLTensor descriptor plus the arrays it points into (kept alive with it)."""

    desc: DLTensor
    keepalive: tuple

    @classmethod
    def from_pointer(
        cls,
        pointer: int,
        shape: Sequence[int],
        strides: Sequence[int],
        dtype: str,
        device_type: int = KDL_CPU,
        device_id: int = 0,
    ) -> Tensor:
        """Describe memory at ``pointer``: ``strides`` in elements, ``dtype`` a key of DTYPES."""
        code, bits = DTYPES[dtype]
        ndim = len(shape)
        shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
        strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
        desc = DLTensor(
            ctypes.c_void_p(pointer),
            DLDevice(device_type, device_id),
            ndim,
            DLDataType(code, bits, 1),
            shape_arr,
            strides_arr,
            0,
        )
        return cls(desc, (shape_arr, strides_arr))

    @classmethod
    def from_numpy(cls, array, dtype: str | None = None) -> Tensor:
        """Describe a numpy array in place; ``dtype`` overrides (``bfloat16`` over uint16 bits)."""
        itemsize = array.dtype.itemsize
        tensor = cls.from_pointer(
            array.ctypes.data,
            array.shape,
            [s // itemsize for s in array.strides],
            dtype or array.dtype.name,
        )
        tensor.keepalive = (*tensor.keepalive, array)
        return tensor

    @property
    def ref(self) -> ctypes._Pointer:
        """A pointer to the descriptor, as the library takes it."""
        return ctypes.pointer(self.desc)


def _ptr(tensor: Tensor | None):
    return None if tensor is None else tensor.ref


class KernelLibrary:
    """``libopforge_kernels`` loaded with ctypes; each op raises ``KernelError`` on failure."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lib = ctypes.CDLL(str(path))
        lib.opforge_last_error.restype = ctypes.c_char_p
        for name in ("opforge_abi_version", "opforge_has_cuda", "opforge_has_cudnn"):
            getattr(lib, name).restype = ctypes.c_int
        t = ctypes.POINTER(DLTensor)
        i64, f64, vp, cint = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_int
        signatures = {
            "opforge_add": [t, t, f64, t, vp],
            "opforge_softmax_forward": [t, i64, t, vp],
            "opforge_softmax_backward": [t, t, i64, t, vp],
            "opforge_argmax": [t, i64, cint, t, vp],
            "opforge_batch_norm_forward_training": [t, t, t, t, t, f64, f64, t, t, t, vp],
            "opforge_batch_norm_forward_inference": [t, t, t, t, t, f64, t, vp],
            "opforge_batch_norm_backward": [t, t, t, t, t, f64, t, t, t, vp],
        }
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self._lib = lib
        version = lib.opforge_abi_version()
        if version != ABI_VERSION:
            raise OpforgeError(
                f"{path} has ABI version {version}, this opforge expects {ABI_VERSION}",
                hint="rebuild the kernel library with `opforge build`",
            )

    @property
    def has_cuda(self) -> bool:
        """Whether the library was built with CUDA."""
        return bool(self._lib.opforge_has_cuda())

    @property
    def has_cudnn(self) -> bool:
        """Whether the library's CUDA batch_norm (cuDNN) is available."""
        return bool(self._lib.opforge_has_cudnn())

    def _call(self, name: str, *args) -> None:
        status = getattr(self._lib, name)(*args)
        if status != 0:
            raise KernelError(status, self._lib.opforge_last_error().decode())

    def add(
        self, a: Tensor, b: Tensor, alpha: float, out: Tensor, stream: int | None = None
    ) -> None:
        """out = a + alpha * b."""
        self._call("opforge_add", a.ref, b.ref, alpha, out.ref, stream)

    def softmax_forward(self, x: Tensor, dim: int, y: Tensor, stream: int | None = None) -> None:
        """y = softmax(x, dim)."""
        self._call("opforge_softmax_forward", x.ref, dim, y.ref, stream)

    def softmax_backward(
        self, y: Tensor, dy: Tensor, dim: int, dx: Tensor, stream: int | None = None
    ) -> None:
        """dx = y * (dy - sum(dy * y, dim))."""
        self._call("opforge_softmax_backward", y.ref, dy.ref, dim, dx.ref, stream)

    def argmax(
        self, x: Tensor, dim: int, keepdim: bool, out: Tensor, stream: int | None = None
    ) -> None:
        """out = argmax(x, dim) as int64."""
        self._call("opforge_argmax", x.ref, dim, int(keepdim), out.ref, stream)

    def batch_norm_forward_training(
        self,
        x: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        running_mean: Tensor | None,
        running_var: Tensor | None,
        momentum: float,
        eps: float,
        y: Tensor,
        save_mean: Tensor | None,
        save_invstd: Tensor | None,
        stream: int | None = None,
    ) -> None:
        """Training-mode batch_norm forward (see opforge.h)."""
        self._call(
            "opforge_batch_norm_forward_training",
            x.ref,
            _ptr(weight),
            _ptr(bias),
            _ptr(running_mean),
            _ptr(running_var),
            momentum,
            eps,
            y.ref,
            _ptr(save_mean),
            _ptr(save_invstd),
            stream,
        )

    def batch_norm_forward_inference(
        self,
        x: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        running_mean: Tensor,
        running_var: Tensor,
        eps: float,
        y: Tensor,
        stream: int | None = None,
    ) -> None:
        """Inference-mode batch_norm forward (see opforge.h)."""
        self._call(
            "opforge_batch_norm_forward_inference",
            x.ref,
            _ptr(weight),
            _ptr(bias),
            running_mean.ref,
            running_var.ref,
            eps,
            y.ref,
            stream,
        )

    def batch_norm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        weight: Tensor | None,
        save_mean: Tensor,
        save_invstd: Tensor,
        eps: float,
        dx: Tensor,
        dweight: Tensor | None,
        dbias: Tensor | None,
        stream: int | None = None,
    ) -> None:
        """batch_norm backward from the training forward's saved statistics."""
        self._call(
            "opforge_batch_norm_backward",
            dy.ref,
            x.ref,
            _ptr(weight),
            save_mean.ref,
            save_invstd.ref,
            eps,
            dx.ref,
            _ptr(dweight),
            _ptr(dbias),
            stream,
        )


def library_path(project_root: Path, profile: str) -> Path:
    """Where ``opforge build --profile PROFILE`` installs the library (``OPFORGE_KERNELS_LIB`` wins)."""
    override = os.environ.get("OPFORGE_KERNELS_LIB")
    if override:
        return Path(override)
    return project_root / "dist" / profile / "lib" / "libopforge_kernels.so"
