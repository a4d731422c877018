"""The AOT libraries shipped in this package: which one serves the current device, and its errors."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import mindspore as ms

try:
    from mindspore._c_expression import MSContext, ms_ctx_param

    def _device_target() -> str:
        return MSContext.get_instance().get_param(ms_ctx_param.device_target)

except ImportError:  # a MindSpore without that binding: the public call (10 us slower)

    def _device_target() -> str:
        return ms.get_context("device_target")


_HERE = Path(__file__).resolve().parent
# MindSpore's device target -> the library built for it (g++ for CPU, nvcc for CUDA).
_LIBRARIES = {"CPU": "cpu", "GPU": "cuda"}


def device_kind() -> str:
    """``cpu`` or ``cuda``: the AOT build serving MindSpore's current device target."""
    return _kind_for(_device_target())


@functools.cache
def _kind_for(target: str) -> str:
    kind = _LIBRARIES.get(target)
    if kind is None:
        raise RuntimeError(
            f"opforge.mindspore: device target {target!r} is not supported "
            "(the kernel library has CPU and CUDA builds): use ms.set_device('CPU') or 'GPU'"
        )
    if not (_HERE / f"_aot_{kind}.so").is_file():
        raise RuntimeError(
            f"opforge.mindspore: this wheel has no {kind.upper()} build ({_HERE} lacks "
            f"_aot_{kind}.so): build it with `opforge build mindspore-adapter --profile gpu`"
        )
    return kind


def entry(op: str, kind: str) -> str:
    """The ``path:function`` string ops.Custom takes for ``op``'s AOT entry point."""
    return f"{_HERE / f'_aot_{kind}.so'}:opforge_ms_{op}_{kind}"


@functools.cache
def _library(kind: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_HERE / f"_aot_{kind}.so"))
    getter = getattr(lib, f"opforge_ms_last_error_{kind}")
    getter.restype = ctypes.c_char_p
    return lib


def last_error(kind: str | None = None) -> str:
    """The message of the last failed opforge kernel call in this process ("" if none)."""
    kind = kind or device_kind()
    getter = getattr(_library(kind), f"opforge_ms_last_error_{kind}")
    return getter().decode("utf-8", "replace")
