"""Locks on the directories opforge writes, so two runs never write one at once: the second
fails at once, naming the directory, rather than waiting or mixing its files in."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from opforge.errors import BuildError


def _open_lock(directory: Path) -> int:
    """A descriptor of ``directory``'s lock file, created if missing.

    Never truncated and never opened through a link (``O_NOFOLLOW``): the file's content is
    unused, and a link planted there would otherwise have opforge create or empty the file it
    points to, wherever that is."""
    path = directory / ".opforge.lock"
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BuildError(
                f"{path} is a symbolic link: opforge locks a file of its own there",
                hint=f"remove the link {path}",
            ) from None
        raise BuildError(
            f"cannot create the build lock {path}: {exc.strerror}",
            hint=f"make {directory} writable for you (permissions, chattr -i, free space)",
        ) from None


# Directories this process holds: taken again inside (an image build around the writing of its
# context), a lock is held already; a second flock of the file would fail against the first.
_held: set[Path] = set()


@contextmanager
def hold_locks(*directories: Path, writer: str) -> Iterator[None]:
    """Hold an exclusive lock on each of ``directories`` (which exist) while the block runs, or
    fail at once naming the one another opforge ``writer`` ("build", "image build") holds."""
    with ExitStack() as stack:
        for directory in directories:
            key = directory.resolve()
            if key in _held:
                continue
            handle = _open_lock(directory)
            stack.callback(os.close, handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BuildError(
                    f"another opforge {writer} is writing {directory}",
                    hint="wait for it to finish",
                ) from None
            _held.add(key)
            stack.callback(_held.discard, key)
        yield
