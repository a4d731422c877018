"""Replacing a file whole: readers see the old content or the new, never a partial write."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opforge.errors import ConfigError


@contextmanager
def replacing(path: Path, *, keep_mode: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` for the caller to write; renamed over ``path`` when the
    block ends, removed if it raises. ``keep_mode``: the new file gets the old one's permissions
    (mkstemp creates 0600). A symbolic link at ``path`` is replaced, never written through: a
    link in a clone must not carry a write out of the project."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        if keep_mode and path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        else:
            # What a plain open() would have created, instead of mkstemp's owner-only mode.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, *, keep_mode: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; an OS failure is a ``ConfigError``."""
    try:
        with replacing(path, keep_mode=keep_mode) as temp:
            temp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write {path}: {exc.strerror}",
            hint=f"check that {path.parent} exists and you can write there (permissions, space)",
        ) from None
