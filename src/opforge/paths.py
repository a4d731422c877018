"""Where an opforge project is (the nearest directory holding its marker file), and the folders
opforge writes in it."""

from __future__ import annotations

import os
from pathlib import Path

from opforge.errors import ConfigError
from opforge.links import follow_links, loops

PROJECT_MARKER = "checksums.yaml"
# The folders opforge writes in a project: build trees and logs (unless OPFORGE_BUILD_DIR moves
# them), and the installed outputs with the build record.
BUILD_DIR = "build"
DIST_DIR = "dist"


def resolved(path: Path, what: str) -> Path:
    """``path`` with its links followed; a loop of links is a ConfigError naming ``what``
    (the flag or variable that gave it)."""
    real = follow_links(path)
    if real is None:
        raise ConfigError(
            f"{what} {path} is a loop of symbolic links",
            hint=f"remove or repoint the links on the way to {path}",
        )
    return real


def not_a_file(path: Path) -> str:
    """What ``path``, which is there but is no regular file (links followed), is instead."""
    if loops(path):
        return "a loop of symbolic links"
    if path.is_symlink() and not path.exists():
        return "a link to nothing"
    return "a directory" if path.is_dir() else "not a regular file"


def find_project_root(start: Path) -> Path:
    """Return the nearest directory at or above ``start`` holding checksums.yaml."""
    here = resolved(start, "the directory")
    for candidate in (here, *here.parents):
        marker = candidate / PROJECT_MARKER
        if marker.is_file():
            return candidate
        if os.path.lexists(marker):
            raise ConfigError(
                f"{marker} is {not_a_file(marker)}, where an opforge project's pins file would be",
                hint="replace it with the pins file, or give `opforge --project DIR`",
            )
    raise ConfigError(
        f"no opforge project found at or above {here} (looked for {PROJECT_MARKER})",
        hint="run opforge from inside the project checkout, or give `opforge --project DIR` "
        "(or OPFORGE_PROJECT)",
    )
