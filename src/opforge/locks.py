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


def _open_lock(directory: Path, name: str) -> int:
    """A descriptor of ``directory``'s lock file ``name``, created if missing.

    Never truncated and never opened through a link (``O_NOFOLLOW``): the file's content is
    unused, and a link planted there would otherwise have opforge create or empty the file it
    points to, wherever that is."""
    path = directory / name
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


# Lock files this process holds, by device and inode: taken again inside (an image build around
# the writing of its context), a lock is held already, where a second flock of the file would
# fail against the first. The callers take locks on their main thread only.
_held: set[tuple[int, int]] = set()


@contextmanager
def hold_locks(
    *directories: Path, writer: str, name: str = ".opforge.lock", what: str | None = None
) -> Iterator[None]:
    """Hold an exclusive lock (file ``name``) on each of ``directories`` (which exist) while
    the block runs, or fail at once naming the one (or ``what``) another opforge ``writer``
    ("build", "image build") holds."""
    with ExitStack() as stack:
        for directory in directories:
            handle = _open_lock(directory, name)
            info = os.fstat(handle)
            key = (info.st_dev, info.st_ino)
            if key in _held:
                os.close(handle)
                continue
            stack.callback(os.close, handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BuildError(
                    f"another opforge {writer} is writing {what or directory}",
                    hint="wait for it to finish",
                ) from None
            _held.add(key)
            stack.callback(_held.discard, key)
        yield
