"""Installing wheel files with this interpreter's pip."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from opforge.errors import OpforgeError


def pip_install(files: Sequence[Path], what: str, target: Path | None = None) -> None:
    """``pip install --no-deps --no-index`` the given wheel files (into ``target`` if given).

    ``--no-deps``: every dependency is pinned and installed on its own, so pip never resolves
    (and never picks an unpinned release). ``--force-reinstall``: a rebuilt wheel of the same
    version replaces the installed one.
    """
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        "--force-reinstall",
    ]
    if target is not None:
        command += ["--target", str(target)]
    result = subprocess.run(
        [*command, *map(str, files)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OpforgeError(
            f"pip could not install {what}: {last}",
            hint=f"run `{sys.executable} -m pip install --no-deps` on the files by hand to see why",
        )
