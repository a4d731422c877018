"""Finding build tools and their versions (part of every target's input fingerprint)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ToolMissing

_CUDA_HOMES = ("/usr/local/cuda/bin",)

_INSTALL_HINTS = {
    "cmake": "pip install cmake (or apt-get install cmake)",
    "ninja": "pip install ninja (or apt-get install ninja-build)",
    "c++": "install a C++ compiler (apt-get install g++) or set CXX",
    "nvcc": "install the CUDA toolkit or the nvidia-cuda-nvcc wheel, or set CUDACXX",
}


@dataclass(frozen=True)
class Tool:
    """A located tool: its name, absolute path and one-line version."""

    name: str
    path: Path
    version: str


def _locate(name: str) -> str | None:
    if name == "c++":
        return shutil.which(os.environ.get("CXX", "c++"))
    if name == "nvcc":
        override = os.environ.get("CUDACXX")
        if override:
            return shutil.which(override)
        return shutil.which("nvcc") or shutil.which("nvcc", path=os.pathsep.join(_CUDA_HOMES))
    return shutil.which(name)


def _version_line(name: str, output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if name == "nvcc":
        release = [line for line in lines if "release" in line]
        return release[-1] if release else (lines[-1] if lines else "unknown")
    return lines[0] if lines else "unknown"


@functools.cache
def find_tool(name: str) -> Tool | None:
    """Locate ``name`` and read its version once per process; ``None`` when absent."""
    path = _locate(name)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Tool(name, Path(path), _version_line(name, out))


def require_tool(name: str, why: str) -> Tool:
    """Locate ``name`` or raise ``ToolMissing`` saying what needs it and how to install it."""
    tool = find_tool(name)
    if tool is None:
        raise ToolMissing(f"{name} not found on PATH ({why})", hint=_INSTALL_HINTS.get(name))
    return tool


def require_python_package(name: str, why: str) -> Tool:
    """The version of python package ``name`` in this interpreter, or ``ToolMissing``."""
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise ToolMissing(
            f"python package {name} is not installed in {sys.executable} ({why})",
            hint=f"{sys.executable} -m pip install {name}, or build only the targets that do not "
            "need it (opforge build TARGET...)",
        ) from None
    return Tool(f"python:{name}", Path(sys.executable), version)
