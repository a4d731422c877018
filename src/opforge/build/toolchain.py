"""Finding build tools and their versions (part of every target's input fingerprint).

One rule picks each tool, whatever shell opforge runs from, so alternating shells do not flip
the toolchain: an explicit override (``$CXX``, ``$CUDACXX``) first, then the script directory of
the Python environment running opforge (where ``pip install cmake ninja`` puts them), then
``PATH``. ``opforge doctor`` shows what the rule picked and why.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import selectors
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import BuildError, ToolMissing
from opforge.settings import TOOL_VARIABLES

_CUDA_HOMES = ("/usr/local/cuda/bin",)
_FROM_ENVIRONMENT = ("cmake", "ninja")

# Where each tool is looked for, in order (what `opforge doctor` prints when one is missing).
TOOL_RULE = {
    "cmake": "this Python's environment, PATH",
    "ninja": "this Python's environment, PATH",
    "c++": "$CXX, else c++ on PATH",
    "nvcc": "$CUDACXX, else PATH, " + ", ".join(_CUDA_HOMES),
}

_INSTALL_HINTS = {
    "cmake": "pip install cmake (or apt-get install cmake)",
    "ninja": "pip install ninja (or apt-get install ninja-build)",
    "c++": "install a C++ compiler (apt-get install g++) or set CXX",
    "nvcc": "install the CUDA toolkit or the nvidia-cuda-nvcc wheel, or set CUDACXX",
}


@dataclass(frozen=True)
class Tool:
    """A located tool: its name, absolute path, one-line version and where it was found."""

    name: str
    path: Path
    version: str
    origin: str = ""


def environment_script_dirs() -> list[Path]:
    """The script directories of the Python running opforge: its venv's ``bin/`` (or the
    system scheme's), then the user scheme's when user site-packages are enabled."""
    dirs = [Path(sysconfig.get_path("scripts"))]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")))
    return list(dict.fromkeys(dirs))


def _locate(name: str, override: str | None) -> tuple[str, str] | None:
    """(path, origin) of ``name`` by the rule in the module docstring, or ``None``."""
    if override:
        found = shutil.which(override)
        return (found, f"${TOOL_VARIABLES[name]}") if found else None
    if name in _FROM_ENVIRONMENT:
        for directory in environment_script_dirs():
            found = shutil.which(name, path=str(directory))
            if found:
                return found, "this Python's environment"
    found = shutil.which(name)
    if found:
        return found, "PATH"
    if name == "nvcc":
        found = shutil.which(name, path=os.pathsep.join(_CUDA_HOMES))
        if found:
            return found, "the CUDA home"
    return None


_VERSION_CHARS = 1 << 16  # of a tool's --version output, read for its version line
_VERSION_BYTES = 1 << 20  # more than any compiler prints for --version: not a compiler


def _version_line(name: str, output: str) -> str:
    # Printed by doctor and in build errors: a control character (an escape sequence) would act
    # on the terminal, so each shows as "?".
    output = "".join(c if c.isprintable() or c in "\n\t" else "?" for c in output[:_VERSION_CHARS])
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if name == "nvcc":
        release = [line for line in lines if "release" in line]
        return release[-1] if release else (lines[-1] if lines else "unknown")
    return lines[0] if lines else "unknown"


@functools.cache
def find_tool(name: str, override: str | None = None) -> Tool | None:
    """Locate ``name`` (``override``: the value of its variable, ``TOOL_VARIABLES``) and read its
    version once per process; ``None`` when absent, or when ``--version`` fails (``/bin/false``
    given as the compiler is no compiler)."""
    located = _locate(name, override)
    if located is None:
        return None
    path, origin = located
    output = _version_output(path)
    if output is None or (name == "nvcc" and _NVCC_RELEASE not in output):
        # Any program whose --version succeeds passed as nvcc (/bin/sleep, "Written by ...").
        return None
    return Tool(name, Path(path), _version_line(name, output), origin)


_NVCC_RELEASE = "Cuda compilation tools, release "
NOT_THE_TOOL = "not an executable, `--version` failed or took over 30 s, or it is not that tool"


def _version_output(path: str) -> str | None:
    """What ``path --version`` prints (any bytes, decoded with replacements), or None when it
    cannot run, fails, prints over 1 MiB or takes over 30 s; then its whole process group is
    ended, so a wrapper script leaves no child behind."""
    try:
        process = subprocess.Popen(
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    out = bytearray()
    with process, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left) or len(out) > _VERSION_BYTES:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                return None
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            out += chunk
        try:
            code = process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            return None
    return out.decode("utf-8", errors="replace") if code == 0 else None


def require_tool(name: str, why: str, override: str | None = None) -> Tool:
    """Locate ``name`` (as ``find_tool``) or raise ``ToolMissing`` saying what needs it and how
    to install it."""
    tool = find_tool(name, override)
    if tool is not None:
        return tool
    if override:
        variable = TOOL_VARIABLES[name]
        raise ToolMissing(
            f"{name}: ${variable}={override} does not run as {name} ({NOT_THE_TOOL}; {why})",
            hint=f"point {variable} at the {name} to use, or unset it",
        )
    where = "on PATH"
    if name in _FROM_ENVIRONMENT:
        where = f"in the environment of {sys.executable} or on PATH"
    raise ToolMissing(f"{name} not found {where} ({why})", hint=_INSTALL_HINTS.get(name))


def require_python_package(name: str, why: str) -> Tool:
    """The version of python package ``name`` in this interpreter, or ``ToolMissing``;
    ``BuildError`` when ``name`` is not a distribution name at all."""
    try:
        version = importlib.metadata.version(name)
    except ValueError:
        # importlib.metadata refuses an empty name outright; recipe validation refuses every
        # name that is not a distribution's, and this keeps any caller's slip one line too.
        raise BuildError(
            f"python package {name!r} is not a distribution name ({why})",
            hint="fix python_packages in the recipe: distribution names such as torch",
        ) from None
    except importlib.metadata.PackageNotFoundError:
        raise ToolMissing(
            f"python package {name} is not installed in {sys.executable} ({why})",
            hint=f"{sys.executable} -m pip install {name}, or build only the targets that do not "
            "need it (opforge build TARGET...)",
        ) from None
    return Tool(f"python:{name}", Path(sys.executable), version, "this Python")
