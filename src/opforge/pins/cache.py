"""A content-addressed download cache: a file lives at a path derived from its sha256.

Only verified files are ever moved under ``sha256/``: downloads land in ``tmp/`` on the same
filesystem and are moved in by an atomic rename once their digest matches. The cache is a
convenience, never a trust anchor: a cached file is re-verified (type, size, digests) every time
it is used, and one that fails is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from opforge.errors import ConfigError, PinError
from opforge.pins.digest import hash_stream
from opforge.pins.model import Pin

_STALE_PARTIAL_S = 24 * 3600
_WHEEL_LINKS = "wheels-"  # tmp/'s folders of links ``wheel_links`` makes
_LOCK_POLL_S = 0.2
_WRITABLE_HINT = "pass --cache DIR pointing at a writable directory"


class CacheState(Enum):
    """What ``verify`` found for one pin."""

    OK = "ok"
    MISSING = "missing"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of checking one cached file; ``problem`` says what a corrupt one was."""

    pin: Pin
    state: CacheState
    actual: dict[str, str] | None = None
    problem: str = ""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _not_a_partial(path: Path) -> ConfigError:
    """The error for a partial download's name taken by a link, a folder or a pipe."""
    return ConfigError(
        f"cache entry {path} is not a regular file",
        hint=f"remove it (rm -r {path}); it holds no download of opforge's",
    )


