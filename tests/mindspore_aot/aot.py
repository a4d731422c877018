"""Calling the MindSpore AOT entry points exactly as MindSpore does, without MindSpore.

``int fn(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
void* stream, void* extra)``: inputs then outputs, dense buffers (host pointers for the CPU build,
device pointers and a real CUDA stream for the CUDA build), dtype names as strings, and the
scalar attributes in the shape of a last zero-element input. This is how the CUDA build is tested
on a GPU machine that cannot install MindSpore's GPU package.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
AOT_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_int,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_int),
    ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)),
    ctypes.POINTER(ctypes.c_char_p),
    ctypes.c_void_p,
    ctypes.c_void_p,
)


def built_package(kind: str) -> Path | None:
    """The built ``opforge/mindspore`` directory holding ``_aot_<kind>.so``, if any."""
    found = sorted(REPO.glob(f"dist/*/python/opforge/mindspore/_aot_{kind}.so"))
    return found[-1].parent if found else None


def load_module(package: Path, name: str):
    """One of the adapter's own modules that import no MindSpore (``_encoding``, ``_signatures``)."""
    spec = importlib.util.spec_from_file_location(f"opforge_ms{name}", package / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class AotLibrary:
    """One ``_aot_<kind>.so``: call an op's entry point with MindSpore's parameter layout."""

    def __init__(self, package: Path, kind: str) -> None:
        self.kind = kind
        self.lib = ctypes.CDLL(str(package / f"_aot_{kind}.so"))
        self.encoding = load_module(package, "_encoding")
        self.layouts = load_module(package, "_signatures").LAYOUTS
        self.last_error_fn = getattr(self.lib, f"opforge_ms_last_error_{kind}")
        self.last_error_fn.restype = ctypes.c_char_p

    def last_error(self) -> str:
        """The adapter's message for the last failed call."""
        return self.last_error_fn().decode()

    def call(
        self,
        op: str,
        params: list[tuple[int, tuple[int, ...], str]],
        attrs: list[tuple[str, object]],
        outputs: list[tuple[int, tuple[int, ...], str]],
        stream: int | None = None,
    ) -> int:
        """Run ``op``: ``params``/``outputs`` are (pointer, shape, dtype name) in order,
        ``attrs`` the (kind, value) items of the attribute input."""
        attr_dims = (0, *self.encoding.encode(attrs))
        placeholder = ctypes.create_string_buffer(1)
        every = [*params, (ctypes.addressof(placeholder), attr_dims, "int8"), *outputs]
        n = len(every)
        pointers = (ctypes.c_void_p * n)(*(p for p, _, _ in every))
        ndims = (ctypes.c_int * n)(*(len(s) for _, s, _ in every))
        shape_arrays = [(ctypes.c_int64 * max(len(s), 1))(*s) for _, s, _ in every]
        shapes = (ctypes.POINTER(ctypes.c_int64) * n)(
            *(ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) for a in shape_arrays)
        )
        dtypes = (ctypes.c_char_p * n)(*(d.encode() for _, _, d in every))
        fn = AOT_SIGNATURE((f"opforge_ms_{op}_{self.kind}", self.lib))
        return fn(n, pointers, ndims, shapes, dtypes, stream, None)


class HostBuffers:
    """numpy arrays as the CPU build's parameters."""

    stream = None

    def __init__(self) -> None:
        self.keep: list[np.ndarray] = []

    def put(self, values: np.ndarray, dtype: str) -> tuple[int, tuple[int, ...], str]:
        """A dense copy of ``values`` (storage dtype) and its parameter triple."""
        array = np.array(values, order="C")
        self.keep.append(array)
        return array.ctypes.data, array.shape, dtype

    def get(self, index: int) -> np.ndarray:
        """The array behind the ``index``-th ``put``."""
        return self.keep[index]

    def sync(self) -> None:
        """Nothing to wait for."""


class DeviceBuffers:
    """CUDA device memory (through torch) and torch's current stream, for the CUDA build."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.stream = torch.cuda.current_stream().cuda_stream
        self.keep: list = []

    def put(self, values: np.ndarray, dtype: str) -> tuple[int, tuple[int, ...], str]:
        """A device copy of ``values`` and its parameter triple (a device pointer)."""
        host = np.array(values, order="C")
        if dtype == "bfloat16":
            device = self.torch.from_numpy(host.view(np.int16)).cuda()
        else:
            device = self.torch.from_numpy(host).cuda()
        self.keep.append((device, host.dtype))
        return device.data_ptr(), tuple(host.shape), dtype

    def get(self, index: int) -> np.ndarray:
        """The ``index``-th buffer copied back to the host (storage dtype)."""
        device, dtype = self.keep[index]
        return device.cpu().numpy().view(dtype)

    def sync(self) -> None:
        """Wait for the device."""
        self.torch.cuda.synchronize()
