"""Where things live: the project root, its standard files, and the download cache."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from opforge.errors import ConfigError

PROJECT_MARKER = "checksums.yaml"


def find_project_root(start: Path | None = None) -> Path:
    """Return the nearest directory at or above ``start`` (default: cwd) holding checksums.yaml.

    ``OPFORGE_PROJECT`` overrides the search, so the CLI can be pointed at a tree from outside it.
    """
    override = os.environ.get("OPFORGE_PROJECT")
    if override:
        root = Path(override).resolve()
        if not (root / PROJECT_MARKER).is_file():
            raise ConfigError(
                f"OPFORGE_PROJECT={override} has no {PROJECT_MARKER}",
                hint="point OPFORGE_PROJECT at the root of an opforge checkout, or unset it",
            )
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_MARKER).is_file():
            return candidate
    raise ConfigError(
        f"no opforge project found at or above {here} (looked for {PROJECT_MARKER})",
        hint="run opforge from inside the project checkout, or set OPFORGE_PROJECT",
    )


def default_cache_dir() -> Path:
    """The per-user download cache: ``OPFORGE_CACHE`` if set, else the platform's user cache dir."""
    override = os.environ.get("OPFORGE_CACHE")
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("opforge", appauthor=False))
