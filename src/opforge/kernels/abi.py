"""The kernel library's C ABI from Python (ctypes), with no framework involved.

Calls ``libopforge_kernels`` directly, on host memory (numpy) or device memory (any allocator that
gives a pointer): ``lib.call("softmax", x=..., dim=-1, y=..., stream=s)`` runs an op,
``lib.infer("softmax", x=..., dim=-1)`` checks the arguments and returns the outputs' shapes and
dtypes. The calling convention of every op comes from a *signature spec*: for each op, its
parameters in C order as ``(name, kind)`` pairs (kinds below) and its outputs;
:func:`opforge.kernels.signatures.c_signatures` derives it from the op table.

This file imports nothing from opforge: the MindSpore adapter ships a copy of it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ABI_VERSION = 3
MAX_NDIM = 16
KDL_CPU = 1
KDL_CUDA = 2

STATUS_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "UNSUPPORTED",
    3: "CUDA",
    4: "INTERNAL",
    5: "INVALID_DTYPE",
}

# DLPack (code, bits) of the dtypes the library knows.
DTYPES = {
    "float32": (2, 32),
    "float16": (2, 16),
    "bfloat16": (4, 16),
    "int64": (0, 64),
    "float64": (2, 64),
    "int32": (0, 32),
    "int8": (0, 8),
    "bool": (6, 8),
}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# Parameter kinds of a signature spec: tensor (const), tensor! (updated in place), tensor? and
# tensor!? (optional, None when absent), int, int?, float, float?, bool, int[] (a sequence; in C
# a pointer and a length) and str:<v1>|<v2>... (one of the values; in C its index).


class KernelError(Exception):
    """A library call returned a non-OK status; ``message`` is ``opforge_last_error()``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
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
        pointer: int | None,
        shape: Sequence[int],
        strides: Sequence[int] | None,
        dtype: str,
        device_type: int = KDL_CPU,
        device_id: int = 0,
    ) -> Tensor:
        """Describe memory at ``pointer``: ``strides`` in elements (None: row-major)."""
        code, bits = DTYPES[dtype]
        ndim = len(shape)
        shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
        strides_arr = None if strides is None else (ctypes.c_int64 * max(ndim, 1))(*strides)
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

    @classmethod
    def meta(
        cls, shape: Sequence[int], dtype: str, device_type: int = KDL_CPU, device_id: int = 0
    ) -> Tensor:
        """A descriptor with a shape and no data, for :meth:`KernelLibrary.infer`."""
        return cls.from_pointer(None, shape, None, dtype, device_type, device_id)

    @property
    def ref(self) -> ctypes._Pointer:
        """A pointer to the descriptor, as the library takes it."""
        return ctypes.pointer(self.desc)


@dataclass(frozen=True)
class OutputInfo:
    """An output described by ``infer``: shape and dtype name."""

    shape: tuple[int, ...]
    dtype: str


Signature = Mapping[str, object]  # {"params": [(name, kind), ...], "outputs": [name, ...]}


def _argtypes(signature: Signature, infer: bool) -> list:
    t = ctypes.POINTER(DLTensor)
    types: list = []
    for _, kind in signature["params"]:
        if kind.startswith("tensor"):
            types.append(t)
        elif kind == "int[]":
            types += [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
        else:
            types.append(_SCALAR_TYPES[kind.split(":")[0]])
    types += [t] * len(signature["outputs"])
    if not infer:
        types.append(ctypes.c_void_p)
    return types


_SCALAR_TYPES = {
    "int": ctypes.c_int64,
    "int?": ctypes.POINTER(ctypes.c_int64),
    "float": ctypes.c_double,
    "float?": ctypes.POINTER(ctypes.c_double),
    "bool": ctypes.c_int,
    "str": ctypes.c_int,
}


class KernelLibrary:
    """``libopforge_kernels`` loaded with ctypes; each call raises ``KernelError`` on failure."""

    def __init__(self, path: Path | str, signatures: Mapping[str, Signature]) -> None:
        self.path = Path(path)
        lib = ctypes.CDLL(str(path))
        lib.opforge_last_error.restype = ctypes.c_char_p
        for name in ("opforge_abi_version", "opforge_has_cuda", "opforge_has_cudnn"):
            getattr(lib, name).restype = ctypes.c_int
        version = lib.opforge_abi_version()
        if version != ABI_VERSION:
            raise KernelError(
                -1,
                f"{path} has ABI version {version}, this opforge expects {ABI_VERSION}: rebuild "
                "the kernel library (`opforge build`)",
            )
        self.signatures = dict(signatures)
        self._lib = lib
        for op, signature in self.signatures.items():
            for suffix, infer in (("", False), ("_infer", True)):
                fn = getattr(lib, f"opforge_{op}{suffix}")
                fn.argtypes = _argtypes(signature, infer)
                fn.restype = ctypes.c_int

    @property
    def has_cuda(self) -> bool:
        """Whether the library was built with CUDA."""
        return bool(self._lib.opforge_has_cuda())

    @property
    def has_cudnn(self) -> bool:
        """Whether the library's CUDA batch_norm can use cuDNN."""
        return bool(self._lib.opforge_has_cudnn())

    def call(self, op: str, *, stream: int | None = None, **arguments) -> None:
        """Run ``op``: its inputs, scalars and outputs by name (outputs as Tensors to fill)."""
        self._run(op, arguments, infer=False, stream=stream)

    def infer(self, op: str, **arguments) -> dict[str, OutputInfo]:
        """Check ``op``'s arguments (no outputs given) and describe its outputs."""
        outputs = {}
        for name in self.signatures[op]["outputs"]:
            shape = (ctypes.c_int64 * MAX_NDIM)()
            outputs[name] = Tensor(
                DLTensor(None, DLDevice(0, 0), 0, DLDataType(0, 0, 0), shape, None, 0), (shape,)
            )
        self._run(op, {**arguments, **outputs}, infer=True)
        return {
            name: OutputInfo(
                tuple(t.desc.shape[i] for i in range(t.desc.ndim)),
                _DTYPE_NAMES.get((t.desc.dtype.code, t.desc.dtype.bits), "unknown"),
            )
            for name, t in outputs.items()
        }

    def _run(self, op: str, arguments: dict, infer: bool, stream: int | None = None) -> None:
        signature = self.signatures[op]
        expected = {name for name, _ in signature["params"]} | set(signature["outputs"])
        unknown = sorted(set(arguments) - expected)
        if unknown:
            raise TypeError(f"opforge_{op}: unexpected argument {unknown[0]!r}")
        values: list = []
        for name, kind in signature["params"]:
            value = arguments.get(name)
            if kind.startswith("tensor"):
                values.append(None if value is None else value.ref)
            elif kind == "int[]":
                items = list(value or ())
                values += [(ctypes.c_int64 * max(len(items), 1))(*items), len(items)]
            elif kind.startswith("str:"):
                values.append(kind[4:].split("|").index(value))
            elif kind.endswith("?"):
                scalar = _SCALAR_TYPES[kind[:-1]]
                values.append(None if value is None else ctypes.byref(scalar(value)))
            else:
                values.append(value)
        values += [arguments[name].ref for name in signature["outputs"]]
        if not infer:
            values.append(stream)
        fn = getattr(self._lib, f"opforge_{op}{'_infer' if infer else ''}")
        status = fn(*values)
        if status != 0:
            raise KernelError(status, self._lib.opforge_last_error().decode("utf-8", "replace"))


def library_path(project_root: Path, profile: str) -> Path:
    """Where ``opforge build --profile PROFILE`` installs the library."""
    return project_root / "dist" / profile / "lib" / "libopforge_kernels.so"
