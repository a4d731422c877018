"""Creating the directories opforge writes (build trees, image contexts, ``dist/``).

``Path.mkdir`` fails with ``FileExistsError`` or ``NotADirectoryError`` when a file stands where
the directory or one of its parents should be (``OPFORGE_BUILD_DIR`` naming a file, say);
``make_dirs`` turns that, and any other OS failure, into a one-line error naming the path.
"""

from __future__ import annotations

from pathlib import Path

from opforge.errors import ConfigError, OpforgeError
from opforge.links import loops

BUILD_DIR_HINT = (
    "set OPFORGE_BUILD_DIR to a directory (build trees and image contexts go there, "
    "else under <project>/build)"
)


def not_a_directory(path: Path) -> Path | None:
    """The nearest of ``path`` and its parents that exists and is not a directory, if any."""
    for candidate in (path, *path.parents):
        try:
            if candidate.exists() or candidate.is_symlink():
                return None if candidate.is_dir() else candidate
        except OSError:  # a name too long to look up, say: mkdir's own error says it
            continue
    return None


def make_dirs(
    path: Path, *, hint: str | None = None, error: type[OpforgeError] = ConfigError
) -> Path:
    """Create ``path`` and its missing parents (an existing directory is fine) and return it.

    A failure raises ``error`` naming ``path`` (and the file in its way, if that is why);
    ``hint`` says where else the directory may go.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = not_a_directory(path)
        if blocker is None:
            raise error(f"cannot create directory {path}: {exc.strerror}", hint=hint) from None
        if loops(blocker):
            raise error(
                f"cannot create directory {path}: {blocker} is a loop of symbolic links",
                hint=f"remove or repoint {blocker}, or {hint}" if hint else f"remove {blocker}",
            ) from None
        what = "it exists" if blocker == path else f"{blocker} exists"
        # A device or a pipe (/dev/null) is no file of the user's to move.
        ordinary = blocker.is_file() or blocker.is_symlink()
        move = f"move {blocker} away" if ordinary else f"choose a place other than {blocker}"
        raise error(
            f"cannot create directory {path}: {what} and is not a directory",
            hint=f"{move}, or {hint}" if hint else move,
        ) from None
    return path