class ContentCache:
    """The on-disk cache rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "sha256"
        self.tmp = root / "tmp"

    def check_root(self) -> None:
        """``ConfigError`` when the cache root (or the nearest part of it that exists) is not a
        directory, e.g. OPFORGE_CACHE naming a file: nothing inside it can ever be created."""
        for path in (self.root, *self.root.parents):
            try:
                mode = path.stat().st_mode
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                return  # unreadable: mkdir and its error say more
            if not stat.S_ISDIR(mode):
                raise ConfigError(
                    f"cache root {self.root} is not a directory ({path} is a file)"
                    if path != self.root
                    else f"cache root {self.root} is not a directory",
                    hint="set OPFORGE_CACHE (or pass --cache) to a directory",
                )
            return

    def ensure(self) -> None:
        """Create the cache directories, with a clear error when that is not possible."""
        self.check_root()
        for directory in (self.blobs, self.tmp):
            self._make_directory(directory)
        self._drop_stale_partials()

    @classmethod
    def _make_directory(cls, directory: Path) -> None:
        """Create ``directory`` of the cache (and its parents) unless there; ``ConfigError``
        when that fails or what stands there is not a directory of its own."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            pass  # something that is not a directory: _check_directory names it
        except OSError as exc:
            raise ConfigError(
                f"cannot create cache directory {directory}: {exc.strerror}",
                hint=_WRITABLE_HINT,
            ) from None
        cls._check_directory(directory)

    @staticmethod
    def _check_directory(directory: Path) -> None:
        # Links inside the cache are refused: the stale-partial sweep deletes files in tmp/, and
        # verify removes corrupt files in the shard folders; neither may act somewhere else.
        info = directory.lstat()
        if stat.S_ISLNK(info.st_mode):
            raise ConfigError(
                f"cache directory {directory} is a symbolic link; opforge does not follow links "
                "inside its cache",
                hint=f"remove the link ({directory}); to keep the cache elsewhere, point --cache "
                "or OPFORGE_CACHE there",
            )
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigError(
                f"cache directory {directory} is not a directory",
                hint=f"remove {directory}; opforge recreates it",
            )

    def _drop_stale_partials(self) -> None:
        # A killed process cannot clean up after itself; its partial download is garbage once it
        # is old and no live download holds its lock. Work through a descriptor of tmp/ itself so
        # that nothing outside it is touched even if tmp/ were swapped for a link meanwhile.
        cutoff = time.time() - _STALE_PARTIAL_S
        try:
            tmp_fd = os.open(self.tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            for name in os.listdir(tmp_fd):
                if name.startswith(_WHEEL_LINKS):
                    _drop_stale_links(tmp_fd, name, cutoff)
                if not name.endswith(".part"):
                    continue
                with contextlib.suppress(OSError):
                    info = os.stat(name, dir_fd=tmp_fd, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=tmp_fd)
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            os.unlink(name, dir_fd=tmp_fd)
                        finally:
                            os.close(fd)
        finally:
            os.close(tmp_fd)

    @contextlib.contextmanager
    def wheel_links(self, pins: list[Pin]) -> Iterator[list[Path]]:
        """Links named as the pins' files (pip takes a wheel by its name; one file name each)
        to their cached files, in a folder of the cache's tmp/ that goes when the block ends (a
        killed run's, with the stale partials): no copies. A cache whose tmp/ cannot be
        written (read-only, or another user's) gets the folder in $TMPDIR instead."""
        try:
            folder = Path(tempfile.mkdtemp(prefix=_WHEEL_LINKS, dir=self.tmp))
        except OSError:
            folder = Path(tempfile.mkdtemp(prefix=f"opforge-{_WHEEL_LINKS}"))
        try:
            links = []
            for pin in pins:
                link = folder / pin.filename
                link.symlink_to(self.path_for(pin).resolve())
                links.append(link)
            yield links
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def path_for(self, pin: Pin) -> Path:
        """Where ``pin``'s verified file lives (whether or not it is there yet)."""
        return self.blobs / pin.sha256[:2] / pin.sha256

    def has(self, pin: Pin) -> bool:
        """True when a regular file is cached under ``pin``'s digest, of the pin's size where it
        records one (not re-hashed: ``verify`` does that). Not through a shard directory that
        is a link, which ``verify`` and ``fetch`` refuse."""
        path = self.path_for(pin)
        if path.parent.is_symlink():
            return False
        try:
            info = path.lstat()
        except OSError:
            return False
        return stat.S_ISREG(info.st_mode) and pin.size in (None, info.st_size)

    def holds_entry(self, pin: Pin) -> bool:
        """True when anything at all sits at ``pin``'s place in the cache."""
        return os.path.lexists(self.path_for(pin))

    def verify(self, pin: Pin) -> VerifyResult:
        """Check the cached file of ``pin`` (a regular file, its size, its digests).

        A file that fails is removed so it cannot be used; an entry that cannot be removed (a
        directory, a read-only cache) is a ``PinError`` naming it.
        """
        path = self.path_for(pin)
        if os.path.lexists(path.parent):
            # A link as a shard directory would have files read, written and removed elsewhere.
            self._check_directory(path.parent)
        try:
            info = path.lstat()
        except FileNotFoundError:
            return VerifyResult(pin, CacheState.MISSING)
        except NotADirectoryError:
            self.check_root()
            raise PinError(
                f"pin {pin.name}: cache directory {path.parent} is not a directory",
                hint=f"remove {path.parent}; opforge recreates it",
            ) from None
        except OSError as exc:
            raise PinError(
                f"pin {pin.name}: cannot read {path}: {exc.strerror}",
                hint=_unreadable_hint(exc),
            ) from None
        if stat.S_ISDIR(info.st_mode):
            raise PinError(
                f"pin {pin.name}: cache entry {path} is a directory, not a file",
                hint=f"remove it (rm -r {path}); opforge downloads the file again",
            )
        if not stat.S_ISREG(info.st_mode):
            return self._discard(pin, path, f"a {_kind(info.st_mode)}, not a regular file")
        try:
            # O_NOFOLLOW and fstat: what is hashed is the regular file just checked, even if the
            # entry is swapped meanwhile; O_NONBLOCK: a pipe put there cannot hang the open.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise PinError(
                f"pin {pin.name}: cannot read {path}: {exc.strerror}",
                hint=_unreadable_hint(exc),
            ) from None
        with os.fdopen(fd, "rb", buffering=0) as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return self._discard(pin, path, f"a {_kind(info.st_mode)}, not a regular file")
            algorithms = ("sha256", "md5") if pin.md5 else ("sha256",)
            if pin.size is not None and info.st_size != pin.size:
                # Hashed before anything is removed: a pins file's wrong size must not cost the
                # shared cache a file whose digests are right.
                if hash_stream(stream, algorithms) == _pinned_digests(pin, algorithms):
                    raise PinError(
                        f"pin {pin.name}: its size is {pin.size} in the pins file, but the file "
                        f"with its digests has {info.st_size} bytes",
                        hint=f"correct the size of {pin.name} in the pins file to {info.st_size}",
                    )
                return self._discard(pin, path, f"{info.st_size} bytes, expected {pin.size}")
            actual = hash_stream(stream, algorithms)
        expected = _pinned_digests(pin, algorithms)
        for algorithm in algorithms:
            if actual[algorithm] != expected[algorithm]:
                problem = f"{algorithm} {actual[algorithm]}, expected {expected[algorithm]}"
                return self._discard(pin, path, problem, actual)
        return VerifyResult(pin, CacheState.OK, actual)

    @staticmethod
    def _discard(
        pin: Pin, path: Path, problem: str, actual: dict[str, str] | None = None
    ) -> VerifyResult:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PinError(
                f"pin {pin.name}: cached file {path} is corrupt ({problem}) and cannot be "
                f"removed: {exc.strerror}",
                hint=f"remove it by hand, or {_WRITABLE_HINT}",
            ) from None
        return VerifyResult(pin, CacheState.CORRUPT, actual, problem)

    @contextlib.contextmanager
    def partial(
        self,
        pin: Pin,
        wait_s: float,
        on_wait: Callable[[], None] = lambda: None,
        pause: Callable[[float], None] = time.sleep,
    ) -> Iterator[Path]:
        """The partial download of ``pin`` (``tmp/<sha256>.part``), locked while in use.

        The name is fixed so that a download a killed process left behind is resumed by the next
        one; the lock keeps two processes from writing it at once (the second waits up to
        ``wait_s`` seconds, in calls of ``pause``, which may raise to stop waiting). The caller
        removes the file, or leaves it to be resumed.
        """
        self.ensure()
        path = self.tmp / f"{pin.sha256}.part"
        give_up = time.monotonic() + wait_s
        waited = False
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as exc:
                if path.is_symlink() or path.exists():
                    raise _not_a_partial(path) from None
                raise ConfigError(
                    f"cannot write to cache directory {self.tmp}: {exc.strerror}",
                    hint=_WRITABLE_HINT,
                ) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise _not_a_partial(path)  # a pipe would take the download and hang it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if not waited:
                    on_wait()
                    waited = True
                if time.monotonic() > give_up:
                    raise PinError(
                        f"pin {pin.name}: another process kept downloading it for over "
                        f"{wait_s:g} s",
                        hint="let that download finish, or stop it",
                    ) from None
                pause(_LOCK_POLL_S)
                continue
            # The holder before us may have committed (renamed) the file we opened: then ours is
            # a stale name for the cached blob, and the lock must be taken on a fresh partial.
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino:
                    break
            os.close(fd)
        try:
            yield path
        finally:
            # An empty partial is no use to a later run; the inode check leaves alone a file
            # another process made at this name after ours was committed.
            with contextlib.suppress(OSError):
                now = os.stat(path, follow_symlinks=False)
                if now.st_ino == os.fstat(fd).st_ino and now.st_size == 0:
                    os.unlink(path)
            os.close(fd)

    def new_temp(self) -> Path:
        """A fresh, empty temporary file in ``tmp/`` (for downloads that must not be resumed)."""
        self.ensure()
        try:
            fd, name = tempfile.mkstemp(prefix="fresh.", suffix=".part", dir=self.tmp)
        except OSError as exc:
            raise ConfigError(
                f"cannot write to cache directory {self.tmp}: {exc.strerror}", hint=_WRITABLE_HINT
            ) from None
        os.close(fd)
        return Path(name)

    def commit(self, temp: Path, pin: Pin) -> Path:
        """Move a verified temporary file into place, atomically."""
        dest = self.path_for(pin)
        self._make_directory(dest.parent)
        try:
            os.chmod(temp, 0o444)
            os.replace(temp, dest)
        except OSError as exc:
            raise PinError(
                f"pin {pin.name}: cannot store the verified file at {dest}: {exc.strerror}",
                hint=f"check {self.blobs} (a writable directory of directories), or "
                f"{_WRITABLE_HINT}",
            ) from None
        return dest

    def export(self, pin: Pin, dest_dir: Path) -> Path:
        """Place a copy of the cached file of ``pin`` in ``dest_dir`` under its own file name.

        A copy, never a hard link: editing the placed file must not touch the cache. Where the
        filesystem can share extents (btrfs, XFS), the copy is a reflink and costs no space. It
        is written to a temporary name first so ``dest_dir`` never holds a partial file.
        """
        source = self.path_for(pin)
        dest = dest_dir / pin.filename
        if _holds_another_file(dest, pin):
            raise ConfigError(
                f"cannot place {pin.filename} in {dest_dir}: a different file of that name is "
                "there",
                hint=f"move or remove {dest} if it is not needed, or pass another --dest",
            )
        # A short name of its own: the file's name may already be near the 255-byte limit.
        temp = dest_dir / f".opforge.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            dest_dir.mkdir(parents=True, exist_ok=True)
            _clone_or_copy(source, temp)
            os.replace(temp, dest)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            in_the_way = dest.is_dir() and not dest.is_symlink()
            raise ConfigError(
                f"cannot place {pin.filename} in {dest_dir}: "
                + ("a folder of that name is in the way" if in_the_way else exc.strerror),
                hint=f"remove the folder {dest}"
                if in_the_way
                else "pass --dest a writable directory with room for it",
            ) from None
        return dest


