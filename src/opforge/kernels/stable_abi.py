"""The check that a torch extension uses LibTorch's stable ABI alone.

An extension built against the stable ABI loads into every torch from its target version on only
if every symbol it takes from torch is part of that ABI: the C shim (``aoti_torch_*``,
``torch_*``). Anything else it may take from the C and C++ runtimes (versioned symbols of glibc,
libstdc++, libgcc) and from the kernel library (``opforge_*``). Any other undefined symbol (a
``c10::`` or ``at::`` function, say) ties the build to one torch: the build fails naming it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from opforge.errors import BuildError

_ALLOWED = re.compile(
    r"^(aoti_torch_\w+|torch_\w+|opforge_\w+|__gmon_start__|_ITM_\w+|__cxa_finalize)$"
    r"|@(GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+$"
)


def undefined_symbols(path: Path) -> list[str]:
    """The undefined dynamic symbols of ``path`` (``nm -D --undefined-only``), with versions."""
    nm = shutil.which("nm")
    if nm is None:
        raise BuildError("nm (binutils) is not installed", hint="install binutils")
    result = subprocess.run(
        [nm, "-D", "--undefined-only", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(
            f"nm cannot read {path}",
            hint="nm comes with binutils; install it, or check that the build made the file",
            details=[f"  {line}" for line in result.stderr.strip().splitlines()],
        )
    return [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]


def foreign_symbols(path: Path) -> list[str]:
    """The undefined symbols of ``path`` outside the stable ABI and the runtimes."""
    return [s for s in undefined_symbols(path) if not _ALLOWED.search(s)]


def check(path: Path) -> None:
    """Raise BuildError naming the first symbol of ``path`` outside LibTorch's stable ABI."""
    foreign = foreign_symbols(path)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise BuildError(
            f"{path.name} uses {foreign[0]}{more}, which is outside LibTorch's stable ABI: the "
            "extension would be tied to the torch it was built with",
            hint="use only torch/csrc/stable and the C shim in adapters/torch/csrc",
        )
