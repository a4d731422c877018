"""Following symbolic links without being caught in a loop of them."""

from __future__ import annotations

import errno
from pathlib import Path


def follow_links(path: Path) -> Path | None:
    """``path`` absolute with its links followed (as far as it exists), or None where links
    loop."""
    try:
        # Strict, to see a loop: Python 3.13's non-strict resolve() returns a partly resolved
        # path where earlier versions raised.
        return path.resolve(strict=True)
    except RuntimeError:  # a loop, before Python 3.13
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
    try:  # not there yet (or unreadable): as far as it resolves
        return path.resolve(strict=False)
    except (RuntimeError, OSError):  # a loop further on, before Python 3.13
        return None


def loops(path: Path) -> bool:
    """Whether ``path`` is a link whose links, followed, loop."""
    return path.is_symlink() and follow_links(path) is None