def _unreadable_hint(exc: OSError) -> str:
    """The hint for a cache entry that cannot be read: a loop of links on the way (the cache
    given as one, say) is no matter of permissions."""
    if exc.errno == errno.ELOOP:
        return f"a link on the way to the cache loops: remove or repoint it, or {_WRITABLE_HINT}"
    return f"check its permissions, or {_WRITABLE_HINT}"


def _holds_another_file(dest: Path, pin: Pin) -> bool:
    """Whether ``dest`` is a file (or a link to one) whose content is not ``pin``'s, or might not
    be: placing the pin there would lose it. An earlier placement of the same file is
    replaced."""
    try:
        # O_NONBLOCK: a pipe of that name cannot hang the open.
        fd = os.open(dest, os.O_RDONLY | os.O_NONBLOCK)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return False  # a folder or a device: the placement itself says what is wrong
        with os.fdopen(fd, "rb", buffering=0) as stream:
            if pin.size is not None and info.st_size != pin.size:
                return True
            return hash_stream(stream)["sha256"] != pin.sha256
    except OSError as exc:
        # Nothing there (or a loop of links, which the placement replaces): nothing to lose.
        # A file that cannot be read may be anything, and is kept.
        return exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def _drop_stale_links(tmp_fd: int, name: str, cutoff: float) -> None:
    """Remove ``name``, a folder of links ``wheel_links`` made in tmp/ (``tmp_fd``), when it is
    older than ``cutoff``: its run was killed. Only links are removed, never what they point
    to, and nothing through a link."""
    with contextlib.suppress(OSError):
        info = os.stat(name, dir_fd=tmp_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode) or info.st_mtime >= cutoff:
            return
        folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tmp_fd)
        try:
            for entry in os.listdir(folder):
                if stat.S_ISLNK(os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode):
                    os.unlink(entry, dir_fd=folder)
        finally:
            os.close(folder)
        os.rmdir(name, dir_fd=tmp_fd)


# linux/fs.h's FICLONE: make the destination share the source's extents (a reflink).
_FICLONE = 0x40049409


def _clone_or_copy(source: Path, dest: Path) -> None:
    """``dest`` (created, never overwritten) with the content of ``source``: a reflink where
    the filesystem offers one, else a byte copy."""
    with open(source, "rb") as src, open(dest, "xb") as out:
        try:
            fcntl.ioctl(out.fileno(), _FICLONE, src.fileno())
        except OSError:
            shutil.copyfileobj(src, out, 4 << 20)


def _pinned_digests(pin: Pin, algorithms: tuple[str, ...]) -> dict[str, str | None]:
    """The digests ``pin`` names, by algorithm, as ``hash_stream`` gives them."""
    pinned = {"sha256": pin.sha256, "md5": pin.md5}
    return {algorithm: pinned[algorithm] for algorithm in algorithms}
