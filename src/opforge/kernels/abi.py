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
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

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

# The range of the C int64 that int scalars, int[] items, shapes and strides are passed as: ctypes
# wraps anything outside it modulo 2**64 without a word, so 2**64 would arrive as 0.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

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
    """A DLTensor descriptor plus the arrays it points into (kept alive with it).

    ``writable`` is False for a read-only numpy array, which :meth:`KernelLibrary.call` then
    refuses as an output or an argument updated in place.
    """

    desc: DLTensor
    keepalive: tuple
    writable: bool = True

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
        """Describe memory at ``pointer``: ``strides`` in elements (None: row-major).

        Raises ValueError for a dtype the library does not know or strides of another length than
        the shape, TypeError or OverflowError for a size or stride that is not an int or is
        outside int64 (ctypes would wrap it).
        """
        if dtype not in DTYPES:
            raise ValueError(
                f"Tensor: dtype {dtype!r} is not one the kernel library takes "
                f"({', '.join(DTYPES)}): convert the data to one of them"
            )
        code, bits = DTYPES[dtype]
        ndim = len(shape)
        _check_int64s("Tensor", "shape", shape)
        if strides is not None:
            _check_int64s("Tensor", "strides", strides)
            if len(strides) != ndim:
                # ctypes would fill missing strides with 0 (a broadcast) and reject extra ones.
                raise ValueError(
                    f"Tensor: strides {list(strides)} have {len(strides)} entries but shape "
                    f"{list(shape)} has {ndim}: give one stride per dimension"
                )
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
    def from_numpy(cls, array: np.ndarray, dtype: str | None = None) -> Tensor:
        """Describe a numpy array in place; ``dtype`` overrides (``bfloat16`` over uint16 bits).

        An override relabels the bits, so it must have the array's itemsize. Raises TypeError for
        anything but a numpy array of plain numbers, ValueError for a dtype the library does not
        know, a foreign byte order, misaligned data, or byte strides that are not a whole number
        of elements: those the C side would read wrongly or beyond the buffer.
        """
        if not hasattr(array, "__array_interface__") or not hasattr(array, "ctypes"):
            raise TypeError(
                f"Tensor.from_numpy: expected a numpy array, got {type(array).__name__}: "
                "wrap it with numpy.asarray(...)"
            )
        own = array.dtype
        if own.hasobject or own.fields is not None:
            raise TypeError(
                f"Tensor.from_numpy: the array has dtype {own} (Python objects or fields), not "
                "plain numbers: convert it with array.astype(...) to a dtype the library takes "
                f"({', '.join(DTYPES)})"
            )
        name = dtype or own.name
        if name not in DTYPES:
            raise ValueError(
                f"Tensor.from_numpy: dtype {name!r} is not one the kernel library takes "
                f"({', '.join(DTYPES)}): convert with array.astype(...)"
            )
        itemsize, size = own.itemsize, DTYPES[name][1] // 8
        if size != itemsize:
            # Shape and strides count elements of the array's itemsize; another size would make
            # the library read (or write) past the end of the buffer.
            raise ValueError(
                f"Tensor.from_numpy: dtype {name!r} has {size}-byte elements but "
                f"the array's {own} has {itemsize}-byte ones: an override only relabels bits of "
                f"the same size (bfloat16 over uint16): give an array of {size}-byte "
                "elements"
            )
        if not own.isnative:
            raise ValueError(
                f"Tensor.from_numpy: the array's {own.str} is not in this machine's byte order: "
                "convert with array.astype(array.dtype.newbyteorder('='))"
            )
        if any(stride % itemsize for stride in array.strides):
            # The DLTensor counts strides in elements; dividing would silently pick others.
            raise ValueError(
                f"Tensor.from_numpy: byte strides {list(array.strides)} are not whole multiples "
                f"of the {itemsize}-byte itemsize (a field of a structured array?): make it "
                "contiguous with numpy.ascontiguousarray(array)"
            )
        if not array.flags.aligned:
            raise ValueError(
                "Tensor.from_numpy: the array's data is not aligned to its itemsize: "
                "copy it with array.copy()"
            )
        tensor = cls.from_pointer(
            array.ctypes.data, array.shape, [s // itemsize for s in array.strides], name
        )
        tensor.keepalive = (*tensor.keepalive, array)
        tensor.writable = bool(array.flags.writeable)
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
    """``libopforge_kernels`` loaded with ctypes.

    A call the library refuses raises ``KernelError``. Arguments are checked before the call:
    an unknown op or value raises ValueError, a value of the wrong kind (or a required one
    missing) TypeError, an int outside int64 OverflowError, each one line naming the op and the
    argument, since ctypes would otherwise fail opaquely or wrap the value silently.
    """

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

    def last_error(self) -> str:
        """The message of the library's last refused call on this thread."""
        return self._lib.opforge_last_error().decode("utf-8", "replace")

    def call(self, op: str, *, stream: int | None = None, **arguments) -> None:
        """Run ``op``: its inputs, scalars and outputs by name (outputs as Tensors to fill)."""
        self.bind(op, stream=stream, **arguments)()

    def bind(self, op: str, *, stream: int | None = None, **arguments) -> BoundCall:
        """``op`` with these arguments, checked and converted once: a callable that runs it.

        For a call repeated on the same buffers (a benchmark's): each run is one C call, with none
        of ``call``'s Python argument work, which takes longer than a small kernel on the GPU.
        """
        return BoundCall(
            self, *self._prepared(op, arguments, infer=False, stream=stream), arguments
        )

    def infer(self, op: str, **arguments) -> dict[str, OutputInfo]:
        """Check ``op``'s arguments (no outputs given) and describe its outputs."""
        outputs = {}
        for name in self._signature(op)["outputs"]:
            shape = (ctypes.c_int64 * MAX_NDIM)()
            outputs[name] = Tensor(
                DLTensor(None, DLDevice(0, 0), 0, DLDataType(0, 0, 0), shape, None, 0), (shape,)
            )
        all_arguments = {**arguments, **outputs}
        BoundCall(self, *self._prepared(op, all_arguments, infer=True), all_arguments)()
        return {
            name: OutputInfo(
                tuple(t.desc.shape[i] for i in range(t.desc.ndim)),
                _DTYPE_NAMES.get((t.desc.dtype.code, t.desc.dtype.bits), "unknown"),
            )
            for name, t in outputs.items()
        }

    def _signature(self, op: str) -> Signature:
        if not isinstance(op, str) or op not in self.signatures:
            raise ValueError(
                f"unknown op {op!r}: the kernel library has {', '.join(self.signatures)}"
            )
        return self.signatures[op]

    def _prepared(
        self, op: str, arguments: dict, infer: bool, stream: int | None = None
    ) -> tuple[Callable[..., int], list]:
        """The C function for ``op`` and its argument values, checked."""
        signature = self._signature(op)
        fn_name = f"opforge_{op}"
        expected = {name for name, _ in signature["params"]} | set(signature["outputs"])
        unknown = sorted(set(arguments) - expected)
        if unknown:
            raise TypeError(
                f"{fn_name}: unexpected argument {unknown[0]!r} "
                f"(its arguments: {', '.join(sorted(expected))})"
            )
        values: list = []
        for name, kind in signature["params"]:
            values += _c_values(fn_name, name, kind, arguments.get(name))
        for name in signature["outputs"]:
            values += _c_values(fn_name, name, "tensor!", arguments.get(name))
        if not infer:
            values.append(_stream(fn_name, stream))
        return getattr(self._lib, f"{fn_name}{'_infer' if infer else ''}"), values


class BoundCall:
    """One op of a KernelLibrary with its arguments converted (``KernelLibrary.bind``); calling it
    runs the op. It holds the arguments' Tensors, so their buffers live as long as it does."""

    __slots__ = ("_arguments", "_fn", "_library", "_values")

    def __init__(
        self, library: KernelLibrary, fn: Callable[..., int], values: list, arguments: dict
    ) -> None:
        self._library, self._fn, self._values, self._arguments = library, fn, values, arguments

    def __call__(self) -> None:
        """Run the op; a status other than OK raises KernelError."""
        status = self._fn(*self._values)
        if status != 0:
            raise KernelError(status, self._library.last_error())


def _describe(value: object) -> str:
    """``value`` for a one-line message: its repr when short, and its type."""
    text = repr(value)
    if "\n" in text or len(text) > 40:
        return type(value).__name__
    return f"{text} ({type(value).__name__})"


def _int64(where: str, name: str, value: object) -> int:
    """``value`` as an int that fits the C int64 (bools refused: the op table has bool args)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} must be an int, got {_describe(value)}: pass an int")
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise OverflowError(
            f"{where}: {name} is {number}, outside the int64 range the library takes "
            f"({INT64_MIN} to {INT64_MAX}): pass a value in range"
        )
    return number


def _check_int64s(where: str, name: str, values: Sequence[int]) -> None:
    """Refuse a shape or strides entry that is not an int or does not fit int64."""
    for i, value in enumerate(values):
        _int64(where, f"{name}[{i}]", value)


def _is_bool(value: object) -> bool:
    # numpy is not a dependency of this file, so numpy.bool_ is recognised by its type's name.
    kind = type(value)
    return isinstance(value, bool) or (
        kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    )


def _c_values(fn: str, name: str, kind: str, value: object) -> list:
    """The C arguments for ``name`` of ``kind`` (two for an ``int[]``: pointer and length).

    Raises a one-line TypeError (wrong kind of value, a required one missing), ValueError (a value
    the kind does not allow) or OverflowError (an int outside int64, a float outside a double),
    naming ``fn`` and ``name``: ctypes would raise an opaque error or wrap the value silently.
    """
    optional = kind.endswith("?")
    base = kind.removesuffix("?")
    if value is None and optional:
        return [None]
    if base.startswith("tensor"):
        if not isinstance(value, Tensor):
            missing = (
                "is required" if value is None else f"must be a Tensor, got {_describe(value)}"
            )
            raise TypeError(f"{fn}: {name} {missing}: describe an array with Tensor.from_numpy")
        if base == "tensor!" and not value.writable:
            raise ValueError(
                f"{fn}: {name} is written to but its array is read-only: give a writable array "
                "(array.copy())"
            )
        return [value.ref]
    if base == "int[]":
        try:
            items = None if isinstance(value, (str, bytes)) else list(value)
        except TypeError:
            items = None
        if items is None:
            raise TypeError(
                f"{fn}: {name} must be a sequence of ints, got {_describe(value)}: pass a list"
            )
        ints = [_int64(fn, f"{name}[{i}]", item) for i, item in enumerate(items)]
        return [(ctypes.c_int64 * max(len(ints), 1))(*ints), len(ints)]
    if base.startswith("str:"):
        choices = base[4:].split("|")
        if not isinstance(value, str) or value not in choices:
            error = ValueError if isinstance(value, str) else TypeError
            raise error(
                f"{fn}: {name} must be one of {', '.join(map(repr, choices))}, "
                f"got {_describe(value)}"
            )
        return [choices.index(value)]
    if base == "bool":
        if not _is_bool(value):
            raise TypeError(
                f"{fn}: {name} must be a bool, got {_describe(value)}: pass True or False"
            )
        return [int(bool(value))]
    if base == "int":
        scalar = ctypes.c_int64(_int64(fn, name, value))
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"{fn}: {name} must be a real number, got {_describe(value)}: pass a float"
            )
        try:
            scalar = ctypes.c_double(float(value))
        except OverflowError:
            raise OverflowError(
                f"{fn}: {name} is too large for a C double (an int of "
                f"{len(str(abs(int(value))))} digits): pass a float"
            ) from None
    return [ctypes.byref(scalar) if optional else scalar]


def _stream(fn: str, stream: object) -> int | None:
    """``stream`` as the ``void *`` the library takes (None: the default stream)."""
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, numbers.Integral):
        raise TypeError(
            f"{fn}: stream must be a CUDA stream handle (an int) or None, got {_describe(stream)}"
        )
    if not 0 <= int(stream) < 2**64:
        raise OverflowError(
            f"{fn}: stream {int(stream)} is not a pointer value (0 to 2**64-1): pass the stream's "
            "handle (torch: stream.cuda_stream)"
        )
    return int(stream)


def library_path(project_root: Path, profile: str) -> Path:
    """Where ``opforge build --profile PROFILE`` installs the library."""
    return project_root / "dist" / profile / "lib" / "libopforge_kernels.so"
