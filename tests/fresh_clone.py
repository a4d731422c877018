"""A fresh clone of this checkout for tests that must see what a new user sees."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO


def fresh_clone(dest: Path) -> Path:
    """Copy what a clone of this working tree holds (tracked files and new files git does not
    ignore, as they are now) to ``dest``: no dist/, build/, .nox/ or venv."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return dest
