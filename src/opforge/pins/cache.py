"""A content-addressed download cache: a file lives at a path derived from its sha256.

Only verified files ever appear under ``sha256/``: downloads land in ``tmp/`` on the same
filesystem and are moved in by an atomic rename once their digest matches.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from opforge.errors import ConfigError
from opforge.pins.digest import hash_file
from opforge.pins.model import Pin

_STALE_PARTIAL_S = 24 * 3600


class CacheState(Enum):
    """What ``verify`` found for one pin."""

    OK = "ok"
    MISSING = "missing"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of re-hashing one cached file."""

    pin: Pin
    state: CacheState
    actual: dict[str, str] | None = None


class ContentCache:
    """The on-disk cache rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "sha256"
        self.tmp = root / "tmp"

    def ensure(self) -> None:
        """Create the cache directories, with a clear error when that is not possible."""
        try:
            self.blobs.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create cache directory {self.root}: {exc.strerror}",
                hint="pass --cache DIR pointing at a writable directory",
            ) from None
        self._drop_stale_partials()

    def _drop_stale_partials(self) -> None:
        # A killed process cannot clean up after itself; its partial download is garbage once
        # no live download could still be writing it.
        cutoff = time.time() - _STALE_PARTIAL_S
        for part in self.tmp.glob("*.part"):
            with contextlib.suppress(OSError):
                if part.stat().st_mtime < cutoff:
                    part.unlink()

    def path_for(self, pin: Pin) -> Path:
        """Where ``pin``'s verified file lives (whether or not it is there yet)."""
        return self.blobs / pin.sha256[:2] / pin.sha256

    def has(self, pin: Pin) -> bool:
        """True when a file is cached under ``pin``'s digest (not re-hashed)."""
        return self.path_for(pin).is_file()

    def new_temp(self, pin: Pin) -> Path:
        """A fresh, empty temporary file for downloading ``pin``."""
        self.ensure()
        fd, name = tempfile.mkstemp(prefix=f"{pin.name}.", suffix=".part", dir=self.tmp)
        os.close(fd)
        return Path(name)

    def commit(self, temp: Path, pin: Pin) -> Path:
        """Move a verified temporary file into place, atomically."""
        dest = self.path_for(pin)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(temp, 0o444)
        os.replace(temp, dest)
        return dest

    def export(self, pin: Pin, dest_dir: Path) -> Path:
        """Place the cached file of ``pin`` in ``dest_dir`` under its own file name.

        A hard link where the filesystem allows (no copy of a large wheel), else a copy; either
        way the file is written to a temporary name first so ``dest_dir`` never holds a partial.
        """
        source = self.path_for(pin)
        dest = dest_dir / pin.filename
        try:
            dest_dir.mkdir(parents=True, exist_ok=True)
            temp = dest_dir / f".{pin.filename}.{os.getpid()}.tmp"
            temp.unlink(missing_ok=True)
            try:
                os.link(source, temp)
            except OSError:
                shutil.copyfile(source, temp)
            os.replace(temp, dest)
        except OSError as exc:
            raise ConfigError(
                f"cannot place {pin.filename} in {dest_dir}: {exc.strerror}",
                hint="pass a writable directory to --dest",
            ) from None
        return dest

    def verify(self, pin: Pin) -> VerifyResult:
        """Re-hash the cached file of ``pin``; a corrupt file is removed so it cannot be used."""
        path = self.path_for(pin)
        if not path.is_file():
            return VerifyResult(pin, CacheState.MISSING)
        algorithms = ("sha256", "md5") if pin.md5 else ("sha256",)
        actual = hash_file(path, algorithms)
        expected = {"sha256": pin.sha256, "md5": pin.md5}
        if any(actual[a] != expected[a] for a in algorithms):
            path.unlink(missing_ok=True)
            return VerifyResult(pin, CacheState.CORRUPT, actual)
        return VerifyResult(pin, CacheState.OK, actual)
